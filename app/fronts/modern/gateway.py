"""One modern call translated for a legacy upstream: the upstream session
picked, the call's kind served (server/discover, subscriptions/listen, the
tasks extension, the `Mcp-Param-*` check), then the call handed to the MRTR
bridge or forwarded (app/mrtr/forwarder.py: translated, sent, what belongs
to the call relayed, the answer translated back); the upstream's failures
and refusals answered.

`Gateway.run` yields the messages the client should receive, in order; the
last one is the answer. The HTTP layer decides JSON or SSE from them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import structlog

from app import tracing
from app.call import CallState, Message, ModernCall, Outgoing
from app.deadline import StepDeadline
from app.fronts.modern.checks import supported_version_names
from app.fronts.shared import auth
from app.fronts.shared.auth import AuthRelay
from app.headers import param_headers
from app.mrtr import capabilities as mrtr_capabilities
from app.mrtr.bridge import Bridge
from app.mrtr.forwarder import Forwarder
from app.rejections import INTERNAL_ERROR, Rejection
from app.subscriptions import filters as subscription_filters
from app.subscriptions import listen as subscriptions_listen
from app.subscriptions.hub import SubscriptionHub
from app.tasks import bridge as tasks_bridge
from app.tasks.bridge import TaskBridge
from app.upstream.errors import (
    PoolExhausted,
    SessionExpired,
    UpstreamAuthChallenge,
    UpstreamError,
)
from app.upstream.sessions.pool import PooledSession, SessionPool
from translators import translate
from translators.registry import Version

log = structlog.get_logger("mcp_shim.gateway")

SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"


class Gateway:
    def __init__(
        self,
        pool: SessionPool,
        *,
        offered_version: Version,
        ttl_ms: int,
        cache_scope: str,
        subscriptions: SubscriptionHub | None = None,
        listen_keepalive_s: float = 15.0,
        bridge: Bridge | None = None,
        auth: AuthRelay | None = None,
        declare_every_input: bool = False,
        call_deadline_s: float = 120.0,
        tasks: TaskBridge | None = None,
        forwarder: Forwarder | None = None,
    ) -> None:
        self._pool = pool
        # The call's upstream part (app/mrtr/forwarder.py), the MRTR and tasks bridges' too.
        self._forwarder = forwarder or Forwarder(
            pool, ttl_ms=ttl_ms, cache_scope=cache_scope, observer=subscriptions
        )
        # The tasks extension in front of a 2025-11-25 server (app/tasks); None: no tasks.
        self._tasks = tasks
        self._advertiser = tasks.advertiser if tasks is not None else None
        self._call_deadline_s = call_deadline_s
        # MCP_SHIM_UPSTREAM_CLIENT_CAPABILITIES=all: sessions declare every input
        # capability; the caller's own set still decides what it is asked.
        self._declare_every_input = declare_every_input
        # Upstream 401/403 relayed with their challenge (app/fronts/shared/auth.py).
        self._auth = auth
        # The MRTR bridge (app/mrtr); None: the upstream's requests are refused.
        self._bridge = bridge
        # subscriptions/listen (app/subscriptions); None: forwarded like any call.
        self._subscriptions = subscriptions
        self._listen_keepalive_s = listen_keepalive_s
        self._offered_version = offered_version
        self._ttl_ms = ttl_ms
        self._cache_scope = cache_scope

    # -- entry point -------------------------------------------------------

    async def run(
        self, call: ModernCall, authorization: str | None, state: CallState
    ) -> AsyncGenerator[Outgoing, None]:
        """The call's messages for its client, within MCP_SHIM_CALL_DEADLINE_S.

        A subscriptions/listen stream is long-lived by design and has no
        deadline; a turn of a multi round-trip call ends when it parks, so the
        deadline bounds each turn. At the deadline the call is cancelled where
        it waits: its cleanup sends the upstream notifications/cancelled and
        releases the session or lane, and the client gets -32603 with 504.
        """
        steps = self._call(call, authorization, state)
        when = None
        if call.method != subscriptions_listen.METHOD:
            when = asyncio.get_running_loop().time() + self._call_deadline_s
        deadline = StepDeadline(when)
        try:
            async with contextlib.aclosing(steps):
                while True:
                    failed = False
                    try:
                        with deadline:
                            out = await anext(steps)
                    except StopAsyncIteration:
                        if not deadline.expired:
                            return
                    except Exception as exc:
                        failed = not (isinstance(exc, TimeoutError) and deadline.expired)
                        if failed:
                            # A defect of ours: the stack goes to the log, never to the client.
                            log.exception("call_failed", method=call.method)
                    else:
                        yield out
                        continue
                    if failed:
                        state.outcome = "internal_error"
                        rejection = Rejection(
                            INTERNAL_ERROR,
                            "Internal error: the gateway failed to serve the request",
                            call.id,
                            status=500,
                        )
                    else:
                        state.outcome = "deadline_exceeded"
                        log.warning(
                            "call_deadline_exceeded",
                            method=call.method,
                            deadline_s=self._call_deadline_s,
                        )
                        rejection = Rejection(
                            INTERNAL_ERROR,
                            f"Internal error: the call did not complete within "
                            f"{self._call_deadline_s:g} s (MCP_SHIM_CALL_DEADLINE_S); the "
                            "upstream request was cancelled",
                            call.id,
                            status=504,
                        )
                    yield Outgoing(rejection.to_message(), True, rejection.http_status)
                    return
        finally:
            deadline.close()

    async def _call(
        self, call: ModernCall, authorization: str | None, state: CallState
    ) -> AsyncGenerator[Outgoing, None]:
        try:
            declared = call.client_capabilities
            if self._declare_every_input:
                declared = mrtr_capabilities.with_every_input(declared)
            upstream_caps = translate.client_capabilities(
                declared, call.version, self._offered_version
            )
            key = self._pool.key_for(upstream_caps, self._offered_version, authorization)
            pooled = await self._pool.acquire(key, upstream_caps, authorization)
            try:
                state.upstream_version = pooled.version.name
                tracing.event("mcp_shim.translate", {"mcp_shim.to": pooled.version.name})
                if call.method == "server/discover":
                    state.outcome = "ok"
                    yield Outgoing(self._discover(call, pooled), final=True)
                    return
                if call.method == subscriptions_listen.METHOD and self._subscriptions is not None:
                    stream = subscriptions_listen.listen(
                        self._subscriptions,
                        call,
                        pooled,
                        upstream_caps,
                        authorization,
                        state,
                        keepalive_s=self._listen_keepalive_s,
                        tasks=self._tasks.watchers if self._tasks is not None else None,
                    )
                    # Closed here, not by the garbage collector, when the client leaves.
                    async with contextlib.aclosing(stream) as frames:
                        async for frame in frames:
                            yield Outgoing(
                                frame.message, frame.final, frame.status, frame.keepalive
                            )
                    return
                if call.method in tasks_bridge.METHODS and self._tasks is not None:
                    yield await self._tasks.server.serve(call, pooled, authorization, state)
                    return
                if call.method == "tools/call":
                    try:
                        rejection = await self._check_param_headers(call, pooled)
                    except SessionExpired:
                        fresh = await self._pool.renew(pooled, upstream_caps, authorization)
                        self._pool.release(pooled)
                        pooled = fresh
                        rejection = await self._check_param_headers(call, pooled)
                    if rejection is not None:
                        state.outcome = "rejected"
                        yield Outgoing(rejection.to_message(), True, rejection.http_status)
                        return
                    planned = await self._task_plan(call, pooled, authorization, state)
                    if isinstance(planned, Outgoing):
                        yield planned
                        return
                    call = planned
                if self._bridge is not None and self._bridge.takes(call):
                    flow = self._bridge.run(
                        call, key, upstream_caps, authorization, state, hop=state.hop
                    )
                    async with contextlib.aclosing(flow) as bridged:
                        async for step in bridged:
                            yield Outgoing(step.message, step.final, step.status)
                    return
                # Closed here, before the session goes back to the pool: left to
                # the garbage collector, its clean-up (the exchange's close) ran
                # later in a task of its own, one more task per call.
                forwarded = self._forwarder.forward(
                    call, pooled, upstream_caps, authorization, state, tools=self._advertiser
                )
                async with contextlib.aclosing(forwarded) as outs:
                    async for out in outs:
                        yield out
            finally:
                self._pool.release(pooled)
        except UpstreamAuthChallenge as exc:
            yield self._auth_refused(exc, call, state)
        except UpstreamError as exc:
            yield self._upstream_failed(exc, call, state)

    async def _task_plan(
        self, call: ModernCall, pooled: PooledSession, authorization: str | None, state: CallState
    ) -> ModernCall | Outgoing:
        """A tools/call as app/tasks decides: the upstream's task (its
        CreateTaskResult), refused, or the call to forward (a `task` param gone)."""
        if self._tasks is None:
            return call
        plan = await self._tasks.creator.plan(call, pooled, authorization)
        if isinstance(plan, Rejection):
            state.outcome = "missing_capability"
            return Outgoing(plan.to_message(), True, plan.http_status)
        if isinstance(plan, tasks_bridge.Resume):
            return await self._tasks.creator.resume(call, plan, authorization, state)
        if isinstance(plan, tasks_bridge.RunAsTask):
            return await self._tasks.creator.create(call, pooled, authorization, state, plan.mode)
        return plan

    def _auth_refused(
        self, exc: UpstreamAuthChallenge, call: ModernCall, state: CallState
    ) -> Outgoing:
        """The upstream's answer, not a failure: same status, its challenge."""
        state.outcome = f"upstream_{exc.status}"
        log.info("upstream_auth_refused", status=exc.status)
        if self._auth is not None:
            self._auth.note(exc.www_authenticate)
        refusal, headers = auth.refusal(call.id, exc, state.gateway_url)
        return Outgoing(refusal.to_message(), True, refusal.http_status, headers=headers)

    def _upstream_failed(self, exc: UpstreamError, call: ModernCall, state: CallState) -> Outgoing:
        state.outcome = type(exc).__name__
        log.warning("upstream_error", error=exc.message)
        self._pool.note_failure(exc)
        # The gateway's own bounds (503, 429) are not the upstream's failure.
        what = (
            "the gateway is at a limit"
            if isinstance(exc, PoolExhausted)
            else "the upstream MCP server could not serve the request"
        )
        rejection = Rejection(
            INTERNAL_ERROR,
            f"Internal error: {what} ({exc.message})",
            call.id,
            status=exc.status,
        )
        retry = (("retry-after", str(exc.retry_after_s)),) if isinstance(exc, PoolExhausted) else ()
        return Outgoing(rejection.to_message(), True, rejection.http_status, headers=retry)

    # -- server/discover ---------------------------------------------------

    def _discover(self, call: ModernCall, pooled: PooledSession) -> Message:
        init = pooled.init_result
        result: dict[str, Any] = {
            "resultType": "complete",
            "supportedVersions": supported_version_names(),
            # listChanged / resources.subscribe exactly as subscriptions/listen serves them.
            "capabilities": self._capabilities(call, pooled),
            "ttlMs": self._ttl_ms,
            "cacheScope": self._cache_scope,
        }
        if pooled.server_info is not None:
            result["_meta"] = {SERVER_INFO_META: pooled.server_info}
        if isinstance(init.get("instructions"), str):
            result["instructions"] = init["instructions"]
        return {"jsonrpc": "2.0", "id": call.id, "result": result}

    def _capabilities(self, call: ModernCall, pooled: PooledSession) -> Message:
        # listChanged / resources.subscribe exactly as subscriptions/listen serves them.
        caps = subscription_filters.advertised(
            translate.server_capabilities(pooled.server_capabilities, pooled.version, call.version)
        )
        if self._tasks is not None:
            caps = self._tasks.advertiser.discover_capabilities(pooled, caps)
        return caps

    # -- Mcp-Param-* -------------------------------------------------------

    async def _check_param_headers(
        self, call: ModernCall, pooled: PooledSession
    ) -> Rejection | None:
        name = call.params.get("name")
        if not isinstance(name, str):
            return None
        paths = await pooled.tool_header_paths(name)
        if not paths:
            return None
        rejection = param_headers.check(paths, call.params.get("arguments"), call.param_headers)
        return rejection.with_id(call.id) if rejection is not None else None

    async def aclose(self) -> None:
        await self._forwarder.aclose()
