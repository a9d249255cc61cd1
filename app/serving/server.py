"""The HTTP application: request ids, the app, and its routes (app/routes/)
over the objects app/wiring.py builds and runs for its lifespan."""

from __future__ import annotations

import gc
import itertools
import os
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics, tracing, wiring
from app.cluster.replicas import MAX_NOTE_BYTES, NOTE_PATH
from app.config import Settings
from app.connection.link import LINK, ConnectionLink
from app.fronts.http_sse.front import MESSAGES_PATH
from app.fronts.shared.auth import WELL_KNOWN
from app.metrics import Metrics
from app.rejections import INVALID_REQUEST, Rejection
from app.routes import status
from app.routes.cors import Cors
from app.routes.edge import Edge, answer
from app.routes.mcp import McpRoutes
from app.routes.methods import MCP_ALLOW, Methods
from app.routes.scope_headers import ScopeHeaders
from app.routes.sse import SseRoutes
from app.tracing import export as tracing_export
from app.wiring import Wiring

# POST /mcp (McpRoutes.post), with the request's headers as read once.
PostRoute = Callable[[Request, ScopeHeaders], Awaitable[Response]]

_REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class _NewRequestIds:
    """Request ids of this process: 16 hex digits, a random 32-bit prefix drawn
    once per process and a 32-bit counter from a random start (uuid4 per request
    was 1.6% of the hot path's CPU, bench/profile.py).

    Unique across workers and replicas as long as the prefixes differ: every
    process draws its own from the OS's random source, at start and again in a
    forked child; two of P processes share one with probability about
    P**2 / 2**33 (1 in 2 million for 64 processes), and even then their ids
    meet only where their counters overlap. A counter that wraps draws a new
    prefix. (uuid4's 16 digits were 64 random bits per id: a billion ids hold
    a repeated one with probability about 3%; one process's ids now repeat
    only if a wrap draws a prefix it had, after 2**32 of them.)"""

    def __init__(self) -> None:
        self._draw()
        os.register_at_fork(after_in_child=self._draw)

    def _draw(self) -> None:
        seed = secrets.randbits(64)
        self._prefix = f"{seed >> 32:08x}"
        self._counter = itertools.count(seed & 0xFFFFFFFF)

    def __call__(self) -> str:
        n = next(self._counter)
        if n > 0xFFFFFFFF:
            self._draw()
            n = next(self._counter)
        return f"{self._prefix}{n:08x}"


_new_request_id = _NewRequestIds()


def _request_id(raw: str) -> str:
    """The client's X-Request-Id when it is plain and short, else a new one."""
    return raw if raw and _REQUEST_ID_OK.match(raw) else _new_request_id()


class RequestIdMiddleware:
    """Every HTTP answer carries X-Request-Id, the id its log lines carry:
    an operator can find the lines of the answer a client reports; and, to a
    browser's request from an allowed Origin, the CORS headers that let its
    page read the answer (app/routes/cors.py). Plain ASGI (no
    BaseHTTPMiddleware), so streamed answers pass through untouched."""

    def __init__(self, app: ASGIApp, cors: Cors) -> None:
        self.app = app
        self.cors = cors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_id: bytes | None = None
        origin: bytes | None = None
        for name, value in scope["headers"]:  # a loop: no generator per request
            # The first of each, as the routes read them.
            if name == b"x-request-id":
                if raw_id is None:
                    raw_id = value
            elif name == b"origin" and origin is None:
                origin = value
        send = _sending_request_id(
            scope,
            send,
            self.cors,
            raw_id.decode("latin-1") if raw_id is not None else "",
            origin.decode("latin-1") if origin is not None else None,
        )
        await self.app(scope, receive, send)


def _sending_request_id(
    scope: Scope,
    send: Send,
    cors: Cors,
    raw_id: str,
    origin: str | None,
    *,
    whole_writes: bool = False,
) -> Send:
    """The request's id (its X-Request-Id `raw_id` if fit), in its scope's
    state; `send` adding its header, and the CORS headers of its `origin` if
    any, to the answer. `whole_writes`: this wrapper is the answer's only one,
    so the protocol may write an answer whole, bypassing it
    (ConnectionLink.write_whole), with the same headers."""
    request_id = _request_id(raw_id)
    scope.setdefault("state", {})["request_id"] = request_id
    header = (b"x-request-id", request_id.encode())
    # No Origin (every client but a browser): nothing more to decide or add.
    extra = (header,) if origin is None else (header, *cors.answer_headers(origin))
    if whole_writes:
        extensions = scope.get("extensions")
        link = extensions.get(LINK) if extensions else None
        if isinstance(link, ConnectionLink):
            link.answer_headers = extra

    async def send_with_id(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), *extra]
        await send(message)

    return send_with_id


