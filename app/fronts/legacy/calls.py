"""A legacy client's calls on its session: one request sent upstream and what
comes back for it, relayed in the client's revision; the notifications and
responses it sends on; and what every stream of events ends with."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import structlog

from app.call import Message, Outgoing
from app.cluster.session import Lease, LegacySession, shares_integer_text
from app.fronts.legacy import checks as front
from app.fronts.legacy import messages
from app.fronts.legacy.reads import reads
from app.fronts.legacy.replies import (
    auth_refusal,
    internal_error,
    session_not_found,
    upstream_failure,
)
from app.fronts.legacy.sessions import LegacySessions
from app.fronts.legacy.turns import IdTurns
from app.fronts.shared.auth import AuthRelay
from app.metrics import Metrics
from app.rejections import INTERNAL_ERROR, Rejection, RequestId
from app.upstream.base import Exchange, read_stopper
from app.upstream.errors import (
    PoolExhausted,
    SessionExpired,
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamHttpError,
)
from translators import translate
from translators.registry import Version

log = structlog.get_logger("mcp_shim.legacy")


class LegacyCalls:
    """The calls of every legacy session: the ones in flight the client may cancel,
    and one request per id text upstream (`IdTurns`)."""

    def __init__(
        self,
        sessions: LegacySessions,
        *,
        auth_relay: AuthRelay | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._sessions = sessions
        self.auth_relay = auth_relay
        # Every legacy call is counted in `call`, the one place POST /mcp (one
        # request or a batch) and HTTP+SSE's POST /messages all go through.
        self._metrics = metrics
        # The calls in flight that the client may cancel, by (session id, request id).
        self._cancels: dict[tuple[str, Any], asyncio.Event] = {}
        self._turns = IdTurns()
        # A call served here on a guest copy, cancelled through its owner; and
        # the owner's hold on an id text, answered once no call of it is here.
        sessions.copies.on_cancel = self._cancel_here
        sessions.copies.on_hold = self._turns.free

    async def deliver(
        self, session: LegacySession, item: front.LegacyNotification | front.LegacyResponse
    ) -> Rejection | None:
        message = messages.upstream_message(session, item)
        if message is None:
            return None
        async with Lease(session):
            upstream = session.upstream.session
            try:
                if isinstance(item, front.LegacyResponse):
                    await upstream.respond(message)
                else:
                    await upstream.notify(message)
                    if item.method == "notifications/cancelled":
                        await self._cancelled(session, item.message)
            except UpstreamAuthChallenge:
                raise
            except SessionExpired:
                await expire(self._sessions, session)
                return session_not_found()
            except UpstreamError as exc:
                failure = upstream_failure(exc, None)
                if isinstance(exc, UpstreamHttpError) and 400 <= exc.http_status < 500:
                    # The upstream refused the message itself: the client's to know.
                    failure = Rejection(failure.code, failure.message, status=exc.http_status)
                return failure
        return None

    async def _cancelled(self, session: LegacySession, note: Message) -> None:
        """The client cancelled one of its calls (forwarded upstream already): its
        stream ends without an answer, here or on the worker serving it on a guest
        copy. An unknown id is ignored (2025-11-25 basic/utilities/cancellation
        "Error Handling")."""
        params = note.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if not self._cancel_here(session.id, request_id):
            await self._sessions.copies.spread_cancel(session, request_id)

    def _cancel_here(self, session_id: str, request_id: Any) -> bool:
        cancel = self._cancels.get((session_id, request_id))
        if cancel is None:
            return False
        log.info("legacy_call_cancelled")
        cancel.set()
        return True

    def call(
        self,
        session: LegacySession,
        request: front.LegacyRequest,
        *,
        resumable: bool,
        streamed: bool = True,
        gateway_url: str | None = None,
    ) -> AsyncGenerator[Outgoing, None]:
        """The upstream's answer to one request, as its client receives it
        (`_call`, through `_client_events`), counted in /metrics when it ends
        (`mcp_shim_calls_total`, era legacy)."""
        calls = self._call(session, request, resumable=resumable, streamed=streamed)
        metered = None if self._metrics is None else (request.method, session.client_version)
        return self._client_events(calls, request.id, gateway_url, metered)

    async def _call(
        self,
        session: LegacySession,
        request: front.LegacyRequest,
        *,
        resumable: bool,
        streamed: bool = True,
    ) -> AsyncGenerator[Outgoing, None]:
        """The upstream's answer to one request, as the client's messages. `streamed`:
        the client takes an event stream; without one, nothing the upstream asks on
        the way can reach the client, so the gateway answers it (never left waiting)."""
        cv, uv = session.client_version, session.upstream_version
        outbound = translate.request(request.message, cv, uv)
        async with Lease(session), self._turn(session, request.id):
            exchange = await self._open(session, request.id, outbound)
            if isinstance(exchange, Outgoing):
                yield exchange  # refused: never sent
                return
            session.remember_request(request.id, request.method)
            progress = _Progress()
            cancel = _Cancel()
            call_key = (session.id, request.id)
            self._cancels[call_key] = cancel
            relayed, raced = _reading(exchange, cancel)
            try:
                # What the upstream sends for the call, in the client's revision,
                # up to and with its answer; the loop ends without one when the
                # stream ends or the call is cancelled. Here, not in a generator
                # of its own: each layer is resumed at every suspension.
                async for message in relayed:
                    if message is None:
                        continue  # no quiet period was asked for: never yielded
                    if cancel.is_set() and "method" in message:
                        break  # what the exchange held when the call was cancelled
                    if "method" not in message:
                        # The session is this client's alone: its ids are the upstream's.
                        if message.get("id") != request.id:
                            continue
                        if cancel.is_set():
                            break  # an upstream's answer to the cancelled call: not relayed
                        progress.answered = True
                        session.open_requests.pop(request.id, None)
                        yield Outgoing(
                            messages.response(session, request.method, message),
                            final=True,
                            event_id=exchange.last_event_id,
                        )
                        break
                    out = await _from_server(session, message, exchange, progress, streamed)
                    if out is not None:
                        yield out
                ending = _unanswered(
                    session, request, exchange, cancel, progress, resumable, streamed
                )
                if session.owner is not None and request.id in session.open_requests:
                    # To be resumed on the GET stream, which is the owner's.
                    await session.tell_owner("open", request.id, request.method)
                if ending is not None:
                    yield ending
            except UpstreamError as exc:
                progress.answered = True
                session.open_requests.pop(request.id, None)
                failure = upstream_failure(exc, request.id)
                # A gateway's bound (the answers in flight, app/splice.py): when to retry.
                retry = (
                    (("retry-after", str(exc.retry_after_s)),)
                    if isinstance(exc, PoolExhausted)
                    else ()
                )
                yield Outgoing(failure.to_message(), True, failure.http_status, headers=retry)
            finally:
                if self._cancels.get(call_key) is cancel:
                    del self._cancels[call_key]
                # Closed here, not by the garbage collector, when the call ends early.
                if raced is not None:
                    await raced.aclose()
                # A legacy client's disconnect is not a cancellation (2025-11-25
                # streamable-http): it sends notifications/cancelled itself.
                await exchange.aclose(drain=progress.answered)

    async def _open(
        self, session: LegacySession, request_id: RequestId, outbound: Message
    ) -> Exchange | Outgoing:
        """The call's exchange with the upstream, or the client's answer when the
        request could not be sent."""
        try:
            return await session.upstream.session.request(outbound)
        except UpstreamAuthChallenge:
            raise
        except SessionExpired:
            await expire(self._sessions, session)
            refusal = session_not_found(request_id)
            return Outgoing(refusal.to_message(), True, refusal.http_status)
        except UpstreamError as exc:
            failure = upstream_failure(exc, request_id)
            return Outgoing(failure.to_message(), True, failure.http_status)

    def _turn(
        self, session: LegacySession, request_id: RequestId
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """The request's turn (`IdTurns`), and across workers (`_turn_everywhere`)
        only where another worker serves the session too."""
        if session.owner is None and not (session.guests and shares_integer_text(request_id)):
            return self._turns.of(session.id, request_id)
        return self._turn_everywhere(session, request_id)

    @contextlib.asynccontextmanager
    async def _turn_everywhere(
        self, session: LegacySession, request_id: RequestId
    ) -> AsyncIterator[None]:
        """On a guest copy, the turn after the owner's request of the same id text,
        when it holds one; at the owner, that text held at the guests meanwhile
        (`GuestCopies.held_elsewhere`)."""
        while True:
            turn = self._turns.of(session.id, request_id)
            await turn.__aenter__()
            held = session.held.get(str(request_id)) if session.owner is not None else None
            if held is None:
                break
            await turn.__aexit__()
            await held.wait()
        try:
            async with self._sessions.copies.held_elsewhere(session, request_id):
                yield
        finally:
            await turn.__aexit__()

    def for_client(
        self,
        events: AsyncGenerator[Outgoing, None],
        request_id: RequestId | None,
        gateway_url: str | None = None,
    ) -> AsyncGenerator[Outgoing, None]:
        """`events` as a legacy client may receive them (`_client_events`); a
        call's come so from `call` already."""
        return self._client_events(events, request_id, gateway_url, None)

    async def _client_events(
        self,
        events: AsyncGenerator[Outgoing, None],
        request_id: RequestId | None,
        gateway_url: str | None,
        metered: tuple[str, Version] | None,
    ) -> AsyncGenerator[Outgoing, None]:
        """`events` as a legacy client may receive them: an error always with an id
        (`front.error_message`), and a failure that escapes them as a last message
        (an upstream 401/403 relayed; a defect of ours -32603 with 500 and one
        `call_failed` line with its stack), never a plain-text 500 or a stream
        cut short. `events` is closed here, releasing what it took. `metered`: the
        call's method and client version, counted in /metrics when it ends, by
        how it ended (one generator for both: each layer of them costs a call)."""
        started = time.perf_counter()
        # Until the answer (or a stream ended without one: cancelled, or resumed
        # on the GET stream) says otherwise, the client went away first.
        outcome, status = "client_disconnected", 200
        try:
            async with contextlib.aclosing(events) as steps:
                try:
                    async for out in steps:
                        if "error" in out.message and "id" not in out.message:
                            out = dataclasses.replace(
                                out, message={**out.message, "id": front.UNREAD_ID}
                            )
                        if metered is not None and (out.final or out.keepalive):
                            outcome, status = _ending(out)
                        yield out
                    return
                except UpstreamAuthChallenge as exc:
                    refusal, headers = auth_refusal(exc, request_id, gateway_url, self.auth_relay)
                    failure = Outgoing(
                        front.error_message(refusal), True, refusal.http_status, headers=headers
                    )
                except Exception:
                    log.exception("call_failed", era="legacy")
                    internal = internal_error(request_id)
                    failure = Outgoing(front.error_message(internal), True, internal.http_status)
            outcome, status = _ending(failure)
            yield failure
        finally:
            if metered is not None and self._metrics is not None:
                method, version = metered
                duration_s = time.perf_counter() - started
                self._metrics.call_done(method, version, outcome, status, duration_s, None)


