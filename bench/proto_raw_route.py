"""Prototype, for measurement only: POST /mcp served without FastAPI's layers.

    python bench/proto_raw_route.py      (environment as for `mcp-shim`)

Runs the gateway as `app.cli.main` does, except that the application handed
to uvicorn answers POST /mcp itself: RequestIdMiddleware, then the route
function of app/server.py (`mcp_post`) called with a Starlette Request, its
answer sent as is. Every other request (GET /healthz, lifespan...) goes to the
FastAPI application unchanged. The difference against the plain gateway in a
bench/wrk.sh run (`--variant "raw route:BENCH_PROTO_RAW=1"`) is what FastAPI's
routing, middleware stack and dependency solving cost per call. With
BENCH_GC_* settings, bench/gc_probe.py's instrumentation is installed too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gc_probe
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request

import app.cli
from app.server import RequestIdMiddleware


class RawMcpPost:
    """POST /mcp straight to its route function; the rest to FastAPI."""

    def __init__(self, fastapi_app: FastAPI) -> None:
        self.fastapi = fastapi_app
        self.state = fastapi_app.state  # app.server.drain reads it
        route = next(
            r
            for r in fastapi_app.routes
            if isinstance(r, APIRoute) and r.path == "/mcp" and "POST" in r.methods
        )
        self.endpoint = route.endpoint
        self.raw = RequestIdMiddleware(self._post)

    async def _post(self, scope: Any, receive: Any, send: Any) -> None:
        scope["app"] = self.fastapi
        response = await self.endpoint(Request(scope, receive))
        await response(scope, receive, send)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/mcp":
            await self.raw(scope, receive, send)
        else:
            await self.fastapi(scope, receive, send)


if __name__ == "__main__":
    gc_probe.install()
    original = app.cli.create_app
    app.cli.create_app = lambda settings: RawMcpPost(original(settings))  # type: ignore[assignment,return-value]
    app.cli.main()
