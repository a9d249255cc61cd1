"""A modern upstream's `subscriptions/listen` behind legacy sessions' GET streams.

`ListenHub` keeps one upstream listen stream per credential and filter, shared
by every session that wants exactly that; a session's `resources/subscribe` and
`unsubscribe` change its filter, and its GET stream (`ListenStream`) moves to
the shared stream of the new one. An upstream `list_changed` also invalidates
the list cache's entries for that list.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import structlog

from app import jsonio
from app.call import Message
from app.upstream.errors import UpstreamError
from app.upstream.modern.list_cache import ListCache
from app.upstream.modern.upstream import ModernHttpUpstream
from app.upstream.sessions.pool import credential_hash
from translators import translate
from translators.registry import Version

log = structlog.get_logger("mcp_shim.modern_session")
LISTEN_ID = "mcp-shim-listen"


class ListenSession(Protocol):
    """What a listen stream needs of the legacy session it serves
    (`ModernSession`, app/upstream/modern/session.py)."""

    authorization: str | None
    modern: Version
    version: Version
    hub: ListenHub

    def upgrade(self, message: Message) -> Message: ...

    def headers_for(self, message: Message) -> dict[str, str]: ...

    def listen_filter(self) -> dict[str, Any]: ...

    def tools_changed(self) -> None: ...

    def listen_closed(self, stream: ListenStream) -> None: ...


ListenKey = tuple[str, str, str]  # credential hash, canonical filter, modern version


class ListenHub:
    """The upstream's `subscriptions/listen` streams behind legacy sessions' GET
    streams: one per credential and filter, shared by every session that wants
    exactly that, reference counted (the last one leaving closes it)."""

    def __init__(self, upstream: ModernHttpUpstream, lists: ListCache | None = None) -> None:
        self._upstream = upstream
        self.lists = lists
        self._streams: dict[ListenKey, _SharedListen] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def join(self, key: ListenKey, session: ListenSession, sink: Sink) -> _SharedListen:
        shared = self._streams.get(key)
        if shared is None:
            shared = _SharedListen(self, key, self._upstream, session)
            self._streams[key] = shared
        shared.sinks.append(sink)
        return shared

    def leave(self, shared: _SharedListen, sink: Sink) -> None:
        with contextlib.suppress(ValueError):
            shared.sinks.remove(sink)
        if not shared.sinks:
            if self._streams.get(shared.key) is shared:
                del self._streams[shared.key]
            shared.stop()

    async def aclose(self) -> None:
        for shared in list(self._streams.values()):
            shared.stop()
        self._streams.clear()


Sink = Callable[[Message], None]


class _SharedListen:
    """One upstream `subscriptions/listen`, its notifications offered to every
    sink (in the modern form: each session translates for its own version);
    opened again after a lost stream, with backoff."""

    def __init__(
        self, hub: ListenHub, key: ListenKey, upstream: ModernHttpUpstream, session: ListenSession
    ) -> None:
        self.key = key
        self.sinks: list[Sink] = []
        self._hub = hub
        self._upstream = upstream
        message = session.upgrade(
            {
                "jsonrpc": "2.0",
                "id": LISTEN_ID,
                "method": "subscriptions/listen",
                "params": {"notifications": jsonio.loads(key[1])},
            }
        )
        self._message = message
        self._headers = session.headers_for(message)
        self._task = asyncio.create_task(self._pump())

    def stop(self) -> None:
        self._task.cancel()

    async def _pump(self) -> None:
        backoff = 0.2
        while True:
            try:
                exchange = await self._upstream.request(
                    self._message, self._headers, long_lived=True
                )
            except UpstreamError as exc:
                log.info("modern_listen_failed", error=exc.message)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = 0.2
            try:
                async for message in exchange:
                    method = message.get("method")
                    if method is None or method == "notifications/subscriptions/acknowledged":
                        continue
                    if self._hub.lists is not None:
                        self._hub.lists.invalidate(str(method))
                    for sink in list(self.sinks):
                        sink(message)
            except UpstreamError as exc:
                log.info("modern_listen_lost", error=exc.message)
            finally:
                await exchange.aclose()
            await asyncio.sleep(backoff)


class ListenStream:
    """The legacy session's GET stream: fed by the shared upstream listen
    stream for this session's credential and filter; when the session's
    subscriptions change it moves to the stream of its new filter."""

    last_event_id: str | None = None

    def __init__(self, session: ListenSession) -> None:
        self._session = session
        self._queue: asyncio.Queue[Message | None] = asyncio.Queue(maxsize=1024)
        self._shared: _SharedListen | None = None
        self._started = False
        self._closed = False

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._read()

    async def _read(self) -> AsyncIterator[Message]:
        self._started = True
        self.refilter()
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item

    def refilter(self) -> None:
        if not self._started or self._closed:
            return
        session = self._session
        wanted = session.listen_filter()
        key = (
            credential_hash(session.authorization),
            jsonio.dumps_sorted(wanted).decode(),
            session.modern.name,
        )
        if self._shared is not None and self._shared.key == key:
            return
        if self._shared is not None:
            session.hub.leave(self._shared, self._offer)
            self._shared = None
        if wanted:
            self._shared = session.hub.join(key, session, self._offer)

    def offer(self, message: Message) -> None:
        """A notification of the gateway's own (modern form) for this stream."""
        if not self._closed:
            self._offer(message)

    def _offer(self, message: Message) -> None:
        session = self._session
        if message.get("method") == "notifications/tools/list_changed":
            session.tools_changed()
        note = translate.notification(message, session.modern, session.version)
        if note is None:
            return
        try:
            self._queue.put_nowait(note)
        except asyncio.QueueFull:
            # A client that does not read its GET stream loses it, not the others.
            log.info("modern_listen_overflow")
            self._end()

    def _end(self) -> None:
        if self._shared is not None:
            self._session.hub.leave(self._shared, self._offer)
            self._shared = None
        self._closed = True
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    async def aclose(self, drain: bool = False) -> None:
        self._session.listen_closed(self)
        self._end()
