"""Issue 19 ("Hardening II") items 1, 2 and 11 through the gateway process:
what an upstream answers reaches its own caller only, whole, and bounded.

- Upstream: the project's misbehaving upstream (tests/misbehaving/
  http_upstream.py) as a process, for what only a broken server does (stray
  bytes after an answer, gzip bombs, answers over the cap); the official
  Python SDK's legacy server (tests/fixtures/legacy_server.py, with and
  without `--json-response`) for large tool results as real servers send them.
- Clients: raw modern requests, and a raw legacy session (initialize,
  Mcp-Session-Id), over loopback HTTP.
- "Flat memory": the gateway's peak RSS (VmHWM) while a 50 MB answer passes,
  JSON and SSE, stays within a small multiple of the answer.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire

pytestmark = pytest.mark.peers

MB = 1000 * 1000
LIMIT_SETTING = "MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES"


@contextmanager
def misbehaving_upstream() -> Iterator[str]:
    port = procs.free_port()
    argv = [sys.executable, "-m", "tests.misbehaving.http_upstream", "--port", str(port)]
    url = f"http://127.0.0.1:{port}/mcp"
    with procs.running(argv, url):
        yield url


@contextmanager
def gateway(upstream: str, log: Path, **env: str) -> Iterator[tuple[str, int]]:
    settings = {"MCP_SHIM_" + k.upper(): v for k, v in env.items()}
    port = procs.free_port()
    with procs.gateway_process(upstream, port, settings, log) as (base, proc):
        yield base + "/mcp", proc.pid


def modern_call(
    url: str, tool: str, arguments: dict[str, Any], authorization: str | None = None
) -> httpx.Response:
    message = wire.body("tools/call", {"name": tool, "arguments": arguments})
    headers = wire.headers_for(message, authorization=authorization)
    return httpx.post(url, json=message, headers=headers, timeout=60)


def legacy_call(url: str, tool: str, arguments: dict[str, Any]) -> httpx.Response:
    """A legacy session's tools/call (2025-06-18): initialize, initialized, the call."""
    base = {"content-type": "application/json", "accept": wire.ACCEPT_BOTH}
    with httpx.Client(timeout=60) as client:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "issue-19", "version": "0"},
            },
        }
        opened = client.post(url, json=init, headers=base)
        assert opened.status_code == 200, opened.text[:300]
        session = {
            **base,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert client.post(url, json=note, headers=session).status_code == 202
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        return client.post(url, json=call, headers=session)


def result_text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text[:300]
    answer = wire.answer_messages(response)[-1]
    assert "result" in answer, str(answer)[:300]
    return str(answer["result"]["content"][0]["text"])


def memory_kib(pid: int, field: str) -> int:
    """VmRSS (now) or VmHWM (the peak so far) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


# -- item 1 ------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["stray", "stray_later"])
def test_no_caller_receives_bytes_of_anothers_answer(tool: str, tmp_path: Path) -> None:
    """Caller A's answer is followed by the start of a second response (in the
    same write, or once the connection carries the next request); caller B,
    another credential, always gets its own answer. Checked failing before
    the fix: B's call failed or got A's stray answer in every round."""
    with misbehaving_upstream() as upstream, gateway(upstream, tmp_path / "gw.log") as (url, _):
        for round_ in range(6):
            a = modern_call(url, tool, {"text": f"a{round_}"}, f"Bearer a{round_}")
            assert result_text(a) == f"a{round_}"
            b = modern_call(url, "echo", {"text": f"b{round_}"}, f"Bearer b{round_}")
            assert result_text(b) == f"b{round_}"


# -- item 11 ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "growth_bound_mb"),
    [
        ({"bytes": 3 * 1024 * 1024}, None),
        ({"bytes": 3 * 1024 * 1024, "sse": True}, None),
        # 128 MiB inflated from about 128 KiB of gzip: never inflated past the cap.
        ({"bytes": 128 * 1024 * 1024, "sse": True, "gzip": True}, 40),
    ],
    ids=["json", "sse", "gzip-bomb"],
)
def test_an_answer_over_the_cap_is_a_clear_error(
    arguments: dict[str, Any], growth_bound_mb: int | None, tmp_path: Path
) -> None:
    log = tmp_path / "gw.log"
    limit = 1024 * 1024
    with (
        misbehaving_upstream() as upstream,
        gateway(upstream, log, max_upstream_answer_bytes=str(limit)) as (url, pid),
    ):
        before = memory_kib(pid, "VmRSS")
        response = modern_call(url, "result", arguments)
        grown_mb = (memory_kib(pid, "VmHWM") - before) / 1024
        assert response.status_code == 502, response.text[:300]
        error = response.json()["error"]
        assert error["code"] == -32603
        assert f"exceeded {limit} bytes ({LIMIT_SETTING})" in error["message"]
        if growth_bound_mb is not None:
            assert grown_mb < growth_bound_mb, grown_mb
        events = [
            line for line in wire.log_lines(log) if line.get("event") == "upstream_answer_too_large"
        ]
        assert events and events[0]["limit"] == limit and events[0]["setting"] == LIMIT_SETTING
        # Other calls go on.
        assert result_text(modern_call(url, "echo", {"text": "after"})) == "after"


# -- item 2 -------------------------------------------------------------------


@pytest.fixture(scope="module", params=["json", "sse"])
def sdk_gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The official SDK's legacy server, answering JSON bodies (`json_response=True`) or SSE."""
    logs = tmp_path_factory.mktemp("sdk")
    extra = ["--json-response"] if request.param == "json" else []
    with (
        procs.legacy_server(procs.free_port(), *extra, log_path=logs / "legacy.log") as upstream,
        procs.gateway(upstream, procs.free_port(), log_path=logs / "gw.log") as base,
    ):
        yield base + "/mcp"


