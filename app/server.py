"""The FastAPI front: routes parse, call, answer. Logic lives below them."""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import structlog
from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import jsonio, logs, metrics, tracing
from app.answer import CallAnswer
from app.auth import MAX_METADATA_BYTES, WELL_KNOWN, AuthRelay
from app.auth import gateway_mcp_url as _gateway_mcp_url
from app.call import CallState
from app.client_held import connection_link
from app.config import Settings
from app.front import legacy, modern, security
from app.front.scope_headers import ScopeHeaders
from app.gateway import Gateway
from app.legacy.front import LegacyFront
from app.legacy.http_sse import MESSAGES_PATH, HttpSseFront
from app.legacy.sessions import LegacySessions
from app.mrtr.bridge import build_bridge
from app.passthrough import PassThrough
from app.readiness import ReadinessCheck
from app.rejections import INVALID_REQUEST, Rejection
from app.replicas import HOP_HEADER, build_replicas
from app.subscriptions import listen as subscriptions_listen
from app.subscriptions.hub import SubscriptionHub
from app.upstream import era_transport
from app.upstream.base import Transport
from app.upstream.choice import build_transport
from app.upstream.era import EraProbe
from app.upstream.modern_http import ModernHttpUpstream, passed_headers
from app.upstream.pool import SessionPool
from app.upstream.streamable_http import StreamableHttpTransport
from translators.registry import get_version

log = structlog.get_logger("mcp_shim.http")

_REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# How many Host values (and scheme, Host pairs) the hot path remembers.
_MEMO_SIZE = 256


class _NewRequestIds:
    """Request ids of this process: 16 hex digits, a random 32-bit prefix drawn
    once per process and a 32-bit counter from a random start (uuid4 per request
    was 1.6% of the hot path's CPU, bench/README.md "Third round").

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
    an operator can find the lines of the answer a client reports. Plain ASGI
    (no BaseHTTPMiddleware), so streamed answers pass through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, _sending_request_id(scope, send))


def _sending_request_id(scope: Scope, send: Send) -> Send:
    """The request's id, in its scope's state; `send` adding its header to the answer."""
    raw = next((v for k, v in scope["headers"] if k == b"x-request-id"), b"")
    request_id = _request_id(raw.decode("latin-1"))
    scope.setdefault("state", {})["request_id"] = request_id
    header = (b"x-request-id", request_id.encode())

    async def send_with_id(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), header]
        await send(message)

    return send_with_id


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    pass


class BodyAbandoned(Exception):
    """The client went away before sending the whole body: its doing, not an error."""


async def _read_body(
    request: Request, headers: Mapping[str, str], limit: int, timeout_s: float
) -> bytes:
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    link = connection_link(request.scope)
    if link is not None and link.body_complete:
        # The whole body came with the head (the common call): every receive()
        # answers at once, so there is nothing to time (an asyncio.timeout is
        # 4.2 us: bench/asyncio_costs.py, bench/README.md "Fourth round").
        return await _received_body(request.receive, limit)
    try:
        # A body shorter than its Content-Length, or dripped, would hold the
        # connection for ever (uvicorn has no body timeout).
        async with asyncio.timeout(timeout_s):
            return await _received_body(request.receive, limit)
    except TimeoutError:
        raise BodyTimeout from None


async def _received_body(receive: Receive, limit: int) -> bytes:
    # ASGI's messages read as starlette's `Request.stream` reads them, without
    # its async generator around each (bench/README.md "Third round"); the
    # common body comes whole in one message and is not copied.
    first = b""
    more: bytearray | None = None
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunk: bytes = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge
                if more is None and not first:
                    first = chunk
                else:
                    if more is None:
                        more = bytearray(first)
                    more += chunk
            if not message.get("more_body", False):
                break
        elif kind == "http.disconnect":
            raise BodyAbandoned
    return first if more is None else bytes(more)


def _json(rejection: Rejection, legacy_client: bool = False) -> Response:
    """A rejection as the answer; a legacy client's always has an id, which every
    legacy revision's JSONRPCError requires (app/front/legacy.py, UNREAD_ID)."""
    message = legacy.error_message(rejection) if legacy_client else rejection.to_message()
    return Response(
        jsonio.dumps(message),
        status_code=rejection.http_status,
        media_type="application/json",
    )


