"""The gateway application in process, around a scripted upstream (see the
package's docstring): `gateway(...)` yields an httpx client whose requests go
straight into the ASGI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from app import wiring
from app.config import Settings
from app.serving.server import create_app
from app.upstream.choice import Upstream
from app.upstream.sessions.era import EraProbe
from tests.seam_fake import Script, ScriptedTransport, result

BASE = "http://127.0.0.1:8080"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"


def legacy_headers(**extra: str) -> dict[str, str]:
    """A 2025-11-25 client's POST headers."""
    return {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": LEGACY,
        **extra,
    }


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "asgi-test", "version": "0"},
    },
}


def default_script() -> Script:
    return Script({"tools/list": [result({"tools": []})], "ping": [result({})]})


@asynccontextmanager
async def gateway(
    monkeypatch: pytest.MonkeyPatch, script: Script | None = None, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, ScriptedTransport]]:
    """The application with `settings` (over the defaults), its lifespan
    started, its upstream the scripted one; stopped on the way out."""
    upstream = ScriptedTransport(script or default_script())

    def scripted(_: Settings) -> Upstream:
        return Upstream(upstream, upstream, 8, EraProbe(None, "legacy"), None, None)

    monkeypatch.setattr(wiring, "build_upstream", scripted)
    settings.setdefault("workers", None)
    app = create_app(Settings(upstream_command="cat", **settings))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            yield client, upstream


def modern_request(
    method: str, params: dict[str, Any] | None = None, *, rid: Any = 1, caps: Any = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 request's body and headers, as a modern client sends them."""
    body_params = dict(params or {})
    body_params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps or {},
    }
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
    }
    if "name" in body_params:
        headers["mcp-name"] = str(body_params["name"])
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": body_params}, headers
