"""One live upstream call that may be parked, and the events it produces.

The call's answer stream (the POST's SSE stream) is read by a *pump* task
into a queue, so the stream outlives the HTTP request that started it: the
first call reads from the queue until the upstream asks something, the
gateway answers `input_required`, the queue keeps filling while the exchange
is parked, and the retry reads on from where the first call stopped. A
request the upstream sends on the lane's GET stream lands in the same queue.

Every request the upstream sends becomes a :class:`ServerRequest` with its
own way back (`reply`): a POST of the JSON-RPC response for one read from the
call's stream, or the answer the lane's listener posts for one read from the
GET stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from app.call import Message
from app.mrtr import results
from app.mrtr.keys import KeyAssigner
from app.mrtr.lanes import Lane
from app.upstream.base import Exchange
from app.upstream.errors import UpstreamError
from app.upstream.sessions.pool import PooledSession

log = structlog.get_logger("mcp_shim.mrtr")

Reply = Callable[[Message], Awaitable[None]]

# While parked nobody reads the queue: a chatty upstream's notifications are
# dropped beyond this many queued events (requests and the response never are).
_QUEUE_SOFT_BOUND = 1000


@dataclass(frozen=True, slots=True)
class ServerRequest:
    """A request the upstream sent us, and how to answer it."""

    message: Message
    reply: Reply


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The call's stream ended (or broke) without the call's response."""

    error: str | None


Event = Message | ServerRequest | StreamEnded


@dataclass(slots=True)
class Question:
    """A request of the upstream put to the client, under `key`."""

    key: str
    request: Message  # as the upstream sent it (JSON-RPC, with its id)
    input_request: Message  # {method, params} as the client sees it
    reply: Reply | None  # None: nothing waits upstream (a -32042 elicitation)


@dataclass(frozen=True, slots=True)
class UrlRequired:
    """The upstream ended the call with -32042: it must be sent again once the
    user has been through the URLs (2025-11-25 client/elicitation)."""

    error: Message  # the upstream's JSON-RPC error object


@dataclass(eq=False)
class LiveExchange:
    """A call on its way through the bridge; parked between rounds."""

    pooled: PooledSession
    lane: Lane | None
    method: str
    caller: str  # claims form of the caller's credential hash
    digest: str  # params digest of the original request
    id: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    pending: dict[str, Question] = field(default_factory=dict)
    keys: KeyAssigner = field(default_factory=KeyAssigner)
    round: int = 0  # input_required answers issued so far
    upstream_id: int | None = None
    url_required: UrlRequired | None = None
    _exchange: Exchange | None = None
    _pump: asyncio.Task[None] | None = None
    # GET-stream requests waiting for their answer: answered on the exchange's end.
    _open_futures: dict[asyncio.Future[Message], Message] = field(default_factory=dict)
    ended: bool = False

    @property
    def fingerprint(self) -> str:
        """What logs show of the id (the id itself only travels sealed)."""
        return self.id[:8]

    @property
    def live(self) -> bool:
        """Whether an upstream call is in progress (not ended, not answered -32042)."""
        return self._exchange is not None and not self.ended

    # -- the upstream call ------------------------------------------------------

    def attach(self, upstream_id: int, exchange: Exchange) -> None:
        """Start pumping the answer stream of the call just sent."""
        self.upstream_id = upstream_id
        self._exchange = exchange
        self.url_required = None
        if self.lane is not None:
            self.lane.handler = self._on_get_request
        self._pump = asyncio.get_running_loop().create_task(self._read(exchange))

    async def _read(self, exchange: Exchange) -> None:
        error: str | None = None
        try:
            async for message in exchange:
                if "method" in message and "id" in message:
                    self.events.put_nowait(ServerRequest(message, self._respond))
                    continue
                if "method" in message and self.events.qsize() > _QUEUE_SOFT_BOUND:
                    continue
                self.events.put_nowait(message)
                if "method" not in message and message.get("id") == self.upstream_id:
                    return
        except UpstreamError as exc:
            error = exc.message
        self.events.put_nowait(StreamEnded(error))

    async def _respond(self, message: Message) -> None:
        await self.pooled.session.respond(message)

    async def _on_get_request(self, request: Message) -> Message | None:
        if self.ended:
            return None
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._open_futures[future] = request

        async def reply(message: Message) -> None:
            if not future.done():
                future.set_result(message)

        self.events.put_nowait(ServerRequest(request, reply))
        try:
            return await future
        finally:
            self._open_futures.pop(future, None)

    def upstream_finished(self) -> None:
        """The call's response arrived: the stream is done, nothing is left to cancel."""
        self.ended = True

    def ended_with_url_required(self, error: Message) -> None:
        """The call answered -32042: no call is live until it is sent again."""
        self.url_required = UrlRequired(error)
        self._exchange = None
        self._pump = None
        if self.lane is not None:
            self.lane.handler = None

    # -- ending -------------------------------------------------------------------

    async def close_stream(self, *, answered: bool) -> None:
        pump, self._pump = self._pump, None
        if pump is not None and not pump.done():
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        exchange, self._exchange = self._exchange, None
        if exchange is not None:
            await exchange.aclose(drain=answered)

    async def abandon(
        self,
        reason: str,
        *,
        timed_out: bool = False,
        cancel_first: bool = False,
        extra: tuple[Reply, Message] | None = None,
    ) -> None:
        """End a call nobody will finish: answer what the upstream still waits for
        (elicitation: cancel; sampling and roots: an error), cancel the call, close
        its stream. `cancel_first` sends the cancellation before those answers (so
        the call cannot complete on them); `extra` is one more answer to send. The
        caller releases the lane, not reusable."""
        if self.ended:
            return
        self.ended = True
        if cancel_first:
            await self._cancel(reason)
        replies: list[tuple[Reply, Message]] = [] if extra is None else [extra]
        for question in self.pending.values():
            if question.reply is not None:
                replies.append(
                    (question.reply, results.abandon_reply(question.request, timed_out=timed_out))
                )
        self.pending.clear()
        # Requests queued and never put to the client are answered the same way.
        while not self.events.empty():
            event = self.events.get_nowait()
            if isinstance(event, ServerRequest):
                replies.append(
                    (event.reply, results.abandon_reply(event.message, timed_out=timed_out))
                )
        for reply, message in replies:
            try:
                await reply(message)
            except UpstreamError as exc:
                log.info("mrtr_reply_failed", exchange=self.fingerprint, error=exc.message)
        for future, request in list(self._open_futures.items()):
            if not future.done():
                future.set_result(results.abandon_reply(request, timed_out=timed_out))
        if not cancel_first:
            await self._cancel(reason)
        await self.close_stream(answered=False)

    async def _cancel(self, reason: str) -> None:
        if self._exchange is None or self.upstream_id is None:
            return
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": self.upstream_id, "reason": reason},
        }
        try:
            await self.pooled.session.notify(note)
        except UpstreamError as exc:
            log.info("mrtr_cancel_failed", exchange=self.fingerprint, error=exc.message)
