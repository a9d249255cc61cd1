"""Many servers' app without a server process: a request's route to its
server's app, the merged exposition (every server's series labelled by its
name, each family once), readiness over every server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import SecretStr

from app.config import Settings
from app.metrics import Metrics, parse_exposition
from app.servers.app import ServersApp, create_servers_app, servers_readiness
from app.servers.metrics import MergedMetrics
from app.settings.servers import parse_servers
from translators.registry import get_version

MODERN = get_version("2026-07-28")
assert MODERN is not None


@pytest.fixture(autouse=True)
def _no_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("UPSTREAM_URL", "UPSTREAM_COMMAND", "SERVERS_FILE", "SERVERS"):
        monkeypatch.delenv(f"MCP_SHIM_{name}", raising=False)


def app_of(servers: dict[str, Any]) -> ServersApp:
    text = json.dumps({"mcpServers": servers})
    settings = Settings(servers=SecretStr(text))
    return create_servers_app(settings, parse_servers(text, "MCP_SHIM_SERVERS"))


def test_routes_go_to_their_servers_app() -> None:
    app = app_of({"a": {"url": "http://127.0.0.1:9/mcp"}, "b-2": {"url": "http://127.0.0.1:9/x"}})
    a, b = app.registry.get("a"), app.registry.get("b-2")
    assert a is not None and b is not None
    assert app._route("/servers/a/mcp") == (a, "/mcp")
    assert app._route("/servers/b-2/sse") == (b, "/sse")
    assert app._route("/servers/b-2/messages") == (b, "/messages")
    for path in ("/servers/a", "/servers/c/mcp", "/mcp", "/servers//mcp", "/readyz"):
        assert app._route(path) == (None, path)
    assert str(b.settings.upstream_url) == "http://127.0.0.1:9/x"
    metadata = "/.well-known/oauth-protected-resource/servers/a/mcp"
    assert app._route(metadata) == (a, metadata)


def test_one_server_is_also_at_mcp() -> None:
    app = app_of({"only": {"url": "http://127.0.0.1:9/mcp"}})
    only = app.registry.get("only")
    for path in ("/mcp", "/sse", "/messages"):
        assert app._route(path) == (only, path)
    assert app._route("/readyz") == (None, "/readyz")


def test_the_exposition_labels_every_server_once_per_family() -> None:
    own, first, second = Metrics(), Metrics(), Metrics()
    first.call_done("tools/call", MODERN, "ok", 200, 0.01, 0.005)
    second.call_done("tools/call", MODERN, "ok", 200, 0.01, 0.005)
    second.call_done("tools/list", MODERN, "ok", 200, 0.01, 0.005)
    merged = MergedMetrics(own, [("first", first), ("second", second)])
    body, content_type = merged.render(None)
    text = body.decode()
    assert content_type.startswith("text/plain")
    calls = {
        (labels["server"], labels["method"]): value
        for name, labels, value in parse_exposition(text)
        if name == "mcp_shim_calls_total"
    }
    assert calls == {
        ("first", "tools/call"): 1,
        ("second", "tools/call"): 1,
        ("second", "tools/list"): 1,
    }
    for family in ("mcp_shim_calls_total", "mcp_shim_call_duration_seconds"):
        assert text.count(f"# TYPE {family} ") == 1, family
    # The gateway's own series, once and unlabelled.
    info = [labels for name, labels, _ in parse_exposition(text) if name == "mcp_shim_build_info"]
    assert len(info) == 1 and "server" not in info[0]


class _Ready:
    def __init__(self, ready: bool) -> None:
        self.ready = ready


@pytest.mark.parametrize(("states", "status"), [((True, False), 200), ((False, False), 503)])
def test_ready_while_one_server_is(
    monkeypatch: pytest.MonkeyPatch, states: tuple[bool, bool], status: int
) -> None:
    app = app_of({"a": {"url": "http://127.0.0.1:9/mcp"}, "b": {"url": "http://127.0.0.1:9/x"}})
    wirings = dict(zip(app.registry.names, states, strict=True))
    for server in app.registry:
        server.app.state.wiring = server.name

    async def readiness(wired: str) -> tuple[bool, dict[str, Any]]:
        ok = wirings[wired]
        return ok, {"status": "ready" if ok else "not_ready"}

    monkeypatch.setattr("app.servers.app.readiness", readiness)
    ready, body = asyncio.run(servers_readiness(app.registry))
    assert (200 if ready else 503) == status
    assert body["servers"] == {
        name: {"status": "ready" if ok else "not_ready"} for name, ok in wirings.items()
    }


def test_a_server_not_started_is_not_ready() -> None:
    app = app_of({"a": {"url": "http://127.0.0.1:9/mcp"}})
    ready, body = asyncio.run(servers_readiness(app.registry))
    assert not ready and body["servers"]["a"] == {"status": "not_ready", "reason": "not started"}