def _ending(out: Outgoing) -> tuple[str, int]:
    """How a call's last event ends it, as /metrics counts it: "ok", or "error
    <code>", and its HTTP status."""
    error = out.message.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return (f"error {code}" if code is not None else "ok"), out.status


async def expire(sessions: LegacySessions, session: LegacySession) -> None:
    """The upstream answered 404 for the session: the client's ends too (it gets 404)."""
    await sessions.end(session, "upstream_session_expired")


class _Cancel(asyncio.Event):
    """A call's cancellation by its client; `on_set` also ends the exchange's read."""

    def __init__(self) -> None:
        super().__init__()
        self.on_set: Callable[[], None] | None = None

    def set(self) -> None:
        if self.is_set():
            return
        super().set()
        if self.on_set is not None:
            self.on_set()


@dataclasses.dataclass(slots=True)
class _Progress:
    """How far one call got: `answered` lets its exchange be drained for reuse."""

    answered: bool = False
    sent_event_id: str | None = None


def _reading(
    exchange: Exchange, cancel: _Cancel
) -> tuple[AsyncIterator[Message | None], AsyncGenerator[Message | None, None] | None]:
    """The exchange's messages, their read ended by the call's cancellation; and
    the generator racing the two, to be closed, when one was needed."""
    stopper = read_stopper(exchange)
    if stopper is not None:
        # Its queue takes a stop, which ends the read in this task: no task per
        # call racing the read against the cancellation.
        cancel.on_set = stopper
        return aiter(exchange), None
    raced = reads(aiter(exchange), stop=cancel)
    return raced, raced


