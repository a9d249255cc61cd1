"""A legacy session's standalone GET stream, kept open while anyone needs it.

Legacy servers push what is not tied to one request on that stream: change
notifications (`notifications/*/list_changed`, `notifications/resources/updated`)
and requests such as `roots/list` or `ping` (the Python SDK sends `roots/list`
there even during a tool call). The listener reads it, reconnects with backoff
when it drops (with `Last-Event-ID` when the upstream gave event ids), and
hands each message to whoever registered for it:

- notifications go to every notification sink (subscriptions fan-out);
- a request goes to the first request handler that claims it (the MRTR
  bridge claims the ones that belong to a parked call); unclaimed ones get a
  default answer here, so the upstream is never left waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from app.call import Message
from app.upstream.base import Session
from app.upstream.errors import SessionExpired, UpstreamError

log = structlog.get_logger("mcp_shim.listener")

NotificationSink = Callable[[Message], None]
# Returns the JSON-RPC response to send, or None when the request is not its own.
RequestHandler = Callable[[Message], Awaitable[Message | None]]

_BACKOFF_START_S = 0.1
_BACKOFF_MAX_S = 5.0


def default_answer(request: Message) -> Message:
    """What the gateway answers on its own to a server request nobody claimed."""
    method = request.get("method")
    if method == "ping":
        return {"jsonrpc": "2.0", "id": request["id"], "result": {}}
    return {
        "jsonrpc": "2.0",
        "id": request["id"],
        "error": {
            "code": -32601,
            "message": f"{method} cannot be answered: no client call is waiting for it",
        },
    }


class SessionListener:
    def __init__(self, session: Session, on_expired: Callable[[], None] | None = None) -> None:
        self._session = session
        self._on_expired = on_expired
        self._sinks: list[NotificationSink] = []
        self._handlers: list[RequestHandler] = []
        self._expiry_callbacks: list[Callable[[], None]] = []
        self._users = 0
        self._task: asyncio.Task[None] | None = None
        self._answers: set[asyncio.Task[None]] = set()
        self.connected = asyncio.Event()
        self.reconnects = 0

    # -- registration ----------------------------------------------------

    def add_sink(self, sink: NotificationSink) -> Callable[[], None]:
        self._sinks.append(sink)
        return lambda: self._sinks.remove(sink) if sink in self._sinks else None

    def add_handler(self, handler: RequestHandler) -> Callable[[], None]:
        self._handlers.append(handler)
        return lambda: self._handlers.remove(handler) if handler in self._handlers else None

    def add_expiry_callback(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Called when the upstream answers the GET stream with 404 (session forgotten);
        the stream then stops. Subscriptions re-open on a fresh session from there."""
        self._expiry_callbacks.append(callback)
        return lambda: (
            self._expiry_callbacks.remove(callback) if callback in self._expiry_callbacks else None
        )

    # -- lifetime: open while used --------------------------------------

    def acquire(self) -> None:
        self._users += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def release(self) -> None:
        self._users = max(0, self._users - 1)
        if self._users == 0 and self._task is not None:
            self._task.cancel()
            self._task = None
            self.connected.clear()

    @property
    def users(self) -> int:
        return self._users

    async def flush(self, timeout_s: float = 1.0) -> None:
        """Wait, bounded, for the answers to server requests already on their way
        upstream (before `aclose` cancels them)."""
        if self._answers:
            await asyncio.wait(list(self._answers), timeout=timeout_s)

    async def aclose(self) -> None:
        self._users = 0
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for answer in list(self._answers):
            answer.cancel()

    # -- the stream ------------------------------------------------------

    async def _run(self) -> None:
        backoff = _BACKOFF_START_S
        last_event_id: str | None = None
        while True:
            try:
                exchange = await self._session.listen(last_event_id)
            except SessionExpired:
                log.info("get_stream_session_expired")
                if self._on_expired is not None:
                    self._on_expired()
                for callback in list(self._expiry_callbacks):
                    callback()
                return
            except UpstreamError as exc:
                log.info("get_stream_unavailable", error=exc.message, retry_in_s=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
                continue
            self.connected.set()
            backoff = _BACKOFF_START_S
            try:
                async for message in exchange:
                    self._dispatch(message)
                    # One read can hold hundreds of events; let the sinks' consumers
                    # (listen streams) run between them, or a burst fills their queues.
                    await asyncio.sleep(0)
            except UpstreamError as exc:
                log.info("get_stream_dropped", error=exc.message)
            finally:
                last_event_id = exchange.last_event_id or last_event_id
                self.connected.clear()
                await exchange.aclose()
            self.reconnects += 1
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX_S)

    def _dispatch(self, message: Message) -> None:
        if "method" not in message:
            return  # a response on the GET stream answers nothing of ours
        if "id" in message:
            task = asyncio.get_running_loop().create_task(self._answer(message))
            self._answers.add(task)
            task.add_done_callback(self._answers.discard)
            return
        for sink in list(self._sinks):
            try:
                sink(message)
            except Exception:  # one broken sink must not starve the others
                log.exception("notification_sink_failed", method=message.get("method"))

    async def _answer(self, request: Message) -> None:
        reply: Message | None = None
        for handler in list(self._handlers):
            reply = await handler(request)
            if reply is not None:
                break
        if reply is None:
            reply = default_answer(request)
        try:
            await self._session.respond(reply)
        except UpstreamError as exc:
            log.info("get_stream_answer_failed", method=request.get("method"), error=exc.message)