@pytest.mark.parametrize("client", ["modern", "legacy"])
@pytest.mark.parametrize("size", [300 * 1000, 600 * 1024, 5 * MB], ids=["300KB", "600KiB", "5MB"])
def test_large_tool_results_of_the_sdk_server_come_through(
    sdk_gateway: str, client: str, size: int
) -> None:
    """Checked failing before the fix with JSON answers: the 600 KiB and 5 MB
    ones got no answer within the client's 60 s. The 300 KB one came through
    there: whether an answer just over the 256 KiB read buffer stalled
    depended on how the reads fell (the issue's 25 s without an answer)."""
    call = modern_call if client == "modern" else legacy_call
    started = time.monotonic()
    text = result_text(call(sdk_gateway, "large_result", {"bytes": size}))
    assert len(text) == size
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("size", [1 * MB, 10 * MB, 50 * MB], ids=["1MB", "10MB", "50MB"])
@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("client", ["modern", "legacy"])
def test_large_answers_come_through_with_flat_memory(
    client: str, sse: bool, size: int, tmp_path: Path
) -> None:
    """The gateway's peak RSS grows by about the answer: it holds the body
    once, its large strings written to the client from there (app/splice.py),
    not copies of it per buffer."""
    with misbehaving_upstream() as upstream, gateway(upstream, tmp_path / "gw.log") as (url, pid):
        call = modern_call if client == "modern" else legacy_call
        before = memory_kib(pid, "VmRSS")
        text = result_text(call(url, "result", {"bytes": size, "sse": sse}))
        grown_mb = (memory_kib(pid, "VmHWM") - before) / 1024
        assert len(text) == size
        print(f"{client} {'sse' if sse else 'json'} {size / MB:g} MB: +{grown_mb:.0f} MiB peak")
        # Measured (2 cores, shared): 50 MB +143-151 MiB as JSON and +191-199 MiB
        # on SSE, 3 and 4 times the answer's 47.7 MiB, while the body, its parsed
        # form and the client's bytes were held at once; about 1.1 times since
        # (bench/answers.py).
        assert grown_mb < 1.5 * size / (1024 * 1024) + 16, grown_mb
