"""`subscriptions/listen`: the stream of one listen request, as frames the gateway yields.

Order on the stream (2026-07-28 basic/patterns/subscriptions):

1. `notifications/subscriptions/acknowledged` with the honoured filter: the
   requested one cut to what the upstream declared it can produce, and to the
   URIs whose upstream `resources/subscribe` succeeded;
2. the opted-in notifications, each tagged with the subscription id, and an
   SSE comment every `keepalive_s` of quiet (streamable-http, keep-alive note);
3. the end: the client closing the stream (nothing more is sent), the
   gateway shutting down (graceful closing result), the client falling
   behind (an error response), or the upstream lost for good.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import structlog

from app.call import CallState, ModernCall
from app.rejections import INVALID_REQUEST, Rejection
from app.subscriptions import filters, frames
from app.subscriptions.hub import SubscriptionHub
from app.subscriptions.mailbox import End, Mailbox
from app.upstream.sessions.pool import PooledSession

log = structlog.get_logger("mcp_shim.subscriptions")

METHOD = "subscriptions/listen"


@dataclass(slots=True)
class Frame:
    """One thing to write on the listen stream (the gateway wraps it as `Outgoing`)."""

    message: dict[str, Any]
    final: bool = False
    status: int = 200
    keepalive: bool = False


def needs_event_stream(request_id: Any) -> Rejection:
    """A listen request from a client that does not accept `text/event-stream`."""
    return Rejection(
        INVALID_REQUEST,
        "Invalid request: subscriptions/listen answers with a long-lived SSE stream; "
        "send Accept: text/event-stream",
        request_id,
        status=406,
    )


def _end_frame(end: End, listen_id: Any, bound: int) -> Frame:
    if end is End.SHUTDOWN:
        return Frame(frames.closing_result(listen_id), final=True)
    if end is End.OVERFLOW:
        return Frame(frames.overflow_error(listen_id, bound), final=True)
    return Frame(frames.upstream_lost_error(listen_id, "session lost"), final=True)


class TaskWatch(Protocol):
    """Status notifications of tasks (the tasks extension's `Watchers`, app/tasks/watch.py)."""

    def task_watch_refusal(self, call: ModernCall, task_ids: tuple[str, ...]) -> Rejection | None:
        """Why this caller may not watch tasks (it did not declare the extension)."""
        ...

    async def watch(
        self, authorization: str | None, task_ids: tuple[str, ...], mailbox: Mailbox
    ) -> tuple[str, ...]:
        """Start offering `notifications/tasks` of these tasks to `mailbox`; the
        ones this caller owns and the gateway knows (the rest are not honoured)."""
        ...

    def unwatch(self, mailbox: Mailbox) -> None: ...


async def listen(
    hub: SubscriptionHub,
    call: ModernCall,
    pooled: PooledSession,
    capabilities: Mapping[str, Any],
    authorization: str | None,
    state: CallState,
    *,
    keepalive_s: float,
    tasks: TaskWatch | None = None,
) -> AsyncGenerator[Frame, None]:
    requested = filters.parse(call.params)
    if not isinstance(requested, Rejection) and requested.task_ids:
        refusal = tasks.task_watch_refusal(call, requested.task_ids) if tasks else None
        if refusal is not None:
            requested = refusal
    if isinstance(requested, Rejection):
        state.outcome = "rejected"
        rejection = requested.with_id(call.id)
        yield Frame(rejection.to_message(), final=True, status=rejection.http_status)
        return
    if hub.closing:
        state.outcome = "shutdown"
        yield Frame(frames.closing_result(call.id), final=True)
        return
    honoured = filters.honourable(requested, pooled.server_capabilities)
    started = time.perf_counter()
    listener = await hub.join(
        pooled, capabilities, authorization, call.id, call.version, honoured, state.request_id
    )
    if requested.task_ids and tasks is not None:
        watched = await tasks.watch(authorization, requested.task_ids, listener.mailbox)
        listener.filter = replace(listener.filter, task_ids=watched)
    bound = log.bind(
        request_id=state.request_id,
        method=METHOD,
        client_version=call.version.name,
        upstream_version=listener.upstream_version,
    )
    state.outcome = "listening"
    sent = 0
    try:
        bound.info(
            "listen_acknowledged",
            honoured=sorted(listener.filter.to_wire()),
            uris=len(listener.filter.uris),
            refused=sorted(set(requested.to_wire()) - set(listener.filter.to_wire())),
            ack_ms=round((time.perf_counter() - started) * 1000, 2),
        )
        yield Frame(frames.ack(call.id, listener.filter))
        while True:
            item = await listener.mailbox.get(keepalive_s)
            if item is None:
                yield Frame({}, keepalive=True)
                continue
            if isinstance(item, End):
                state.outcome = f"closed_{item.value}"
                bound.info("listen_ended", reason=item.value, notifications=sent)
                yield _end_frame(item, call.id, listener.mailbox.bound)
                return
            sent += 1
            yield Frame(frames.tag(item, call.id))
    finally:
        if tasks is not None:
            tasks.unwatch(listener.mailbox)
        hub.leave(listener)
        if state.outcome == "listening":
            state.outcome = "closed_by_client"
            bound.info("listen_ended", reason="client", notifications=sent)