async def _from_server(
    session: LegacySession,
    message: Message,
    exchange: Exchange,
    progress: _Progress,
    streamed: bool,
) -> Outgoing | None:
    """A server's request or notification during a call, for the client (None:
    nothing for it). Without an event stream nothing can reach the client, so the
    gateway answers a request itself (never left waiting)."""
    if "id" in message and not streamed:
        await messages.refuse_server_request(
            session, message, "the client takes no text/event-stream answer"
        )
        return None
    out = await messages.to_client(session, message)
    if out is None:
        return None
    progress.sent_event_id = exchange.last_event_id
    return Outgoing(out, event_id=progress.sent_event_id)


def _unanswered(
    session: LegacySession,
    request: front.LegacyRequest,
    exchange: Exchange,
    cancel: asyncio.Event,
    progress: _Progress,
    resumable: bool,
    streamed: bool,
) -> Outgoing | None:
    """How a call's stream ends when the upstream's ended without the answer (or
    the answer was cancelled); None: it has ended already."""
    if progress.answered:
        return None
    if cancel.is_set():
        # 2025-11-25 basic/utilities/cancellation: the receiver SHOULD
        # "Not send a response for the cancelled request". The stream
        # ends empty; a client that takes only JSON needs a body.
        session.open_requests.pop(request.id, None)
        if streamed:
            return Outgoing({}, keepalive=True)
        cancelled = Rejection(INTERNAL_ERROR, "Request cancelled by the client", request.id)
        return Outgoing(cancelled.to_message(), True, 200)
    if resumable and exchange.last_event_id is not None:
        # The upstream closed the stream before answering and gave event
        # ids (2025-11-25 SSE polling): so does the client's, with the
        # id to resume from; the answer comes on its GET stream.
        progress.answered = True
        if exchange.last_event_id != progress.sent_event_id:
            return Outgoing({}, keepalive=True, event_id=exchange.last_event_id)
        return None
    session.open_requests.pop(request.id, None)
    progress.answered = True
    failure = Rejection(
        INTERNAL_ERROR,
        "Internal error: the upstream MCP server closed the stream without answering",
        request.id,
        status=502,
    )
    return Outgoing(failure.to_message(), True, failure.http_status)