def _accepts(accept: str) -> tuple[bool, bool]:
    if not accept:
        return True, True
    kinds = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    any_kind = "*/*" in kinds
    return (
        any_kind or "text/event-stream" in kinds or "text/*" in kinds,
        any_kind or "application/json" in kinds or "application/*" in kinds,
    )


class GatewayApp(FastAPI):
    """The FastAPI application, with `POST /mcp` dispatched around it.

    Every call of every client is a `POST /mcp`; FastAPI's middleware stack,
    routing, dependency solving and exception wrappers cost about a fifth of
    the gateway's CPU per call and gave it nothing on that route (profile and
    measurements: bench/README.md, "Where the time goes"). So that one route
    runs behind `RequestIdMiddleware`'s work alone (done in `__call__` itself:
    every frame between the task and the upstream's socket is resumed at each
    of the call's suspensions), with the same route function and the same
    answers; everything else (health, metrics, the legacy GET and
    DELETE, HTTP+SSE, 404s and 405s, lifespan) goes through FastAPI. An
    exception escaping the route reaches uvicorn as it did through Starlette's
    `ServerErrorMiddleware`, which re-raised it: logged, and a plain 500 if
    nothing was sent yet."""

    _post: Callable[[Request], Awaitable[Response]] | None = None

    def serve_post(self, route: Callable[[Request], Awaitable[Response]]) -> None:
        self._post = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self._post
        if (
            route is not None
            and scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] == "/mcp"
        ):
            scope["app"] = self  # `request.app`, as Starlette sets it
            send = _sending_request_id(scope, send)
            response = await route(Request(scope, receive))
            await response(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings) -> GatewayApp:
    offered = get_version(settings.upstream_protocol_version)
    assert offered is not None  # validated in Settings
    allowed_hosts = [h.lower() for h in settings.allowed_hosts]
    public_url = str(settings.public_url) if settings.public_url is not None else None
    app_metrics = metrics.Metrics()
    timeline = settings.log_level == "debug"  # each call's steps, logged (metrics.CallTiming)

    # Pure functions of a Host value (and the scheme), which every call of a
    # client repeats: remembered for the first few hundred values seen (1-2% of
    # the hot path's CPU each, bench/README.md "Third round").
    known_urls: dict[tuple[str, str | None], str | None] = {}
    hosts_ok: set[str] = set()

    def gateway_url(request: Request, headers: Mapping[str, str] | None = None) -> str | None:
        # The scope's scheme, which is what `request.url.scheme` reads, without
        # building the whole URL (3% of the hot path's CPU, bench/README.md).
        key = (
            request.scope.get("scheme", "http"),
            (request.headers if headers is None else headers).get("host"),
        )
        if key in known_urls:
            return known_urls[key]
        url = _gateway_mcp_url(public_url, key[0], key[1], allowed_hosts)
        if len(known_urls) < _MEMO_SIZE:
            known_urls[key] = url
        return url

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Streamable HTTP or stdio, by which of the two upstream settings is set.
        transport, max_sessions = build_transport(settings)
        pool_transport: Transport = transport
        modern_upstream: ModernHttpUpstream | None = None
        if isinstance(transport, StreamableHttpTransport):
            # The upstream's era (app/upstream/era.py) picks the seam's implementation.
            modern_upstream = ModernHttpUpstream(
                transport.client,
                str(settings.upstream_url),
                request_timeout_s=settings.request_timeout_s,
            )
            era = EraProbe(modern_upstream, settings.upstream_era)
            pool_transport = era_transport.EraTransport(transport, modern_upstream, era)
        else:
            # A stdio server speaks a legacy revision: nothing to probe.
            era = EraProbe(None, "legacy")
        app.state.modern_upstream = modern_upstream
        app.state.era = era
        pool = SessionPool(
            pool_transport,
            max_sessions=max_sessions,
            idle_s=settings.session_idle_s,
            max_per_credential=min(settings.session_share(), max_sessions),
        )
        pool.start()
        app.state.pool = pool
        app.state.readiness = ReadinessCheck(pool, offered, max_age_s=settings.ready_max_age_s)

        # OAuth is an HTTP upstream's: a stdio server has no challenge to relay.
        auth_relay: AuthRelay | None = None
        if isinstance(transport, StreamableHttpTransport):
            http = transport

            async def fetch(url: str) -> object:
                return await http.fetch_document(url, max_bytes=MAX_METADATA_BYTES)

            auth_relay = AuthRelay(fetch, str(settings.upstream_url))
        app.state.auth = auth_relay
        subscriptions = SubscriptionHub(
            pool,
            queue_bound=settings.listen_queue_size,
            ready_timeout_s=settings.listen_ready_timeout_s,
            call_timeout_s=settings.listen_call_timeout_s,
        )
        app.state.subscriptions = subscriptions
        # Who owns what among replicas, and the relay to the owner (app/replicas.py).
        replicas = build_replicas(settings)
        replicas.relay.observer = app_metrics.relayed
        legacy_sessions = LegacySessions(
            pool,
            idle_s=settings.session_idle_s,
            ids=replicas.ids,
            max_sessions=settings.max_legacy_sessions,
            max_per_credential=settings.legacy_session_share(),
            reclaim_idle_s=settings.legacy_session_reclaim_idle_s,
        )
        legacy_sessions.start()
        app.state.legacy = LegacyFront(
            legacy_sessions,
            offered=offered,
            max_batch=settings.max_batch,
            write_timeout_s=settings.write_timeout_s,
            max_json_depth=settings.max_json_depth,
            auth_relay=auth_relay,
            relay=replicas.relay,
            keepalive_s=settings.listen_keepalive_s,
            metrics=app_metrics,
        )
        app.state.http_sse = HttpSseFront(
            app.state.legacy,
            legacy_sessions,
            max_channels=settings.max_legacy_sessions,
            keepalive_s=settings.listen_keepalive_s,
            write_timeout_s=settings.write_timeout_s,
            init_timeout_s=settings.sse_init_timeout_s,
            max_uninitialized_per_address=settings.max_uninitialized_sse_per_address,
        )
        bridge = build_bridge(settings, pool, replicas)
        app.state.gateway = Gateway(
            pool,
            offered_version=offered,
            ttl_ms=settings.cache_ttl_ms,
            cache_scope=settings.cache_scope,
            subscriptions=subscriptions,
            listen_keepalive_s=settings.listen_keepalive_s,
            bridge=bridge,
            auth=auth_relay,
            declare_every_input=settings.upstream_client_capabilities == "all",
            call_deadline_s=settings.call_deadline_s,
        )
        upstream = await era_transport.first_look(era, pool)
        log.info(
            "gateway_started", upstream_version_offered=offered.name, port=settings.port, **upstream
        )
        try:
            app_metrics.start(pool, bridge, subscriptions, settings.host, settings.metrics_port)
            # The ~74k objects alive after start-up never become garbage; left in
            # the collector's generations, every full collection walks them all
            # and stalls each call in flight (the p99 tail, bench/README.md).
            gc.freeze()
            yield
        finally:
            await app_metrics.stop()
            # Normally already done by `drain` before the server stopped serving.
            await subscriptions.aclose(settings.shutdown_grace_s)
            await bridge.aclose()  # parked exchanges ended cleanly, lanes closed
            await app.state.http_sse.aclose()
            await legacy_sessions.aclose()  # legacy clients' upstream sessions DELETEd
            await replicas.aclose()
            await app.state.gateway.aclose()
            await pool.aclose()
            await transport.aclose()
            log.info("gateway_stopped")

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
    app.add_middleware(RequestIdMiddleware)
    app.state.metrics = app_metrics

    @app.exception_handler(404)
    async def not_found(request: Request, exc: HTTPException) -> Response:
        return _json(
            Rejection(INVALID_REQUEST, "Not found: the MCP endpoint is POST /mcp", status=404)
        )

    @app.get("/healthz")
    async def healthz(request: Request) -> Response:
        # The upstream's era as last seen; never a probe (liveness stays local).
        upstream = era_transport.describe(request.app.state.era, request.app.state.pool)
        return JSONResponse({"status": "ok", "upstream": upstream})

    if settings.metrics_port is None:  # else only on its own port: a 404 here

        @app.get("/metrics")
        async def metrics_route(request: Request) -> Response:
            body, content_type = app_metrics.render(request.headers.get("accept"))
            return Response(body, media_type=content_type)

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        readiness: ReadinessCheck = request.app.state.readiness
        outcome = await readiness.check()
        body = outcome.body
        if isinstance(body.get("upstream"), dict):
            # The era as probed (app/upstream/era.py), not as a session's version shows it.
            era = era_transport.describe(request.app.state.era, request.app.state.pool)
            known = {k: v for k, v in era.items() if v is not None}
            body = {**body, "upstream": {**body["upstream"], **known}}
        return JSONResponse(body, status_code=outcome.status)

    # RFC 9728 section 3.1: the metadata of https://host/mcp is at
    # /.well-known/oauth-protected-resource/mcp; clients also try the root form.
    metadata_paths = {"", "/mcp"}
    if public_url is not None:
        metadata_paths.add(urlsplit(public_url).path.rstrip("/"))

    @app.get(WELL_KNOWN + "{suffix:path}")
    async def protected_resource_metadata(request: Request) -> Response:
        # Read from the path, not declared as a parameter: a declared one makes
        # FastAPI build a pydantic field, importing pydantic.v1 (1.5 MB of RSS).
        suffix: str = request.path_params["suffix"]
        if suffix.rstrip("/") not in metadata_paths:
            return JSONResponse({"error": "not_found"}, status_code=404)
        refused = security.check_host(request.headers.get("host"), allowed_hosts)
        if refused is not None:
            log.warning("request_refused", reason="host_or_origin", status=refused.http_status)
            app_metrics.rejected(refused.code, refused.http_status)
            return _json(refused)
        relay: AuthRelay | None = request.app.state.auth
        if relay is None:
            return JSONResponse(
                {"error": "not_found", "error_description": "the upstream is not an HTTP server"},
                status_code=404,
            )
        status, body = await relay.answer(gateway_url(request))
        return JSONResponse(body, status_code=status)

    async def _body_or_refusal(
        request: Request, headers: Mapping[str, str] | None = None, legacy_client: bool = False
    ) -> bytes | Response:
        """The request body, or the answer refusing it (413, 408, a client gone)."""
        try:
            return await _read_body(
                request,
                request.headers if headers is None else headers,
                settings.max_body_bytes,
                settings.read_timeout_s,
            )
        except BodyAbandoned:
            log.info("client_disconnected", phase="request_body")
            return Response(status_code=400)  # nobody is left to read it
        except BodyTimeout:
            log.warning("request_refused", reason="body_timeout", status=408)
            app_metrics.rejected(INVALID_REQUEST, 408)
            timeout = _json(
                Rejection(
                    INVALID_REQUEST,
                    f"Request timeout: the body did not arrive within {settings.read_timeout_s:g} "
                    "s (MCP_SHIM_READ_TIMEOUT_S)",
                    status=408,
                ),
                legacy_client,
            )
            # The rest of the body may still come: this connection cannot carry another request.
            timeout.headers["connection"] = "close"
            return timeout
        except BodyTooLarge:
            log.warning("request_refused", reason="body_too_large", status=413)
            app_metrics.rejected(INVALID_REQUEST, 413)
            return _json(
                Rejection(
                    INVALID_REQUEST,
                    f"Request body too large: the limit is {settings.max_body_bytes} bytes "
                    "(MCP_SHIM_MAX_BODY_BYTES)",
                    status=413,
                ),
                legacy_client,
            )

    def _host_or_origin_refused(
        headers: Mapping[str, str], legacy_client: bool = False
    ) -> Response | None:
        host = headers.get("host")
        refused = None
        if host is None or host not in hosts_ok:
            refused = security.check_host(host, allowed_hosts)
            if refused is None and host is not None and len(hosts_ok) < _MEMO_SIZE:
                hosts_ok.add(host)
        refused = refused or security.check_origin(headers.get("origin"), settings.allowed_origins)
        if refused is None:
            return None
        log.warning("request_refused", reason="host_or_origin", status=refused.http_status)
        app_metrics.rejected(refused.code, refused.http_status)
        return _json(refused, legacy_client)

    # The deprecated HTTP+SSE transport of 2024-11-05 clients (app/legacy/http_sse.py).
    @app.get("/sse")
    async def sse_open(request: Request) -> Response:
        refused = _host_or_origin_refused(request.headers, legacy_client=True)
        if refused is not None:
            return refused
        http_sse: HttpSseFront = request.app.state.http_sse
        address = request.client.host if request.client is not None else None
        return http_sse.open(request.headers, address)

    @app.post(MESSAGES_PATH)
    async def sse_message(request: Request) -> Response:
        refused = _host_or_origin_refused(request.headers, legacy_client=True)
        if refused is not None:
            return refused
        body = await _body_or_refusal(request, legacy_client=True)
        if isinstance(body, Response):
            return body
        http_sse: HttpSseFront = request.app.state.http_sse
        session_id = request.query_params.get("session_id")
        return await http_sse.post(
            session_id, body, request.headers, gateway_url=gateway_url(request)
        )

    @app.api_route("/mcp", methods=["GET", "DELETE", "PUT", "PATCH"])
    async def mcp_other(request: Request) -> Response:
        structlog.contextvars.bind_contextvars(request_id=request.state.request_id)
        if request.method in ("GET", "DELETE") and legacy.SESSION_HEADER in request.headers:
            # A legacy client's session: its server stream, or its end.
            refused = _host_or_origin_refused(request.headers, legacy_client=True)
            if refused is not None:
                return refused
            front: LegacyFront = request.app.state.legacy
            if request.method == "DELETE":
                return await front.delete(request.headers)
            sse_ok, _ = _accepts(request.headers.get("accept", ""))
            return await front.get(request.headers, sse_ok=sse_ok, gateway_url=gateway_url(request))
        # streamable-http "Backward Compatibility": without a legacy session,
        # GET and DELETE answer 405.
        log.info(
            "request_refused",
            request_id=request.state.request_id,
            reason="method_not_allowed",
            http_method=request.method,
            status=405,
        )
        app_metrics.rejected(None, 405)
        return Response(status_code=405, headers={"allow": "POST"})

    # Not a FastAPI route: GatewayApp serves it (see there why).
    async def mcp_post(request: Request) -> Response:
        started = time.perf_counter()
        timing = metrics.start_call(timeline)
        scope = request.scope
        request_id: str = scope["state"]["request_id"]
        # Read once from the scope (app/front/scope_headers.py); starlette's
        # `request.headers` only where a legacy or pass-through path needs one.
        headers = ScopeHeaders(scope["headers"])
        # Every log line below this request, in the gateway and the bridge too,
        # carries its id: each request runs in its own task and context copy.
        structlog.contextvars.bind_contextvars(request_id=request_id)
        # W3C Trace Context: forwarded upstream only if valid (app/tracing.py).
        trace = tracing.from_headers(headers.getlist("traceparent"), headers.getlist("tracestate"))
        tracing.bind(trace)
        if trace is not None:
            structlog.contextvars.bind_contextvars(trace_id=trace.trace_id)
        else:
            structlog.contextvars.unbind_contextvars("trace_id")

        # A session is a legacy client's (2026-07-28 has none): its refusals made
        # before the body is read must be legacy-shaped too.
        legacy_client = legacy.SESSION_HEADER in headers
        refused = _host_or_origin_refused(headers, legacy_client)
        if refused is not None:
            return refused
        content_type = headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if content_type != "application/json":
            rejection = Rejection(
                INVALID_REQUEST,
                "Unsupported media type: send the JSON-RPC message as application/json",
                status=415,
            )
            log.warning("request_refused", reason="content_type", status=415)
            app_metrics.rejected(rejection.code, 415)
            return _json(rejection, legacy_client)
        body = await _body_or_refusal(request, headers, legacy_client)
        if isinstance(body, Response):
            return body
        metrics.mark("body_read")

        claim = legacy.claims(body, headers)
        if claim is not None:
            sse_ok, json_ok = _accepts(headers.get("accept", ""))
            legacy_front: LegacyFront = request.app.state.legacy
            return await legacy_front.post(
                claim,
                request.headers,
                sse_ok=sse_ok,
                json_ok=json_ok,
                gateway_url=gateway_url(request, headers),
            )
        parsed = modern.parse(body, headers, max_depth=settings.max_json_depth)
        if isinstance(parsed, Rejection):
            log.info("request_rejected", code=parsed.code, status=parsed.http_status)
            app_metrics.rejected(parsed.code, parsed.http_status)
            return _json(parsed)
        if isinstance(parsed, modern.ModernNotification):
            log.info("notification_accepted", method=parsed.method)
            return Response(status_code=202)

        sse_ok, json_ok = _accepts(headers.get("accept", ""))
        if parsed.method == subscriptions_listen.METHOD and not sse_ok:
            refusal = subscriptions_listen.needs_event_stream(parsed.id)
            log.info("request_rejected", code=refusal.code, status=refusal.http_status)
            app_metrics.rejected(refusal.code, refusal.http_status)
            return _json(refusal)
        state = CallState(
            request_id=request_id,
            hop=HOP_HEADER in headers,
            gateway_url=gateway_url(request, headers),
        )
        gateway: Gateway = request.app.state.gateway
        authorization = headers.get("authorization")
        era_probe: EraProbe = request.app.state.era
        era = await era_transport.era_for(era_probe, authorization)

        def done(status: int, ending: str | None) -> None:
            outcome = ending or state.outcome
            duration_s = time.perf_counter() - started
            duration_ms = round(duration_s * 1000, 2)
            logs.call_line(
                log,
                {
                    "method": parsed.method,
                    "client_version": parsed.version.name,
                    "upstream_version": state.upstream_version,
                    "outcome": outcome,
                    "status": status,
                    "duration_ms": duration_ms,
                },
            )
            app_metrics.call_done(
                parsed.method, parsed.version, outcome, status, duration_s, timing.upstream_s
            )
            if timing.marks is not None:
                # After the answer was written and the upstream exchange closed
                # (drained): where the call's time went (bench/README.md, the tail).
                log.debug("call_timeline", **timing.timeline(started), done_ms=duration_ms)

        def translated() -> CallAnswer:
            return CallAnswer(
                gateway.run(parsed, authorization, state),
                accepts_sse=sse_ok,
                accepts_json=json_ok,
                on_done=done,
                write_timeout_s=settings.write_timeout_s,
            )

        if era is not None and era.name == "modern":
            # The cheapest path: nothing to translate (app/passthrough.py).
            async def fallback() -> Response:
                return translated()

            def passed(status: int, disconnected: bool, outcome: str) -> None:
                state.upstream_version = parsed.version.name
                state.outcome = outcome
                done(status, "client_disconnected" if disconnected else None)

            return PassThrough(
                request.app.state.modern_upstream,
                body,
                passed_headers(request.headers),
                call_id=parsed.id,
                method=parsed.method,
                long_lived=parsed.method == subscriptions_listen.METHOD,
                era=era_probe,
                seen=era,
                fallback=fallback,
                on_done=passed,
                gateway_url=state.gateway_url,
                write_timeout_s=settings.write_timeout_s,
            )

        return translated()

    app.serve_post(mcp_post)
    app.state.shutdown_grace_s = settings.shutdown_grace_s
    return app


async def drain(app: FastAPI) -> None:
    """Before the HTTP server stops: end the long-lived listen streams with their
    graceful closing result (uvicorn would otherwise wait for them, then cancel
    them without one). Lifespan shutdown runs only after connections closed."""
    subscriptions: SubscriptionHub | None = getattr(app.state, "subscriptions", None)
    if subscriptions is not None:
        await subscriptions.close_all(app.state.shutdown_grace_s)