class GatewayApp(FastAPI):
    """The FastAPI application, with `POST /mcp` dispatched around it.

    Every call of every client is a `POST /mcp`; FastAPI's middleware stack,
    routing, dependency solving and exception wrappers cost about a fifth of
    the gateway's CPU per call and gave it nothing on that route (profile and
    measurements: bench/profile.py, bench/wrk.sh). So that one route
    runs behind `RequestIdMiddleware`'s work alone (done in `__call__` itself:
    every frame between the task and the upstream's socket is resumed at each
    of the call's suspensions), with the same route function and the same
    answers; everything else (health, metrics, the legacy GET and
    DELETE, HTTP+SSE, 404s and 405s, lifespan) goes through FastAPI. An
    exception escaping the route reaches uvicorn as it did through Starlette's
    `ServerErrorMiddleware`, which re-raised it: logged, and a plain 500 if
    nothing was sent yet."""

    _post: PostRoute | None = None
    _cors: Cors  # set with `_post`

    def serve_post(self, route: PostRoute, cors: Cors) -> None:
        self._post = route
        self._cors = cors

    def graphs(self) -> list[Wiring]:
        """The running graphs this app serves, in an order every worker shares:
        its one server's (app/servers serves many)."""
        wired: Wiring | None = getattr(self.state, "wiring", None)
        return [] if wired is None else [wired]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self._post
        if (
            route is not None
            and scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] == "/mcp"
        ):
            scope["app"] = self  # `request.app`, as Starlette sets it
            # Read once for the id, the Origin and the route (ScopeHeaders).
            headers = ScopeHeaders(scope["headers"])
            send = _sending_request_id(
                scope,
                send,
                self._cors,
                headers.get("x-request-id", ""),
                headers.get("origin"),
                whole_writes=True,
            )
            # The call's server span (app/tracing/): a shared no-op unless exporting.
            with tracing.serving(headers, scope) as span:
                response = await route(Request(scope, receive), headers)
                await response(scope, receive, span.watch(send))
            return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings, mcp_path: str = "/mcp", server: str | None = None) -> GatewayApp:
    """`mcp_path`: where clients reach the MCP endpoint (app/servers mounts one
    app per server under /servers/NAME/); `server`: that server's name, on
    every log line of its calls."""
    app_metrics = metrics.Metrics()
    edge = Edge(settings, app_metrics, mcp_path)
    cors = Cors(settings.allowed_origins)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with tracing_export.exported(), wiring.running(settings, app_metrics) as wired:
            app.state.wiring = wired
            # The ~74k objects alive after start-up never become garbage; left in
            # the collector's generations, every full collection walks them all
            # and stalls each call in flight (the p99 tail, bench/profile.py --gc).
            gc.freeze()
            yield

    app = GatewayApp(
        title="mcp-shim",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        # Starlette's redirect to `/mcp` for `/mcp/` builds its Location from
        # the Host header: no answer of ours is built from request headers.
        redirect_slashes=False,
    )
    app.add_middleware(RequestIdMiddleware, cors=cors)
    app.state.metrics = app_metrics
    app.add_exception_handler(404, _not_found)
    _add_routes(app, settings, edge, cors, app_metrics, server)
    return app


async def _not_found(request: Request, exc: Exception) -> Response:
    return answer(
        Rejection(INVALID_REQUEST, "Not found: the MCP endpoint is POST /mcp", status=404)
    )


def _add_routes(
    app: GatewayApp,
    settings: Settings,
    edge: Edge,
    cors: Cors,
    app_metrics: Metrics,
    server: str | None = None,
) -> None:
    mcp = McpRoutes(settings, edge, app_metrics, server)
    # POST /mcp is not a route: GatewayApp serves it (see there why). The routes
    # a browser may reach take every method, dispatched by app/routes/methods.py:
    # OPTIONS answers CORS preflights, any method not served a 405 with its Allow.
    app.serve_post(mcp.post, cors)
    methods = Methods(edge, cors)
    routes = app.router.routes
    mcp_endpoints = {"GET": mcp.other, "DELETE": mcp.other}
    routes.append(methods.route("/mcp", mcp_endpoints, allow=MCP_ALLOW))
    app.add_api_route("/healthz", status.healthz, methods=["GET"])
    served = status.StatusRoutes(edge, app_metrics)
    if settings.metrics_port is None:  # else only on its own port: a 404 here
        app.add_api_route("/metrics", served.metrics, methods=["GET"])
    app.add_api_route("/readyz", status.readyz, methods=["GET"])
    metadata = served.protected_resource_metadata
    routes.append(methods.route(WELL_KNOWN + "{suffix:path}", {"GET": metadata, "HEAD": metadata}))
    # The workers' (replicas') notes about legacy sessions: sealed, else 404.
    app.add_api_route(NOTE_PATH, _replica_note, methods=["POST"])
    http_sse = SseRoutes(edge)
    routes.append(methods.route("/sse", {"GET": http_sse.open}, legacy_client=True))
    routes.append(methods.route(MESSAGES_PATH, {"POST": http_sse.message}, legacy_client=True))


async def _replica_note(request: Request) -> Response:
    """Another replica's note (app/cluster/notes.py), answered sealed; anything
    else (not sealed with this deployment's key, too large) is not found."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > 2 * MAX_NOTE_BYTES:
            break
    wired: Wiring = request.app.state.wiring
    reply = None
    if len(body) <= 2 * MAX_NOTE_BYTES:
        reply = await wired.legacy_sessions.copies.answer_note(bytes(body))
    if reply is None:
        return await _not_found(request, Exception())
    return Response(reply, media_type="application/octet-stream")


async def drain(app: FastAPI) -> None:
    """Before the HTTP server stops: end the long-lived listen streams with their
    graceful closing result (uvicorn would otherwise wait for them, then cancel
    them without one). Lifespan shutdown runs only after connections closed."""
    wired: Wiring | None = getattr(app.state, "wiring", None)
    if wired is not None:
        await wired.drain()
    # Many servers (app/servers): each one's graph.
    for part in getattr(app.state, "parts", ()):
        await drain(part)
