"""Routing the messages of one shared server stream (stdio, HTTP+SSE).

On a stdio server's stdout and on a 2024-11-05 HTTP+SSE stream, every message
of the server comes on one stream and nothing but the message says where it
belongs. `Router` is what both sessions own to decide:

- a response goes to the exchange of its request id;
- `notifications/progress` to the exchange whose request carried its token;
- a server request, and `notifications/message`, to the one call (`tools/call`,
  `prompts/get`, `resources/read`) in flight when there is exactly one: only
  that call can have caused it;
- otherwise, and for other notifications, to the session's `listen()` stream
  when one is open; with none, a notification is dropped and a request gets
  the listener's `default_answer`, so the server never waits for an answer
  that cannot come.

How bytes are written and read, and when the session ends, stay with each
transport.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app.call import Message
from app.quoting import quoted
from app.upstream.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.sessions.listener import default_answer
from translators.registry import get_version

# Notifications an exchange or a listen stream may hold unread; beyond, dropped
# (responses and server requests never are).
QUEUE_SOFT_BOUND = 1000
# The requests during which a server asks its client for input.
CALL_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})


def id_key(value: Any) -> tuple[str, Any]:
    # JSON ids 1 and "1" are different requests.
    return (type(value).__name__, value)


def progress_token(message: Message) -> Any:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


def initialize_result(answer: Message | None, source: str) -> Message:
    """The result of `initialize` as read off the stream, or why it is unusable: the
    gateway speaks only legacy revisions to these transports."""
    if answer is None:
        raise UpstreamProtocolError(f"{source} ended the initialize exchange")
    error = answer.get("error")
    if isinstance(error, dict):
        raise UpstreamProtocolError(
            f"upstream refused initialize: {error.get('code')} {error.get('message')}"
        )
    result = answer.get("result")
    if not isinstance(result, dict):
        raise UpstreamProtocolError(f"{source} answered initialize without a result")
    negotiated = get_version(result.get("protocolVersion"))
    if negotiated is None or negotiated.features.per_request_meta:
        raise UpstreamProtocolError(
            f"upstream negotiated protocol version {quoted(result.get('protocolVersion'))}, "
            "which is not a legacy version this gateway knows"
        )
    return result


@dataclass(frozen=True, slots=True)
class _End:
    error: UpstreamError


@dataclass(frozen=True, slots=True)
class _Stop:
    """The request was cancelled: its messages end with no response."""


class _Silent:
    """The server sent nothing for the exchange within its timeout."""


_SILENT = _Silent()


class _Mailbox:
    """An exchange's unread messages, for its one reader. What an
    `asyncio.Queue` per call cost beyond this (its getter and putter deques,
    its `join` event, a wake-up per put) was for several readers and a bound,
    which an exchange has neither of (bench/instructions.py)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: collections.deque[Message | _End | _Stop | _Silent] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def put_nowait(self, item: Message | _End | _Stop | _Silent) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def get_nowait(self) -> Message | _End | _Stop | _Silent:
        """The oldest item; IndexError when there is none (ask `empty()` first)."""
        return self._items.popleft()

    async def get(self) -> Message | _End | _Stop | _Silent:
        while not self._items:
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter
            try:
                await waiter
            finally:
                self._waiter = None
        return self._items.popleft()


class Exchange:
    """Messages for one request (ending with its response), or the listen stream.

    Its own async iterator (not an async generator, which costs the loop's
    first-iteration hook and a weak reference per call), read by one task.

    `timeout_s` bounds each wait of the reader for the next message, as an
    `asyncio.timeout` around each read did, for less: one timer per exchange,
    armed when the read begins and moved on only when it fires
    (`_check_silence`): 2-3 us less per exchange than a timeout around every
    read (`bench/exchange_read.py`)."""

    def __init__(
        self, router: Router, what: str, timeout_s: float | None, request_id: Any = None
    ) -> None:
        self._router = router
        self.what = what
        self._timeout_s = timeout_s
        self.request_id = request_id
        self.progress_token: Any = None
        self.queue = _Mailbox()
        self.last_event_id: str | None = None
        # time.monotonic() when the reader began to wait for a message; None:
        # it is not waiting (busy with the last one, or not reading yet).
        self._waiting_since: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._started = False
        self._over = False  # the response was read, or the read ended otherwise

    def __aiter__(self) -> Exchange:
        return self

    def put(self, message: Message) -> None:
        if "method" in message and "id" not in message and self.queue.qsize() > QUEUE_SOFT_BOUND:
            return
        self.queue.put_nowait(message)

    def end(self, error: UpstreamError) -> None:
        self.queue.put_nowait(_End(error))

    def stop(self) -> None:
        self.queue.put_nowait(_Stop())

    def _check_silence(self) -> None:
        timeout_s = self._timeout_s
        assert timeout_s is not None  # armed only with one
        loop = asyncio.get_running_loop()
        since = self._waiting_since
        if since is None or not self.queue.empty():
            # The reader is busy, or has a message to take: not the server's silence.
            self._timer = loop.call_later(timeout_s, self._check_silence)
            return
        waited_s = time.monotonic() - since
        if waited_s < timeout_s:
            self._timer = loop.call_later(timeout_s - waited_s, self._check_silence)
            return
        self._timer = None
        self.queue.put_nowait(_SILENT)

    def _finish(self) -> None:
        self._over = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def __anext__(self) -> Message:
        if self._over:
            raise StopAsyncIteration
        queue = self.queue
        timeout_s = self._timeout_s
        if not self._started:
            self._started = True
            if timeout_s is not None:
                self._timer = asyncio.get_running_loop().call_later(timeout_s, self._check_silence)
        try:
            if not queue.empty():
                item = queue.get_nowait()
            elif timeout_s is not None:
                self._waiting_since = time.monotonic()
                try:
                    item = await queue.get()
                finally:
                    self._waiting_since = None
            else:
                item = await queue.get()
        except BaseException:
            self._finish()  # the reader was cancelled: it reads no more
            raise
        if isinstance(item, dict):
            if self.request_id is not None and "method" not in item:
                self._finish()  # the response: nothing else belongs to this request
            return item
        self._finish()
        if isinstance(item, _Silent):
            raise UpstreamTimeout(
                f"{self._router.source} sent nothing for {quoted(self.what)} within {timeout_s:g}s"
            )
        if isinstance(item, _End):
            raise item.error
        raise StopAsyncIteration  # _Stop

    async def aclose(self, drain: bool = False) -> None:
        self._router.forget(self)
        self._finish()


