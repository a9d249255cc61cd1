"""One modern call's upstream part: the request translated to the upstream
session's version, sent, what arrives for it relayed, the answer translated
back.

`Forwarder` is the one place a 2026-07-28 call meets a legacy upstream
session. The modern front's gateway (app/fronts/modern/gateway.py) forwards
a plain call with `forward`; the MRTR bridge (app/mrtr/driving.py) sends,
relays and answers through the same methods for a call it carries; the tasks
bridge (app/tasks/create.py) translates the call it turns into the upstream's
task with `outbound`. Each is handed the forwarder when it is built
(app/wiring.py): nothing calls back into the layer above.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Protocol

import structlog

from app.call import (
    LOG_LEVELS,
    CallState,
    Message,
    ModernCall,
    Outgoing,
    upstream_answered,
    upstream_sent,
)
from app.mrtr import capabilities as mrtr_capabilities
from app.mrtr import results as mrtr_results
from app.rejections import INTERNAL_ERROR, Rejection, http_status_for
from app.upstream.base import Exchange
from app.upstream.errors import SessionExpired, UpstreamError
from app.upstream.sessions.listener import default_answer
from app.upstream.sessions.pool import PooledSession, SessionPool
from translators import translate

log = structlog.get_logger("mcp_shim.gateway")


class Observer(Protocol):
    """Where change notifications go (app/subscriptions/hub.py): they belong to
    subscriptions/listen streams, not to the call they arrived with."""

    def observe(self, pooled: PooledSession, message: Message) -> None: ...


class ToolNotes(Protocol):
    """What a tools/list answer gains beyond its translation (app/tasks: each
    tool's taskSupport)."""

    def annotate_tools(
        self, pooled: PooledSession, upstream: Message, result: Message
    ) -> Message: ...


def _level_rank(level: Any) -> int:
    try:
        return LOG_LEVELS.index(level)
    except ValueError:
        return len(LOG_LEVELS)  # unknown levels from the server are relayed if any logging is on


def progress_token(params: Mapping[str, Any]) -> Any:
    meta = params.get("_meta")
    if isinstance(meta, dict):
        return meta.get("progressToken")
    return None


class Forwarder:
    def __init__(
        self,
        pool: SessionPool,
        *,
        ttl_ms: int,
        cache_scope: str,
        observer: Observer | None = None,
    ) -> None:
        self._pool = pool
        self._ttl_ms = ttl_ms
        self._cache_scope = cache_scope
        # None: change notifications arriving with a call are dropped.
        self._observer = observer
        self._background: set[asyncio.Task[None]] = set()
        self._last_context: tuple[Any, translate.Context] | None = None

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

    def outbound(self, call: ModernCall, pooled: PooledSession) -> Message:
        """The call in the upstream session's version (no id yet: `send` gives it one)."""
        return translate.request(call.message, call.version, pooled.version, self._context(pooled))

    async def send(self, pooled: PooledSession, outbound: Message) -> tuple[int, Exchange]:
        """Send `outbound` under a fresh upstream id; the id and the answer stream."""
        upstream_id = pooled.next_id()
        message = dict(outbound)
        message["id"] = upstream_id
        token = progress_token(message.get("params") or {})
        if token is not None:
            # Progress tokens must be unique per session; callers sharing one
            # session may all use token 1, so the upstream sees our request id.
            params = dict(message["params"])
            params["_meta"] = {**params["_meta"], "progressToken": upstream_id}
            message["params"] = params
        upstream_sent()
        exchange = await pooled.session.request(message)
        return upstream_id, exchange

    def answer(
        self,
        call: ModernCall,
        pooled: PooledSession,
        message: Message,
        state: CallState,
        tools: ToolNotes | None = None,
    ) -> Outgoing:
        """The upstream's response in the client's version; `tools` annotates a tools/list."""
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
        if call.method == "tools/list" and tools is not None:
            translated = tools.annotate_tools(pooled, result, translated)
        return Outgoing({"jsonrpc": "2.0", "id": call.id, "result": translated}, True)

    def relay(
        self,
        call: ModernCall,
        pooled: PooledSession,
        message: Message,
        client_token: Any,
        upstream_id: int,
    ) -> Message | None:
        """A notification of the upstream for the client, or None when it is not the call's."""
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
            if self._observer is not None:
                self._observer.observe(pooled, message)
            return None
        return translate.notification(message, pooled.version, call.version)

    async def forward(
        self,
        call: ModernCall,
        pooled: PooledSession,
        upstream_caps: Mapping[str, Any],
        authorization: str | None,
        state: CallState,
        tools: ToolNotes | None = None,
    ) -> AsyncGenerator[Outgoing, None]:
        """A call the MRTR bridge does not carry: sent on `pooled` (once more on a
        fresh session if the upstream forgot it), its notifications relayed, its
        answer last. Closed by its caller before `pooled` goes back to the pool."""
        outbound = self.outbound(call, pooled)
        client_token = progress_token(call.params)
        fresh: PooledSession | None = None
        try:
            upstream_id, exchange = await self.send(pooled, outbound)
        except SessionExpired:
            # The upstream forgot the session: its handler never ran, so one
            # resend on a fresh session cannot run the call twice.
            fresh = pooled = await self._pool.renew(pooled, upstream_caps, authorization)
            try:
                upstream_id, exchange = await self.send(pooled, outbound)
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
                    yield self.answer(call, pooled, message, state, tools)
                    return
                if "id" in message:
                    refusal = await self._answer_server_request(call, pooled, message, upstream_id)
                    if refusal is not None:
                        answered = True
                        state.outcome = "missing_capability"
                        yield refusal
                        return
                    continue
                relayed = self.relay(call, pooled, message, client_token, upstream_id)
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
