"""One modern call, end to end: pick the upstream session, translate, forward,
relay what belongs to the call, translate the answer back.

`Gateway.run` yields the messages the client should receive, in order; the
last one is the answer. The HTTP layer decides JSON or SSE from them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import structlog

from app import auth
from app.auth import AuthRelay
from app.call import CallState, Message, ModernCall, Outgoing, upstream_answered, upstream_sent
from app.deadline import StepDeadline
from app.fronts.modern.checks import LOG_LEVELS, supported_version_names
from app.headers import param_headers
from app.mrtr import capabilities as mrtr_capabilities
from app.mrtr import results as mrtr_results
from app.mrtr.bridge import Bridge
from app.mrtr.turn import Codec
from app.rejections import INTERNAL_ERROR, Rejection, http_status_for
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
from app.upstream.listener import default_answer
from app.upstream.pool import PooledSession, SessionPool
from translators import translate
from translators.registry import Version

log = structlog.get_logger("mcp_shim.gateway")

SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"


def _level_rank(level: Any) -> int:
    try:
        return LOG_LEVELS.index(level)
    except ValueError:
        return len(LOG_LEVELS)  # unknown levels from the server are relayed if any logging is on


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
    ) -> None:
        self._pool = pool
        # The tasks extension in front of a 2025-11-25 server (app/tasks); None: no tasks.
        self._tasks = tasks
        self._call_deadline_s = call_deadline_s
        # MCP_SHIM_UPSTREAM_CLIENT_CAPABILITIES=all: sessions declare every input
        # capability; the caller's own set still decides what it is asked.
        self._declare_every_input = declare_every_input
        # Upstream 401/403 relayed with their challenge (app/auth.py).
        self._auth = auth
        # The MRTR bridge (app/mrtr); None: the upstream's requests are refused.
        self._bridge = bridge
        self._codec = Codec(
            outbound=self._outbound, send=self._send, relay=self._relay, answer=self._answer
        )
        # subscriptions/listen (app/subscriptions); None: forwarded like any call.
        self._subscriptions = subscriptions
        self._listen_keepalive_s = listen_keepalive_s
        self._offered_version = offered_version
        self._ttl_ms = ttl_ms
        self._cache_scope = cache_scope
        self._background: set[asyncio.Task[None]] = set()
        self._last_context: tuple[Any, translate.Context] | None = None

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
                        tasks=self._tasks,
                    )
                    # Closed here, not by the garbage collector, when the client leaves.
                    async with contextlib.aclosing(stream) as frames:
                        async for frame in frames:
                            yield Outgoing(
                                frame.message, frame.final, frame.status, frame.keepalive
                            )
                    return
                if call.method in tasks_bridge.METHODS and self._tasks is not None:
                    yield await self._tasks.serve(call, pooled, authorization, state)
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
                        call, self._codec, key, upstream_caps, authorization, state, hop=state.hop
                    )
                    async with contextlib.aclosing(flow) as bridged:
                        async for step in bridged:
                            yield Outgoing(step.message, step.final, step.status)
                    return
                # Closed here, before the session goes back to the pool: left to
                # the garbage collector, its clean-up (the exchange's close) ran
                # later in a task of its own, one more task per call.
                forwarded = self._forward(call, pooled, upstream_caps, authorization, state)
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
        plan = await self._tasks.plan(call, pooled, authorization)
        if isinstance(plan, Rejection):
            state.outcome = "missing_capability"
            return Outgoing(plan.to_message(), True, plan.http_status)
        if isinstance(plan, tasks_bridge.Resume):
            return await self._tasks.resume(call, plan, authorization, state)
        if isinstance(plan, tasks_bridge.RunAsTask):
            outbound = self._outbound(call, pooled)
            return await self._tasks.create(call, pooled, outbound, authorization, state, plan.mode)
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
            caps = self._tasks.discover_capabilities(pooled, caps)
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

    # -- forwarding --------------------------------------------------------

    def _context(self, pooled: PooledSession) -> translate.Context:
        # A frozen dataclass, built twice per call (request and result) for the
        # same few sessions: the last one is kept, and with it the serverInfo
        # object it was built for (so that identity stays meaningful).
        info = pooled.server_info
        last = self._last_context
        if last is not None and last[0] is info:
            return last[1]
        context = translate.Context(
            ttl_ms=self._ttl_ms, cache_scope=self._cache_scope, server_info=info
        )
        self._last_context = (info, context)
        return context

    def _outbound(self, call: ModernCall, pooled: PooledSession) -> Message:
        return translate.request(call.message, call.version, pooled.version, self._context(pooled))

    async def _forward(
        self,
        call: ModernCall,
        pooled: PooledSession,
        upstream_caps: Mapping[str, Any],
        authorization: str | None,
        state: CallState,
    ) -> AsyncGenerator[Outgoing, None]:
        outbound = self._outbound(call, pooled)
        client_token = _progress_token(call.params)
        fresh: PooledSession | None = None
        try:
            upstream_id, exchange = await self._send(pooled, outbound)
        except SessionExpired:
            # The upstream forgot the session: its handler never ran, so one
            # resend on a fresh session cannot run the call twice.
            fresh = pooled = await self._pool.renew(pooled, upstream_caps, authorization)
            try:
                upstream_id, exchange = await self._send(pooled, outbound)
            except BaseException:
                self._pool.release(fresh)
                raise
        answered = False
        try:
            async for message in exchange:
                if "method" not in message:
                    if message.get("id") != upstream_id:
                        continue
                    answered = True
                    yield self._answer(call, pooled, message, state)
                    return
                if "id" in message:
                    refusal = await self._answer_server_request(call, pooled, message, upstream_id)
                    if refusal is not None:
                        answered = True
                        state.outcome = "missing_capability"
                        yield refusal
                        return
                    continue
                relayed = self._relay(call, pooled, message, client_token, upstream_id)
                if relayed is not None:
                    yield Outgoing(relayed)
            answered = True
            state.outcome = "upstream_closed"
            rejection = Rejection(
                INTERNAL_ERROR,
                "Internal error: the upstream MCP server closed the stream without answering",
                call.id,
                status=502,
            )
            yield Outgoing(rejection.to_message(), True, rejection.http_status)
        finally:
            if fresh is not None:
                self._pool.release(fresh)
            if not answered:
                state.outcome = "cancelled"
                self._spawn(self._cancel_upstream(pooled, upstream_id))
            await exchange.aclose(drain=answered)

    async def _send(self, pooled: PooledSession, outbound: Message) -> tuple[int, Any]:
        upstream_id = pooled.next_id()
        message = dict(outbound)
        message["id"] = upstream_id
        token = _progress_token(message.get("params") or {})
        if token is not None:
            # Progress tokens must be unique per session; callers sharing one
            # session may all use token 1, so the upstream sees our request id.
            params = dict(message["params"])
            params["_meta"] = {**params["_meta"], "progressToken": upstream_id}
            message["params"] = params
        upstream_sent()
        exchange = await pooled.session.request(message)
        return upstream_id, exchange

    def _answer(
        self, call: ModernCall, pooled: PooledSession, message: Message, state: CallState
    ) -> Outgoing:
        upstream_answered()
        self._pool.note_answer(pooled.version)
        if "error" in message and isinstance(message["error"], dict):
            refusal = self._url_elicitation_refusal(call, message["error"], state)
            if refusal is not None:
                return refusal
            error = translate.error(message["error"], pooled.version, call.version)
            state.outcome = f"error {error.get('code')}"
            code = error.get("code")
            status = http_status_for(code) if isinstance(code, int) else 200
            return Outgoing({"jsonrpc": "2.0", "id": call.id, "error": error}, True, status)
        result = message.get("result")
        if not isinstance(result, dict):
            result = {}
        state.outcome = "ok"
        translated = translate.result(
            result, call.method, pooled.version, call.version, self._context(pooled)
        )
        if call.method == "tools/list" and self._tasks is not None:
            translated = self._tasks.annotate_tools(pooled, result, translated)
        return Outgoing({"jsonrpc": "2.0", "id": call.id, "result": translated}, True)

    def _relay(
        self,
        call: ModernCall,
        pooled: PooledSession,
        message: Message,
        client_token: Any,
        upstream_id: int,
    ) -> Message | None:
        method = message.get("method")
        raw_params = message.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        if method == "notifications/progress":
            if client_token is None or params.get("progressToken") != upstream_id:
                return None
            message = {**message, "params": {**params, "progressToken": client_token}}
        elif method == "notifications/message":
            # 2026-07-28 server/utilities/logging: no notifications/message for a
            # request that did not carry io.modelcontextprotocol/logLevel.
            if call.log_level is None:
                return None
            if _level_rank(params.get("level")) < _level_rank(call.log_level):
                return None
        else:
            # Change notifications belong to subscriptions/listen, not to a call.
            if self._subscriptions is not None:
                self._subscriptions.observe(pooled, message)
            return None
        return translate.notification(message, pooled.version, call.version)

    async def _answer_server_request(
        self, call: ModernCall, pooled: PooledSession, message: Message, upstream_id: int
    ) -> Outgoing | None:
        """A request the upstream sent during a call the MRTR bridge does not carry
        (the caller declared no input capability, or the method cannot answer
        input_required): the gateway answers it itself. If the call needs a
        capability the caller did not declare, the call ends: cancelled upstream,
        the request refused, -32021 to the client (2026-07-28 basic/index)."""
        missing = None
        if call.method in call.version.features.mrtr_methods:
            missing = mrtr_capabilities.missing_for(
                message.get("method"), message.get("params"), call.client_capabilities
            )
        if missing is None:
            with contextlib.suppress(UpstreamError):
                await pooled.session.respond(default_answer(message))  # ping, or -32601
            return None
        await self._cancel_upstream(
            pooled, upstream_id, "the client lacks a capability this call needs"
        )
        with contextlib.suppress(UpstreamError):
            await pooled.session.respond(mrtr_results.refusal_reply(message, missing))
        rejection = mrtr_results.missing_capability(call.id, missing)
        return Outgoing(rejection.to_message(), True, rejection.http_status)

    def _url_elicitation_refusal(
        self, call: ModernCall, error: Message, state: CallState
    ) -> Outgoing | None:
        """-32042 (URL elicitation required) for a caller without `elicitation.url`:
        -32021. (A caller with it is served by the MRTR bridge: URL input requests.)"""
        if mrtr_capabilities.url_elicitations(error) is None:
            return None
        missing = mrtr_capabilities.missing_for(
            "elicitation/create", {"mode": "url"}, call.client_capabilities
        )
        if missing is None:
            return None
        state.outcome = "missing_capability"
        rejection = mrtr_results.missing_capability(call.id, missing)
        return Outgoing(rejection.to_message(), True, rejection.http_status)

    async def _cancel_upstream(
        self,
        pooled: PooledSession,
        upstream_id: int,
        reason: str = "client closed the response stream",
    ) -> None:
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": upstream_id, "reason": reason},
        }
        try:
            await pooled.session.notify(note)
        except UpstreamError as exc:
            log.info("upstream_cancel_failed", error=exc.message)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def aclose(self) -> None:
        for task in list(self._background):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 2.0)


def _progress_token(params: Mapping[str, Any]) -> Any:
    meta = params.get("_meta")
    if isinstance(meta, dict):
        return meta.get("progressToken")
    return None
