"""The HTTP application of a gateway with many servers.

Every server is served under `/servers/NAME/` by an app of its own, built by
the single-server code (app/serving/server.py: the same routes, the POST fast path,
era detection, MRTR, listen, tasks, HTTP+SSE) over its own graph:

    POST|GET|DELETE /servers/NAME/mcp   Streamable HTTP, clients of either era
    GET  /servers/NAME/sse              HTTP+SSE (2024-11-05) clients, whose
    POST /servers/NAME/messages         endpoint event names this path
    GET  /servers/NAME/readyz           that server's readiness

The gateway's own routes: `/healthz`, `/readyz` (200 while one server is
ready, each server's state in the body) and `/metrics` (every server's
series labelled by its name). A file with a single server also serves it
unprefixed (`/mcp`, `/sse`, `/messages`), as a single-server gateway would.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import structlog
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from app import metrics
from app.config import Settings
from app.fronts.shared.auth import WELL_KNOWN
from app.rejections import INVALID_REQUEST, Rejection
from app.routes.cors import Cors
from app.routes.edge import answer
from app.routes.status import readiness
from app.servers.aggregate.serve import Aggregate, wanted
from app.servers.metrics import MergedMetrics
from app.servers.registry import PREFIX, Registry, Server
from app.serving.server import GatewayApp, RequestIdMiddleware
from app.settings.servers import Servers
from app.wiring import Wiring

_METADATA = WELL_KNOWN + PREFIX
# A single server's routes, served unprefixed too.
_UNPREFIXED = frozenset({"/mcp", "/sse", "/messages"})


class ServersApp(GatewayApp):
    """The gateway's app: a request under `/servers/NAME/` goes to that server's
    app as its own path (`/mcp`), the prefix moved to the scope's root_path;
    the rest to the gateway's own routes."""

    registry: Registry
    aggregate: Aggregate | None = None  # the aggregated /mcp (app/servers/aggregate/serve.py)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if self.aggregate is not None:
                # `/mcp`, its HTTP+SSE paths, its notes (app/servers/aggregate/serve.py).
                served = self.aggregate.paths.get(scope["path"])
                if served is not None:
                    await served(scope, receive, send)
                    return
            server, path = self._route(scope["path"])
            if server is not None:
                if path != scope["path"]:
                    # In place, not a copy: the connection's protocol knows its
                    # request by this scope (a stdio session's request handed
                    # to the sibling worker owning it, app/serving/handoff.py).
                    scope["root_path"] = scope.get("root_path", "") + server.route
                    scope["path"] = path
                    scope["raw_path"] = path.encode()
                if scope["method"] != "POST" or path != "/mcp":
                    # A POST's call binds it with its request id (app/routes/mcp.py).
                    structlog.contextvars.bind_contextvars(server=server.name)
                await server.app(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def graphs(self) -> list[Wiring]:
        """Every server's running graph in the file's order, then the aggregated
        /mcp's: the same order in every worker (app/serving/cli.py)."""
        found = [wired for server in self.registry if (wired := server.wiring) is not None]
        if self.aggregate is not None:
            found += self.aggregate.app.graphs()
        return found

    def _route(self, path: str) -> tuple[Server | None, str]:
        if path.startswith(_METADATA):
            # RFC 9728 3.1: /servers/NAME/mcp's metadata, at the root; its app
            # answers it as its own (Edge.metadata_paths).
            name = path[len(_METADATA) :].partition("/")[0]
            return self.registry.get(name), path
        if path.startswith(PREFIX):
            name, slash, rest = path[len(PREFIX) :].partition("/")
            server = self.registry.get(name)
            if server is not None and slash:
                return server, "/" + rest
            return None, path
        only = self.registry.only
        if only is not None and path in _UNPREFIXED:
            return only, path
        return None, path


@asynccontextmanager
async def _aggregating(aggregate: Aggregate | None) -> AsyncIterator[None]:
    if aggregate is None:
        yield
        return
    async with aggregate.running():
        yield


def create_servers_app(settings: Settings, servers: Servers) -> ServersApp:
    registry = Registry(settings, servers)
    own = metrics.Metrics()
    aggregate = None
    if wanted(settings, servers.specs):
        apps = {server.name: server.app for server in registry}
        aggregate = Aggregate(settings, servers.specs, own, apps)
    parts = [(server.name, server.metrics) for server in registry]
    if aggregate is not None:
        parts.append(("/mcp", aggregate.app.state.metrics))
    merged = MergedMetrics(own, parts)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with registry.running(), _aggregating(aggregate):
            if settings.metrics_port is not None:
                merged.serve(settings.host, settings.metrics_port)
            try:
                # As app/serving/server.py's: start-up's objects stay out of the GC's walks.
                gc.freeze()
                yield
            finally:
                await merged.aclose()

    app = ServersApp(
        title="mcp-shim",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        redirect_slashes=False,
    )
    app.registry = registry
    app.aggregate = aggregate
    app.add_middleware(RequestIdMiddleware, cors=Cors(settings.allowed_origins))
    app.state.metrics = own
    # Each server's listen streams and tasks wound down at shutdown (app/serving/server.py
    # `drain`); the aggregated /mcp first: its listens end before the members' they follow.
    app.state.parts = ([aggregate.app] if aggregate is not None else []) + [
        server.app for server in registry
    ]
    names = ", ".join(registry.names)

    async def not_found(request: Request, exc: Exception) -> Response:
        message = f"Not found: the MCP endpoints are POST /servers/NAME/mcp, NAME one of {names}"
        if aggregate is not None:
            message += ", and POST /mcp: every server as one"
        return answer(Rejection(INVALID_REQUEST, message, status=404))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "servers": registry.names})

    async def readyz(request: Request) -> Response:
        ready, body = await servers_readiness(registry)
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics_route(request: Request) -> Response:
        body, content_type = merged.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    app.add_exception_handler(404, not_found)
    app.add_api_route("/healthz", healthz, methods=["GET"])
    app.add_api_route("/readyz", readyz, methods=["GET"])
    if settings.metrics_port is None:
        app.add_api_route("/metrics", metrics_route, methods=["GET"])
    return app


async def servers_readiness(registry: Registry) -> tuple[bool, dict[str, Any]]:
    """Ready while at least one server is: a client of a server that answers is
    served. Every server's own state in the body, checked at once (a server
    whose probe times out delays the answer, never another server's check)."""

    async def one(server: Server) -> tuple[bool, dict[str, Any]]:
        wired = server.wiring
        if wired is None:
            return False, {"status": "not_ready", "reason": "not started"}
        return await readiness(wired)

    outcomes = await asyncio.gather(*(one(server) for server in registry))
    servers = dict(zip(registry.names, (body for _ready, body in outcomes), strict=True))
    ready = any(ok for ok, _body in outcomes)
    return ready, {"status": "ready" if ready else "not_ready", "servers": servers}
