"""Issue 19, item 5: one caller's refusal must not change the upstream's era
for everyone.

A modern-only upstream (the modern fixture on the official mcp 2.x SDK) sits
behind a rate limiter (`RefusingProxy`, the project's own misbehaving peer)
that answers one token's `server/discover` with a plain-text 429. That
caller's refusals put nothing in doubt: the era stays modern, every other
caller keeps being served, and the refused caller is told the upstream's
status rather than failing in the wrong era."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests import procs
from tests.integration import wire
from tests.integration.recording_proxy import RecordingProxy

pytestmark = pytest.mark.peers

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
REFUSED = "Bearer over-quota"


class RefusingProxy(RecordingProxy):
    """Forwards everything, except that one token's `server/discover` gets a
    plain-text 429, as a rate limiter in front of the server would answer."""

    def __init__(self, upstream_url: str, refused_token: str) -> None:
        super().__init__(upstream_url)
        self.refused_token = refused_token
        self.refusals = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()  # aiohttp keeps it for the forwarding below
        try:
            method = json.loads(raw).get("method") if raw else None
        except (ValueError, AttributeError):
            method = None
        token = request.headers.get("authorization")
        if method == "server/discover" and token == self.refused_token:
            self.refusals += 1
            return web.Response(status=429, text="Too Many Requests", content_type="text/plain")
        return await super()._handle(request)


def modern_call(
    http: httpx.Client, base: str, method: str, params: dict[str, Any], token: str
) -> httpx.Response:
    params = {
        **params,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    }
    headers = {
        "accept": ACCEPT,
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
        "authorization": token,
    }
    if "name" in params:
        headers["mcp-name"] = params["name"]
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return http.post(base + "/mcp", json=body, headers=headers, timeout=15)


def legacy_initialize(http: httpx.Client, base: str, token: str) -> httpx.Response:
    return http.post(
        base + "/mcp",
        json=wire.legacy_initialize(),
        headers={"accept": ACCEPT, "authorization": token},
        timeout=15,
    )


def echoed(response: httpx.Response) -> str | None:
    if response.status_code != 200:
        return None
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    result = json.loads(text).get("result")
    return str(result["content"][0]["text"]) if isinstance(result, dict) else None


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    """One client for the test's calls (`httpx.post` makes a client, and a TLS
    context from the CA bundle, at each call: 33 ms of CPU); no connection is
    kept, so each call connects anew as before."""
    with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as client:
        yield client


@pytest.fixture
def behind_limiter(tmp_path: Path) -> Iterator[tuple[str, RefusingProxy, Path]]:
    log = tmp_path / "gateway.log"
    with (
        procs.modern_server(procs.free_port()) as upstream,
        RefusingProxy(upstream, REFUSED) as proxy,
        procs.gateway(proxy.url, procs.free_port(), log_path=log) as base,
    ):
        yield base, proxy, log


def test_one_tokens_refused_probe_leaves_the_era_for_everyone(
    behind_limiter: tuple[str, RefusingProxy, Path], http: httpx.Client
) -> None:
    base, proxy, log = behind_limiter
    assert httpx.get(base + "/healthz", timeout=5).json()["upstream"]["era"] == "modern"

    served = 0
    refused_answers = set()
    for i in range(150):
        # The refused caller asks for the server's discover result itself: its
        # 429 comes back as the upstream sent it, and changes nothing.
        refused = modern_call(http, base, "server/discover", {}, REFUSED)
        refused_answers.add((refused.status_code, refused.text))
        other = modern_call(
            http,
            base,
            "tools/call",
            {"name": "test_echo", "arguments": {"text": f"call {i}"}},
            f"Bearer caller-{i % 5}",
        )
        served += echoed(other) == f"call {i}"
    assert served == 150
    assert refused_answers == {(429, "Too Many Requests")}
    assert proxy.refusals >= 150

    # A legacy client of the refused token: its session needs the upstream's
    # discover result with its own credential, which the limiter refuses. It
    # is told the upstream's status, not a wrong-era failure.
    refused_init = legacy_initialize(http, base, REFUSED)
    assert refused_init.status_code == 502, refused_init.text
    error = refused_init.json()["error"]
    assert "HTTP 429" in error["message"], error
    # Another caller's legacy client is served in the modern era.
    other_init = legacy_initialize(http, base, "Bearer caller-9")
    assert other_init.status_code == 200, other_init.text
    assert other_init.json()["result"]["serverInfo"]["name"] == "mcp-shim-modern-fixture"

    health = httpx.get(base + "/healthz", timeout=5).json()
    assert health["upstream"]["era"] == "modern"
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert not [line for line in lines if line.get("event") == "upstream_era_changed"]
    assert any(line.get("event") == "upstream_era_inconclusive" for line in lines)
