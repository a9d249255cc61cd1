"""Fixed upstream headers (MCP_SHIM_UPSTREAM_HEADERS) reach real servers on
every request of every HTTP upstream kind, and a fixed Authorization
replaces the client's, which the upstream then never sees.

The servers are the official SDKs' own: the legacy fixture (mcp 1.x,
Streamable HTTP), the modern fixture (mcp 2.x, 2026-07-28 HTTP) and the
TypeScript SDK's server-everything over HTTP+SSE (2024-11-05: the GET
stream and the POSTs). Between the gateway and each, the recording proxy of
tests/integration/recording_proxy.py keeps the headers as the server
received them. The legacy case takes the headers from a settings file
(MCP_SHIM_CONFIG, a .toml file) whose Authorization is read from a secret
file, so the whole path, file to wire, is the one operators use.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.everything import everything_sse
from tests.integration.recording_proxy import Record, RecordingProxy

pytestmark = pytest.mark.peers

GATEWAY_TOKEN = "Bearer gateway-secret-7f3a"
CLIENT_TOKEN = "Bearer client-token-91c2"
TENANT = "acme"


def _call(base: str, name: str, arguments: dict[str, object]) -> dict[str, object]:
    """A 2026-07-28 client's tools/call with its own Authorization; its answer."""
    message = wire.body("tools/call", {"name": name, "arguments": arguments})
    headers = {**wire.headers_for(message), "authorization": CLIENT_TOKEN}
    with httpx.Client(timeout=30.0) as client:
        response = wire.post(client, base + "/mcp", message, headers)
    assert response.status_code == 200, response.text
    answer = wire.answer_messages(response)[-1]
    assert "result" in answer, answer
    return answer


def _check(records: list[Record], authorization: str) -> None:
    assert records, "nothing reached the upstream: the test would prove nothing"
    for record in records:
        seen = (record.http_method, record.method, record.headers.get("authorization"))
        assert record.headers.get("x-tenant") == TENANT, seen
        if authorization == CLIENT_TOKEN and record.method == "server/discover":
            # The gateway's own era probe at start: no client yet, so no credential.
            assert record.headers.get("authorization") in (None, CLIENT_TOKEN), seen
            continue
        assert record.headers.get("authorization") == authorization, seen
        if authorization != CLIENT_TOKEN:
            assert all(CLIENT_TOKEN not in value for value in record.headers.values()), seen


def _never_logged(log: Path) -> None:
    text = log.read_text(encoding="utf-8")
    assert "gateway-secret" not in text


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "upstream_token"
    path.write_text(GATEWAY_TOKEN + "\n", encoding="utf-8")  # as `echo` leaves it
    return path


@pytest.mark.parametrize("fixed_authorization", [True, False])
def test_legacy_streamable_http_from_a_settings_file(
    legacy_url: str, tmp_path: Path, token_file: Path, fixed_authorization: bool
) -> None:
    headers = f'X-Tenant = "{TENANT}"'
    if fixed_authorization:
        headers = f'Authorization = {{ file = "{token_file}" }}, {headers}'
    config = tmp_path / "gateway.toml"
    config.write_text(f"upstream_headers = {{ {headers} }}\n", encoding="utf-8")
    log = tmp_path / "gateway.log"
    with (
        RecordingProxy(legacy_url) as proxy,
        procs.gateway(
            proxy.url, procs.free_port(), env={"MCP_SHIM_CONFIG": str(config)}, log_path=log
        ) as base,
    ):
        answer = _call(base, "echo", {"text": "hi"})
        records = list(proxy.records)
    assert "hi" in json.dumps(answer)
    methods = {record.method for record in records}
    assert {"initialize", "tools/call"} <= methods, methods
    _check(records, GATEWAY_TOKEN if fixed_authorization else CLIENT_TOKEN)
    _never_logged(log)


def test_modern_http(modern_url: str, tmp_path: Path) -> None:
    fixed = {"Authorization": GATEWAY_TOKEN, "X-Tenant": TENANT}
    log = tmp_path / "gateway.log"
    with (
        RecordingProxy(modern_url) as proxy,
        procs.gateway(
            proxy.url,
            procs.free_port(),
            env={"MCP_SHIM_UPSTREAM_HEADERS": json.dumps(fixed)},
            log_path=log,
        ) as base,
    ):
        answer = _call(base, "test_headers", {})
        records = list(proxy.records)
    # The modern fixture reports the Authorization it was sent, too.
    seen = json.loads(answer["result"]["content"][0]["text"])  # type: ignore[index]
    assert seen["authorization"] == GATEWAY_TOKEN
    assert "tools/call" in {record.method for record in records}
    _check(records, GATEWAY_TOKEN)
    _never_logged(log)


@pytest.fixture
def sse_chain(tmp_path: Path) -> Iterator[tuple[str, RecordingProxy, Path]]:
    fixed = {"Authorization": GATEWAY_TOKEN, "X-Tenant": TENANT}
    log = tmp_path / "gateway.log"
    with (
        everything_sse(procs.free_port(), tmp_path / "everything.log") as sse_url,
        RecordingProxy(sse_url, every_path=True) as proxy,
        procs.gateway(
            proxy.url,
            procs.free_port(),
            env={"MCP_SHIM_UPSTREAM_HEADERS": json.dumps(fixed)},
            log_path=log,
        ) as base,
    ):
        yield base, proxy, log


def test_http_sse_get_stream_and_posts(sse_chain: tuple[str, RecordingProxy, Path]) -> None:
    base, proxy, log = sse_chain
    answer = _call(base, "echo", {"message": "up"})
    assert "Echo: up" in json.dumps(answer)
    records = list(proxy.records)
    kinds = {(record.http_method, record.method) for record in records}
    assert ("GET", None) in kinds and ("POST", "tools/call") in kinds, kinds
    _check(records, GATEWAY_TOKEN)
    _never_logged(log)
