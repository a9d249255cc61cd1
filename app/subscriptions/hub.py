"""Fan-out of a legacy session's change notifications to `subscriptions/listen` streams.

One `SessionHub` per pool key (client capabilities, offered version,
credential hash), so a listener only ever shares an upstream session with
callers the pool would let share it anyway. A session hub, while it has
listeners:

- holds the pooled session's GET stream open (`SessionListener.acquire`:
  one upstream GET stream per session however many listeners);
- keeps a reference count per resource URI and sends `resources/subscribe`
  when a URI is first wanted and `resources/unsubscribe` when the last
  listener that wanted it leaves;
- receives every notification of that GET stream (a sink, called
  synchronously by the listener's read loop) and offers it to the mailbox of
  each listener whose acknowledged filter wants it. Offering never waits: a
  listener whose mailbox is full is dropped from the fan-out and ends with an
  error, and the others are not slowed down;
- re-opens on a fresh session when the upstream forgets the session (404)
  and subscribes the wanted URIs again there.

Upstream subscribe/unsubscribe calls of one session run one at a time (a
lock), so the upstream sees them in the order the refcount decided them.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog

from app.call import Message
from app.rejections import RequestId
from app.subscriptions import filters
from app.subscriptions.filters import Filter
from app.subscriptions.mailbox import End, Mailbox
from app.subscriptions.refcount import UriRefcount
from app.upstream.errors import (
    SessionExpired,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from app.upstream.sessions.pool import PooledSession, SessionKey, SessionPool
from translators import translate
from translators.registry import Version

log = structlog.get_logger("mcp_shim.subscriptions")

_REOPEN_BACKOFF_START_S = 0.1
_REOPEN_BACKOFF_MAX_S = 5.0


@dataclass(eq=False, slots=True)
class Listener:
    """One open `subscriptions/listen` stream as the hub sees it."""

    listen_id: RequestId
    version: Version  # the client's protocol version
    filter: Filter  # what was acknowledged
    mailbox: Mailbox
    hub: SessionHub | None = field(default=None, repr=False)
    upstream_version: str | None = None
    request_id: str | None = None  # of the listen request, for logs


class SessionHub:
    """The listeners of one pool key and the upstream session they share."""

    def __init__(
        self,
        owner: SubscriptionHub,
        key: SessionKey,
        capabilities: Mapping[str, Any],
        authorization: str | None,
    ) -> None:
        self._owner = owner
        self.key = key
        # Needed to re-open the session after a 404. Same credential hash as
        # every caller of this key; kept in memory only, never logged.
        self._capabilities = dict(capabilities)
        self._authorization = authorization
        self._pooled: PooledSession | None = None
        self._retired: weakref.WeakSet[PooledSession] = weakref.WeakSet()
        self._detach_hooks: list[Callable[[], None]] = []
        self._listeners: set[Listener] = set()
        self._refcount = UriRefcount()
        self._upstream_uris: set[str] = set()  # subscribed on the current session
        self._lock = asyncio.Lock()
        self.dead = False

    # -- observed state (tests, logs) ----------------------------------------

    @property
    def pooled(self) -> PooledSession | None:
        return self._pooled

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    # -- joining and leaving --------------------------------------------------

    async def join(
        self, pooled: PooledSession, listen_id: RequestId, version: Version, honoured: Filter
    ) -> Listener | None:
        """Add a listener for `honoured` (already cut to the upstream's capabilities);
        None when this hub was retired meanwhile (the caller takes the next one)."""
        async with self._lock:
            if self.dead:
                return None
            wanted = honoured.uris
            counted = False
            try:
                await self._use(pooled)
                self._refcount.add(wanted)
                counted = True
                # After a 404 this also re-subscribes other listeners' URIs: keep
                # only this listener's refusals.
                failed = [u for u in await self._subscribe(wanted) if u in wanted]
            except BaseException:
                # Undo this join's counts; with no listener left the hub retires.
                self._release_later(self._refcount.remove(wanted) if counted else [])
                raise
            if failed:
                self._refcount.remove(failed)
            listener = Listener(
                listen_id,
                version,
                honoured.with_uris(u for u in wanted if u not in failed),
                Mailbox(self._owner.queue_bound),
            )
            listener.hub = self
            assert self._pooled is not None
            listener.upstream_version = self._pooled.version.name
            self._listeners.add(listener)
            self._owner.track(listener)
        return listener

    def leave(self, listener: Listener) -> None:
        """Synchronous: the refcount changes at once; upstream calls follow in order."""
        self._listeners.discard(listener)
        gone = self._refcount.remove(listener.filter.uris)
        if gone or not self._listeners:
            self._release_later(gone)

    def _release_later(self, uris: list[str]) -> None:
        self._owner.spawn(self._release(uris))

    async def _release(self, uris: list[str]) -> None:
        async with self._lock:
            for uri in uris:
                # Wanted again by a listener that joined meanwhile: keep it.
                if self._refcount.count(uri) > 0 or uri not in self._upstream_uris:
                    continue
                self._upstream_uris.discard(uri)
                with contextlib.suppress(UpstreamError):
                    await self._call("resources/unsubscribe", uri)
            if not self._listeners and not self.dead and len(self._refcount) == 0:
                self.retire()

    def retire(self) -> None:
        """No listener left: give the GET stream back and leave the owner's table."""
        self.dead = True
        if self._pooled is not None:
            self._detach(self._pooled)
            self._pooled = None
        self._owner.forget(self)

    # -- the upstream session -------------------------------------------------

    async def _use(self, pooled: PooledSession) -> None:
        """Make `pooled` the hub's session, unless it is one the hub already left."""
        if pooled is self._pooled or pooled in self._retired:
            return
        await self._switch(pooled)

    async def _switch(self, fresh: PooledSession) -> None:
        stale = self._pooled
        if stale is not None:
            self._detach(stale)
        self._attach(fresh)
        wanted = self._refcount.uris()
        if wanted:
            failed = await self._subscribe(wanted)
            if failed:
                log.warning(
                    "listen_resubscribe_failed",
                    uris=len(failed),
                    upstream_version=fresh.version.name,
                )

    def _attach(self, pooled: PooledSession) -> None:
        self._pooled = pooled
        self._upstream_uris = set()
        get_stream = pooled.listener
        self._detach_hooks = [
            get_stream.add_sink(partial(self._on_notification, pooled)),
            get_stream.add_expiry_callback(partial(self._on_expired, pooled)),
        ]
        get_stream.acquire()

    def _detach(self, pooled: PooledSession) -> None:
        for hook in self._detach_hooks:
            hook()
        self._detach_hooks = []
        pooled.listener.release()
        self._retired.add(pooled)

    def _on_expired(self, pooled: PooledSession) -> None:
        if pooled is self._pooled and not self.dead:
            self._owner.spawn(self._reopen(pooled))

    async def _reopen(self, stale: PooledSession) -> None:
        """The upstream forgot the session (404 on the GET stream): continue on a fresh
        one with the same key and subscribe the wanted URIs again."""
        delay = _REOPEN_BACKOFF_START_S
        while True:
            async with self._lock:
                if self._pooled is not stale or self.dead:
                    return
                try:
                    fresh = await self._owner.pool.renew(
                        stale, self._capabilities, self._authorization
                    )
                    # The hub holds the session through its GET stream, not a lease.
                    self._owner.pool.release(fresh)
                    await self._switch(fresh)
                except UpstreamError as exc:
                    log.info("listen_session_reopen_failed", error=exc.message, retry_in_s=delay)
                else:
                    log.info(
                        "listen_session_reopened",
                        listeners=len(self._listeners),
                        uris=len(self._refcount),
                        upstream_version=fresh.version.name,
                    )
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, _REOPEN_BACKOFF_MAX_S)

    async def _subscribe(self, uris: tuple[str, ...] | list[str]) -> list[str]:
        """`resources/subscribe` for each URI not yet subscribed upstream; the URIs the
        upstream refused. A 404 for the session moves the hub to a fresh session once
        (where every wanted URI is subscribed again)."""
        for attempt in (1, 2):
            try:
                return await self._subscribe_once(uris)
            except SessionExpired:
                if attempt == 2:
                    raise
                stale = self._pooled
                assert stale is not None
                fresh = await self._owner.pool.renew(stale, self._capabilities, self._authorization)
                self._owner.pool.release(fresh)
                self._detach(stale)
                self._attach(fresh)
                uris = self._refcount.uris()
        raise AssertionError("unreachable")

    async def _subscribe_once(self, uris: tuple[str, ...] | list[str]) -> list[str]:
        failed: list[str] = []
        for uri in uris:
            if uri in self._upstream_uris:
                continue
            if await self._call("resources/subscribe", uri):
                self._upstream_uris.add(uri)
            else:
                failed.append(uri)
        return failed

    async def _call(self, method: str, uri: str) -> bool:
        """One upstream request on the hub's session; True for a result, False for an
        error answer. Transport failures raise."""
        pooled = self._pooled
        assert pooled is not None
        message: Message = {
            "jsonrpc": "2.0",
            "id": f"shim-sub-{pooled.next_id()}",
            "method": method,
            "params": {"uri": uri},
        }
        try:
            async with asyncio.timeout(self._owner.call_timeout_s):
                exchange = await pooled.session.request(message)
                answered = False
                try:
                    async for reply in exchange:
                        if "method" in reply or reply.get("id") != message["id"]:
                            continue
                        answered = True
                        error = reply.get("error")
                        if isinstance(error, dict):
                            log.info(
                                "upstream_refused",
                                method=method,
                                code=error.get("code"),
                                upstream_version=pooled.version.name,
                            )
                            return False
                        return True
                finally:
                    await exchange.aclose(drain=answered)
        except TimeoutError:
            raise UpstreamTimeout(f"upstream timed out during {method}") from None
        raise UpstreamProtocolError(f"upstream closed the stream without answering {method}")

    # -- fan-out --------------------------------------------------------------

    def _on_notification(self, pooled: PooledSession, message: Message) -> None:
        if pooled is not self._pooled:
            return
        self.deliver(pooled, message)

    def deliver(self, pooled: PooledSession, message: Message) -> None:
        """Offer one upstream notification to every listener that wants it."""
        method = message.get("method")
        if method == filters.TOOLS_LIST_CHANGED:
            pooled.invalidate_tools()
        if method not in filters.CHANGE_METHODS:
            return
        translated: dict[str, Message | None] = {}
        overflowed: list[Listener] = []
        for listener in self._listeners:
            if not filters.wants(listener.filter, message):
                continue
            name = listener.version.name
            if name not in translated:
                translated[name] = translate.notification(message, pooled.version, listener.version)
            out = translated[name]
            if out is not None and not listener.mailbox.offer(out):
                overflowed.append(listener)
        for listener in overflowed:
            # Out of the fan-out now; its stream ends with the overflow error and
            # its URIs are released when the stream's generator leaves.
            self._listeners.discard(listener)
            log.warning(
                "listen_overflow",
                request_id=listener.request_id,
                method="subscriptions/listen",
                listen_id=listener.listen_id,
                queue_bound=listener.mailbox.bound,
                upstream_version=pooled.version.name,
            )


