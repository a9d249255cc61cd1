"""Lanes: upstream sessions that serve one call at a time.

A legacy server sends its requests for input on the SSE stream of the call
that caused them, which names the call, or on the session's standalone GET
stream, which does not (the Python SDK sends `roots/list` there; in JSON
response mode every request goes there). On a session shared by several
calls such a request cannot be told apart. So a call whose caller can
receive input requests runs on a *lane*: a session of the same pool key
(same capabilities, version and credentials) that carries only that call
while it runs or is parked, with its GET stream open before the call is
sent. Whatever arrives on that GET stream belongs to the lane's one call.

Lanes are reused: a call that ended normally hands its lane back, idle lanes
are kept per key (bounded) and closed after `idle_s`. A lane whose call was
abandoned or cancelled is closed instead (a late request of the cancelled
call must not reach the next one).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from app.call import Message
from app.upstream.sessions.pool import PooledSession, SessionKey, SessionPool

log = structlog.get_logger("mcp_shim.mrtr.lanes")

RequestHandler = Callable[[Message], Awaitable[Message | None]]


class Lane:
    """One session, one call at a time; `handler` takes what its GET stream asks."""

    def __init__(
        self,
        key: SessionKey,
        pooled: PooledSession,
        pool: SessionPool,
        on_expired: Callable[[Lane], None] | None = None,
    ) -> None:
        self.key = key
        self.pooled = pooled
        self._pool = pool
        self.handler: RequestHandler | None = None
        self.idle_since = time.monotonic()
        # The upstream forgot this lane's session (a 404): never handed out again.
        self.expired = False
        self._on_expired = on_expired
        self._remove_handler = pooled.listener.add_handler(self._on_request)
        # Its GET stream meeting a 404: this lane is closed, idle or when its call
        # ends, before a call is sent on it. Other lanes meet their own 404 if the
        # upstream lost them too (restarted), each renewed once.
        self._remove_expiry = pooled.listener.add_expiry_callback(self._expire)

    def _expire(self) -> None:
        self.expired = True
        if self._on_expired is not None:
            self._on_expired(self)

    async def _on_request(self, request: Message) -> Message | None:
        handler = self.handler
        if handler is None:
            return None  # between calls: the listener's default answer
        return await handler(request)

    async def close(self) -> None:
        self.handler = None
        self._remove_handler()
        self._remove_expiry()
        # Answers just given to GET-stream requests (e.g. "cancel" for an abandoned
        # call) go out before the stream and the session are closed.
        try:
            await self.pooled.listener.flush()
        finally:
            # Through the pool: the session stops counting against its bounds.
            await self._pool.close_detached(self.pooled)


class Lanes:
    def __init__(
        self,
        pool: SessionPool,
        *,
        idle_s: float,
        max_idle_per_key: int = 8,
        listen_wait_s: float = 2.0,
    ) -> None:
        self._pool = pool
        self._idle_s = idle_s
        self._max_idle = max_idle_per_key
        self._listen_wait_s = listen_wait_s
        self._idle: dict[SessionKey, list[Lane]] = {}
        self._busy: set[Lane] = set()
        # Whether the upstream keeps GET streams: learned from the first lane, so
        # an upstream without them does not cost every new lane a wait.
        self._get_streams: bool | None = None
        self._reaper: asyncio.Task[None] | None = None
        # Lanes count against the pool's bounds; the pool may ask for idle ones back.
        pool.add_holder(self._reclaim)
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def busy(self) -> int:
        return len(self._busy)

    @property
    def idle(self) -> int:
        return sum(len(lanes) for lanes in self._idle.values())

    def start(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def acquire(
        self, key: SessionKey, capabilities: Mapping[str, Any], authorization: str | None
    ) -> Lane:
        while idle := self._idle.get(key):
            lane = idle.pop()
            if lane.expired:
                await lane.close()  # the upstream forgot it meanwhile
                continue
            self._busy.add(lane)
            return lane
        return await self._open(key, capabilities, authorization)

    async def _open(
        self, key: SessionKey, capabilities: Mapping[str, Any], authorization: str | None
    ) -> Lane:
        pooled = await self._pool.open_detached(key, capabilities, authorization)
        lane = Lane(key, pooled, self._pool, self._expired)
        try:
            if self._get_streams is not False:
                await self._open_get_stream(pooled)
        except BaseException:
            await lane.close()  # cancelled while waiting: the session is not left open
            raise
        self._busy.add(lane)
        log.info("lane_opened", busy=len(self._busy), idle=self.idle)
        return lane

    async def _open_get_stream(self, pooled: PooledSession) -> None:
        pooled.listener.acquire()
        try:
            async with asyncio.timeout(self._listen_wait_s):
                await pooled.listener.connected.wait()
            self._get_streams = True
        except TimeoutError:
            if self._get_streams is None:
                self._get_streams = False
                log.warning(
                    "lane_get_stream_unavailable",
                    upstream_version=pooled.version.name,
                    consequence="requests the upstream sends on its GET stream go unanswered",
                )

    async def release(self, lane: Lane, *, reusable: bool) -> None:
        lane.handler = None
        self._busy.discard(lane)
        idle = self._idle.setdefault(lane.key, [])
        if reusable and not lane.expired and len(idle) < self._max_idle:
            lane.idle_since = time.monotonic()
            idle.append(lane)
            return
        await lane.close()

    async def replace(
        self, lane: Lane, capabilities: Mapping[str, Any], authorization: str | None
    ) -> Lane:
        """A fresh lane for one whose session the upstream forgot (404); only that
        one is closed (a 404 says nothing of the other lanes). A new session, never
        an idle lane: after a restart the idle ones were opened on the same upstream
        process and would answer 404 too, and the call may be resent only once."""
        lane.expired = True
        self._pool.expired(lane.pooled)
        await self.release(lane, reusable=False)
        return await self._open(lane.key, capabilities, authorization)

    async def _reclaim(self, credentials: str | None) -> bool:
        """Close the longest idle lane (of these credentials, or any): the pool
        needs its place."""
        candidates = [
            lane
            for lanes in self._idle.values()
            for lane in lanes
            if credentials is None or lane.key.credentials == credentials
        ]
        if not candidates:
            return False
        oldest = min(candidates, key=lambda lane: lane.idle_since)
        self._idle[oldest.key].remove(oldest)
        await oldest.close()
        return True

    def _expired(self, lane: Lane) -> None:
        """The upstream forgot `lane`'s session (its GET stream met a 404): closed
        now if idle; a busy one is closed when released."""
        idle = self._idle.get(lane.key)
        if idle is None or lane not in idle:
            return
        idle.remove(lane)  # before any await: nobody takes it after this
        task = asyncio.get_running_loop().create_task(lane.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        log.info("lane_expired")

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(self._idle_s / 2, 30.0))
            now = time.monotonic()
            for key, lanes in list(self._idle.items()):
                stale = [lane for lane in lanes if now - lane.idle_since > self._idle_s]
                if not stale:
                    continue
                self._idle[key] = [lane for lane in lanes if lane not in stale]
                for lane in stale:
                    await lane.close()
                log.info("lanes_closed_idle", closed=len(stale))

    async def aclose(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        lanes = [lane for idle in self._idle.values() for lane in idle] + list(self._busy)
        self._idle.clear()
        self._busy.clear()
        for lane in lanes:
            await lane.close()
        for task in list(self._closing):
            with contextlib.suppress(Exception):
                await task
