"""The MCP endpoint: every client's `POST /mcp`, a legacy session's GET and DELETE.

The POST is parsed here once: a legacy client's message goes to the legacy
front (app/fronts/legacy/front.py), a modern client's request to the modern
front (app/fronts/modern/front.py), which passes it through to a modern
upstream or has the gateway translate it. The route parses, calls, answers.
"""

from __future__ import annotations

import time

import structlog
from starlette.requests import Request
from starlette.responses import Response

from app import call, logs, metrics, tracing
from app.call import ModernCall, ModernNotification
from app.cluster.replicas import HOP_HEADER
from app.config import Settings
from app.fronts.legacy import checks as legacy
from app.fronts.modern import checks as modern
from app.fronts.modern.front import Done
from app.rejections import Rejection
from app.routes.edge import Edge, accepts, answer
from app.routes.methods import MCP_ALLOW
from app.routes.scope_headers import ScopeHeaders
from app.subscriptions import listen as subscriptions_listen
from app.wiring import Wiring

log = structlog.get_logger("mcp_shim.http")


class McpRoutes:
    def __init__(
        self,
        settings: Settings,
        edge: Edge,
        app_metrics: metrics.Metrics,
        server: str | None = None,
    ) -> None:
        # A servers file's server: its name on the call's log lines, bound with
        # the request id (one bind per call: bench/instructions.py --route).
        self._context = {} if server is None else {"server": server}
        self._settings = settings
        self._edge = edge
        self._metrics = app_metrics
        self._timeline = settings.log_level == "debug"  # each call's steps, logged (CallTiming)

    async def post(self, request: Request, headers: ScopeHeaders) -> Response:
        """Not a FastAPI route: app/serving/server.py's GatewayApp serves it (see there
        why), with the headers read once from the scope (app/routes/scope_headers.py);
        starlette's `request.headers` only where a legacy or pass-through path needs one."""
        started = time.perf_counter()
        timing = call.start_call(self._timeline)
        scope = request.scope
        request_id: str = scope["state"]["request_id"]
        _bind_context(request_id, headers, self._context)
        edge = self._edge
        # A session is a legacy client's (2026-07-28 has none): its refusals made
        # before the body is read must be legacy-shaped too.
        legacy_client = legacy.SESSION_HEADER in headers
        refused = edge.host_or_origin_refused(headers, legacy_client) or edge.media_type_refused(
            headers, legacy_client
        )
        if refused is not None:
            return refused
        body = await edge.body_or_refusal(request, headers, legacy_client)
        if isinstance(body, Response):
            return body
        call.mark("body_read")
        wiring: Wiring = request.app.state.wiring
        claim = legacy.claims(body, headers)
        if claim is not None:
            _describe_legacy(claim.body)
            sse_ok, json_ok = accepts(headers.get("accept", ""))
            return await wiring.legacy.post(
                claim,
                headers,
                sse_ok=sse_ok,
                json_ok=json_ok,
                gateway_url=edge.gateway_url(request, headers),
            )
        parsed = modern.parse(body, headers, max_depth=self._settings.max_json_depth)
        if isinstance(parsed, Rejection):
            return self._rejected(parsed)
        if isinstance(parsed, ModernNotification):
            log.info("notification_accepted", method=parsed.method)
            return Response(status_code=202)
        tracing.describe(parsed.method, parsed.id, parsed.version.name, parsed.params)
        return await self._modern(request, wiring, parsed, body, headers, started, timing)

    async def _modern(
        self,
        request: Request,
        wiring: Wiring,
        parsed: ModernCall,
        body: bytes,
        headers: ScopeHeaders,
        started: float,
        timing: call.CallTiming,
    ) -> Response:
        """A modern client's request, answered by the modern front (app/fronts/modern/front.py)."""
        sse_ok, json_ok = accepts(headers.get("accept", ""))
        if parsed.method == subscriptions_listen.METHOD and not sse_ok:
            return self._rejected(subscriptions_listen.needs_event_stream(parsed.id))
        state = call.CallState(
            request_id=request.scope["state"]["request_id"],
            hop=HOP_HEADER in headers,
            gateway_url=self._edge.gateway_url(request, headers),
        )
        done = self._done(parsed, state, started, timing)
        return await wiring.modern.answer(
            parsed, body, headers, state, done, sse_ok=sse_ok, json_ok=json_ok
        )

    def _rejected(self, rejection: Rejection) -> Response:
        log.info("request_rejected", code=rejection.code, status=rejection.http_status)
        tracing.note(outcome="rejected", code=rejection.code)
        self._metrics.rejected(rejection.code, rejection.http_status)
        return answer(rejection)

    def _done(
        self,
        parsed: ModernCall,
        state: call.CallState,
        started: float,
        timing: call.CallTiming,
    ) -> Done:
        """The call's log line and metrics, once its answer was written."""
        app_metrics = self._metrics

        def done(status: int, ending: str | None) -> None:
            outcome = ending or state.outcome
            duration_s = time.perf_counter() - started
            duration_ms = round(duration_s * 1000, 2)
            tracing.note(outcome=outcome, upstream_version=state.upstream_version, status=status)
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
                # (drained): where the call's time went (bench/timeline.py).
                log.debug("call_timeline", **timing.timeline(started), done_ms=duration_ms)

        return done

    async def other(self, request: Request) -> Response:
        """GET and DELETE of /mcp: a legacy client's session, else 405. Its log
        context is bound by app/routes/methods.py."""
        if legacy.SESSION_HEADER in request.headers:
            # A legacy client's session: its server stream, or its end.
            refused = self._edge.host_or_origin_refused(request.headers, legacy_client=True)
            if refused is not None:
                return refused
            front = _wiring(request).legacy
            if request.method == "DELETE":
                return await front.delete(request.headers)
            sse_ok, _ = accepts(request.headers.get("accept", ""))
            return await front.get(
                request.headers, sse_ok=sse_ok, gateway_url=self._edge.gateway_url(request)
            )
        # streamable-http "Backward Compatibility": without a legacy session,
        # GET and DELETE answer 405. The Allow is the endpoint's, the same for
        # every 405 of /mcp: the methods it serves, with a session or without.
        return self._edge.method_refused(request, MCP_ALLOW)


def _wiring(request: Request) -> Wiring:
    wiring: Wiring = request.app.state.wiring
    return wiring


def _describe_legacy(body: object) -> None:
    """A legacy client's single message on its server span (a batch stays unnamed)."""
    if isinstance(body, dict) and isinstance(body.get("method"), str):
        tracing.describe(body["method"], body.get("id"), None, body.get("params"))


def _bind_context(request_id: str, headers: ScopeHeaders, context: dict[str, str]) -> None:
    """Every log line below this request, in the gateway and the bridge too,
    carries its id (and its server's name, `context`): each request runs in
    its own task and context copy. W3C Trace Context: forwarded upstream only
    if valid (app/tracing/)."""
    structlog.contextvars.bind_contextvars(request_id=request_id, **context)
    trace = tracing.from_headers(headers.getlist("traceparent"), headers.getlist("tracestate"))
    tracing.bind(trace)
    if trace is not None:
        structlog.contextvars.bind_contextvars(trace_id=trace.trace_id)
    else:
        structlog.contextvars.unbind_contextvars("trace_id")