class SubscriptionHub:
    """Every session hub of the gateway; the entry points the listen stream uses."""

    def __init__(
        self,
        pool: SessionPool,
        *,
        queue_bound: int,
        ready_timeout_s: float,
        call_timeout_s: float,
    ) -> None:
        self.pool = pool
        self.queue_bound = queue_bound
        self.ready_timeout_s = ready_timeout_s
        self.call_timeout_s = call_timeout_s
        self._hubs: dict[SessionKey, SessionHub] = {}
        self._active: set[Listener] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.closing = False

    # -- observed state ------------------------------------------------------

    @property
    def active(self) -> int:
        return len(self._active)

    def session_hub(self, key: SessionKey) -> SessionHub | None:
        return self._hubs.get(key)

    # -- listeners -----------------------------------------------------------

    async def join(
        self,
        pooled: PooledSession,
        capabilities: Mapping[str, Any],
        authorization: str | None,
        listen_id: RequestId,
        version: Version,
        honoured: Filter,
        request_id: str | None = None,
    ) -> Listener:
        """A new listener, acknowledged-ready: its filter is what the ack carries."""
        while True:
            hub = self._hubs.get(pooled.key)
            if hub is None:
                hub = SessionHub(self, pooled.key, capabilities, authorization)
                self._hubs[pooled.key] = hub
            listener = await hub.join(pooled, listen_id, version, honoured)
            if listener is not None:
                break
        listener.request_id = request_id
        try:
            current = hub.pooled
            if current is not None:
                await self.wait_ready(current)
        except BaseException:
            self.leave(listener)  # the client left before its ack
            raise
        if self.closing:
            listener.mailbox.close(End.SHUTDOWN)
        return listener

    def leave(self, listener: Listener) -> None:
        """Idempotent; called when the listen stream ends, whatever ended it."""
        hub, listener.hub = listener.hub, None
        if hub is not None:
            hub.leave(listener)
        self._active.discard(listener)
        if not self._active:
            self._idle.set()

    def track(self, listener: Listener) -> None:
        self._active.add(listener)
        self._idle.clear()

    def forget(self, hub: SessionHub) -> None:
        if self._hubs.get(hub.key) is hub:
            del self._hubs[hub.key]

    async def wait_ready(self, pooled: PooledSession) -> None:
        """Until the session's GET stream is connected, so that nothing the upstream
        sends after the acknowledgment is lost; bounded (the ack must come quickly)."""
        if pooled.listener.connected.is_set():
            return
        try:
            async with asyncio.timeout(self.ready_timeout_s):
                await pooled.listener.connected.wait()
        except TimeoutError:
            log.warning(
                "listen_get_stream_not_ready",
                waited_s=self.ready_timeout_s,
                upstream_version=pooled.version.name,
            )

    def observe(self, pooled: PooledSession, message: Message) -> None:
        """A change notification the upstream sent on a call's stream instead of the
        GET stream: it reaches the listeners of that session all the same."""
        hub = self._hubs.get(pooled.key)
        if hub is not None and hub.pooled is pooled:
            hub.deliver(pooled, message)
        elif message.get("method") == filters.TOOLS_LIST_CHANGED:
            pooled.invalidate_tools()

    # -- background upstream calls ----------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("subscriptions_task_failed", error=repr(task.exception()))

    # -- ending ----------------------------------------------------------------

    async def close_all(self, grace_s: float) -> int:
        """Gateway shutdown: every listen stream delivers what it has queued, then the
        graceful closing result, then ends. Waits up to `grace_s` for them to finish."""
        self.closing = True
        listeners = list(self._active)
        for listener in listeners:
            listener.mailbox.close(End.SHUTDOWN)
        if listeners:
            log.info("listen_streams_closing", streams=len(listeners))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await self._idle.wait()
        return len(listeners)

    async def aclose(self, grace_s: float = 2.0) -> None:
        await self.close_all(0.0 if not self._active else grace_s)
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await asyncio.gather(*self._tasks, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        for hub in list(self._hubs.values()):
            if not hub.dead:
                hub.retire()
