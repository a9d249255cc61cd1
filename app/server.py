"""The FastAPI front: routes parse, call, answer. Logic lives below them."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from app import jsonio
from app.answer import CallAnswer
from app.config import Settings
from app.front import modern, security
from app.gateway import CallState, Gateway
from app.mrtr.bridge import build_bridge
from app.mrtr.forwarding import HOP_HEADER
from app.rejections import INVALID_REQUEST, Rejection
from app.subscriptions import listen as subscriptions_listen
from app.subscriptions.hub import SubscriptionHub
from app.upstream.choice import build_transport
from app.upstream.pool import SessionPool
from translators.registry import get_version

log = structlog.get_logger("mcp_shim.http")

_REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class BodyTooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > limit:
            raise BodyTooLarge
    return bytes(chunks)


def _json(rejection: Rejection) -> Response:
    return Response(
        jsonio.dumps(rejection.to_message()),
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


def create_app(settings: Settings) -> FastAPI:
    offered = get_version(settings.upstream_protocol_version)
    assert offered is not None  # validated in Settings
    allowed_hosts = [h.lower() for h in settings.allowed_hosts]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Streamable HTTP or stdio, by which of the two upstream settings is set.
        transport, max_sessions = build_transport(settings)
        pool = SessionPool(transport, max_sessions=max_sessions, idle_s=settings.session_idle_s)
        pool.start()
        subscriptions = SubscriptionHub(
            pool,
            queue_bound=settings.listen_queue_size,
            ready_timeout_s=settings.listen_ready_timeout_s,
            call_timeout_s=settings.listen_call_timeout_s,
        )
        app.state.subscriptions = subscriptions
        bridge = build_bridge(settings, pool)
        app.state.gateway = Gateway(
            pool,
            offered_version=offered,
            ttl_ms=settings.cache_ttl_ms,
            cache_scope=settings.cache_scope,
            subscriptions=subscriptions,
            listen_keepalive_s=settings.listen_keepalive_s,
            bridge=bridge,
        )
        log.info("gateway_started", upstream_version_offered=offered.name, port=settings.port)
        try:
            yield
        finally:
            # Normally already done by `drain` before the server stopped serving.
            await subscriptions.aclose(settings.shutdown_grace_s)
            await bridge.aclose()  # parked exchanges ended cleanly, lanes closed
            await app.state.gateway.aclose()
            await pool.aclose()
            await transport.aclose()
            log.info("gateway_stopped")

    app = FastAPI(
        title="mcp-shim", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )

    @app.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    @app.api_route("/mcp", methods=["GET", "DELETE", "PUT", "PATCH"])
    async def mcp_other(request: Request) -> Response:
        # streamable-http "Backward Compatibility": a modern-only endpoint
        # answers GET and DELETE with 405.
        raw_id = request.headers.get("x-request-id", "")
        log.info(
            "request_refused",
            request_id=raw_id if _REQUEST_ID_OK.match(raw_id) else uuid.uuid4().hex[:16],
            reason="method_not_allowed",
            http_method=request.method,
            status=405,
        )
        return Response(status_code=405, headers={"allow": "POST"})

    @app.post("/mcp")
    async def mcp_post(request: Request) -> Response:
        started = time.perf_counter()
        raw_id = request.headers.get("x-request-id", "")
        request_id = raw_id if _REQUEST_ID_OK.match(raw_id) else uuid.uuid4().hex[:16]
        # Every log line below this request, in the gateway and the bridge too,
        # carries its id: each request runs in its own task and context copy.
        structlog.contextvars.bind_contextvars(request_id=request_id)

        refused = security.check_host(
            request.headers.get("host"), allowed_hosts
        ) or security.check_origin(request.headers.get("origin"), settings.allowed_origins)
        if refused is not None:
            log.warning("request_refused", reason="host_or_origin", status=refused.http_status)
            return _json(refused)
        content_type = (
            request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
        )
        if content_type != "application/json":
            rejection = Rejection(
                INVALID_REQUEST,
                "Unsupported media type: send the JSON-RPC message as application/json",
                status=415,
            )
            log.warning("request_refused", reason="content_type", status=415)
            return _json(rejection)
        try:
            body = await _read_body(request, settings.max_body_bytes)
        except BodyTooLarge:
            log.warning("request_refused", reason="body_too_large", status=413)
            return _json(
                Rejection(
                    INVALID_REQUEST,
                    f"Request body too large: the limit is {settings.max_body_bytes} bytes "
                    "(MCP_SHIM_MAX_BODY_BYTES)",
                    status=413,
                )
            )

        parsed = modern.parse(body, request.headers)
        if isinstance(parsed, Rejection):
            log.info("request_rejected", code=parsed.code, status=parsed.http_status)
            return _json(parsed)
        if isinstance(parsed, modern.ModernNotification):
            log.info("notification_accepted", method=parsed.method)
            return Response(status_code=202)

        sse_ok, json_ok = _accepts(request.headers.get("accept", ""))
        if parsed.method == subscriptions_listen.METHOD and not sse_ok:
            refusal = subscriptions_listen.needs_event_stream(parsed.id)
            log.info("request_rejected", code=refusal.code, status=refusal.http_status)
            return _json(refusal)
        state = CallState(request_id=request_id, hop=HOP_HEADER in request.headers)
        gateway: Gateway = request.app.state.gateway

        def done(status: int, disconnected: bool) -> None:
            log.info(
                "call",
                method=parsed.method,
                client_version=parsed.version.name,
                upstream_version=state.upstream_version,
                outcome="client_disconnected" if disconnected else state.outcome,
                status=status,
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
            )

        return CallAnswer(
            gateway.run(parsed, request.headers.get("authorization"), state),
            accepts_sse=sse_ok,
            accepts_json=json_ok,
            on_done=done,
            write_timeout_s=settings.write_timeout_s,
        )

    app.state.shutdown_grace_s = settings.shutdown_grace_s
    return app


async def drain(app: FastAPI) -> None:
    """Before the HTTP server stops: end the long-lived listen streams with their
    graceful closing result (uvicorn would otherwise wait for them, then cancel
    them without one). Lifespan shutdown runs only after connections closed."""
    subscriptions: SubscriptionHub | None = getattr(app.state, "subscriptions", None)
    if subscriptions is not None:
        await subscriptions.close_all(app.state.shutdown_grace_s)