class Router:
    """The exchanges of one session's stream and where each message goes."""

    def __init__(
        self,
        source: str,
        *,
        initialized: Callable[[], bool],
        respond: Callable[[Message], Awaitable[None]],
    ) -> None:
        self.source = source  # how timeouts name the upstream
        self._initialized = initialized
        self._respond = respond
        self.pending: dict[tuple[str, Any], Exchange] = {}
        self._progress: dict[tuple[str, Any], Exchange] = {}
        self.listening: Exchange | None = None
        self._answers: set[asyncio.Task[None]] = set()

    def open(self, message: Message, timeout_s: float) -> Exchange:
        """The exchange for a request about to be sent; `forget` it if sending fails."""
        key = id_key(message.get("id"))
        if key in self.pending:
            raise UpstreamProtocolError(
                f"request id {quoted(message.get('id'))} is already in flight"
            )
        exchange = Exchange(self, str(message.get("method")), timeout_s, message.get("id"))
        self.pending[key] = exchange
        token = progress_token(message)
        if isinstance(token, str | int):
            exchange.progress_token = id_key(token)
            self._progress[exchange.progress_token] = exchange
        return exchange

    def listen(self) -> Exchange:
        previous, self.listening = self.listening, Exchange(self, "listen stream", None)
        if previous is not None:
            previous.end(UpstreamUnavailable("replaced by a newer listen stream"))
        return self.listening

    def forget(self, exchange: Exchange) -> None:
        if exchange.request_id is not None:
            key = id_key(exchange.request_id)
            if self.pending.get(key) is exchange:
                del self.pending[key]
        if exchange.progress_token is not None:
            if self._progress.get(exchange.progress_token) is exchange:
                del self._progress[exchange.progress_token]
        if self.listening is exchange:
            self.listening = None

    def cancelled(self, notification: Message) -> None:
        """`notifications/cancelled` was sent for a request in flight. The server will
        not answer it (2025-11-25 basic/utilities/cancellation: the receiver "SHOULD
        NOT send a response for the cancelled request"), and nothing else on a shared
        stream would ever end its exchange, which would wait out its timeout and,
        meanwhile, keep the next call from being the one in flight. So it ends here
        without a response, as a Streamable HTTP call's stream the server closes."""
        if notification.get("method") != "notifications/cancelled":
            return
        params = notification.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if not isinstance(request_id, str | int):
            return
        exchange = self.pending.get(id_key(request_id))
        if exchange is not None:
            self.forget(exchange)
            exchange.stop()

    def fail_all(self, error: UpstreamError) -> None:
        """Every exchange waiting on the stream ends with `error`."""
        for exchange in list(self.pending.values()):
            exchange.end(error)
        self.pending.clear()
        self._progress.clear()
        if self.listening is not None:
            self.listening.end(error)

    def dispatch(self, message: Message) -> bool:
        """Route one message; True when it was the response to a request in flight."""
        method = message.get("method")
        if method is None:
            exchange = self.pending.pop(id_key(message.get("id")), None)
            if exchange is not None:
                exchange.put(message)
            return exchange is not None
        if "id" in message:
            sole = self._sole_call()
            if sole is not None:
                # Only one call can have caused it: the call's own question, handled
                # as on its HTTP stream (the MRTR bridge asks the client; a caller
                # without the capability gets -32021).
                sole.put(message)
            elif self.listening is not None:
                self.listening.put(message)
            else:
                self._answer_alone(message)
            return False
        if method == "notifications/progress":
            params = message.get("params")
            token = params.get("progressToken") if isinstance(params, dict) else None
            exchange = self._progress.get(id_key(token)) if isinstance(token, str | int) else None
            if exchange is not None:
                exchange.put(message)
                return False
        elif method == "notifications/message":
            sole = self._sole_call()
            if sole is not None:
                sole.put(message)  # one call in flight: its log lines
                return False
        if self.listening is not None:
            self.listening.put(message)
        return False

    def _sole_call(self) -> Exchange | None:
        """The one call in flight after initialize, if there is exactly one (always so
        on an MRTR lane). With several, nothing on the stream says which one a server
        request or a log line belongs to. Only the methods whose handlers ask the
        client count: the gateway's own list and subscribe requests read nothing but
        their answer, so a request handed to them would never be answered."""
        if not self._initialized():
            return None  # initialize itself: what comes now is unprompted
        calls = [e for e in self.pending.values() if e.what in CALL_METHODS]
        return calls[0] if len(calls) == 1 else None

    def _answer_alone(self, request: Message) -> None:
        """A server request with no listen stream open (e.g. `roots/list` right after
        `initialized`): what the listener answers when nobody claims one."""

        async def answer() -> None:
            with contextlib.suppress(UpstreamError):
                await self._respond(default_answer(request))

        task = asyncio.get_running_loop().create_task(answer())
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)
