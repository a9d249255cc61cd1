"""Pooled legacy sessions.

A legacy server fixes, at `initialize`, the client capabilities, the protocol
version and (through the HTTP request) the caller's credentials. A session can
therefore serve exactly the callers that agree on all three: the pool key.
Two callers with different `Authorization` headers never share a session.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from app import jsonio
from app.call import Message
from app.headers.param_headers import HeaderPaths, annotated_paths
from app.upstream.base import (
    OwnerEnd,
    Reclaimable,
    Rejoining,
    Session,
    Shareable,
    Transport,
)
from app.upstream.capabilities import canonical
from app.upstream.errors import (
    PoolExhausted,
    SessionExpired,
    SessionShareExceeded,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.sessions.listener import SessionListener
from translators.registry import Version, get_version

log = structlog.get_logger("mcp_shim.pool")

# How long a session's `x-mcp-header` annotations are trusted without a refresh.
TOOLS_CACHE_S = 60.0

GATEWAY_INFO = {"name": "mcp-shim", "version": "0.1.0"}


def credential_hash(authorization: str | None) -> str:
    if authorization is None:
        return "-"
    return hashlib.sha256(authorization.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class SessionKey:
    capabilities: bytes  # canonical JSON of the legacy client capabilities
    version: str
    credentials: str  # credential_hash(Authorization)


@dataclass(eq=False)
class PooledSession:
    key: SessionKey
    session: Session
    version: Version
    init_result: dict[str, Any]
    last_used: float = field(default_factory=time.monotonic)
    in_flight: int = 0
    # Counted against the pool's bounds until closed (exactly once).
    counted: bool = True
    # Owned by one holder (an MRTR lane), never in the pool's map.
    detached: bool = False
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _tools: dict[str, HeaderPaths] | None = None
    # Each tool's execution.taskSupport (2025-11-25 tasks), from the same tools/list.
    _task_modes: dict[str, str] = field(default_factory=dict)
    _tools_at: float = 0.0
    _tools_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The session's GET stream; opened only while someone acquires it.
    listener: SessionListener = field(init=False)

    def __post_init__(self) -> None:
        self.listener = SessionListener(self.session)

    def next_id(self) -> int:
        return next(self._ids)

    @property
    def server_capabilities(self) -> dict[str, Any]:
        caps = self.init_result.get("capabilities")
        return caps if isinstance(caps, dict) else {}

    @property
    def server_info(self) -> dict[str, Any] | None:
        info = self.init_result.get("serverInfo")
        return info if isinstance(info, dict) else None

    def invalidate_tools(self) -> None:
        self._tools = None

    async def tool_header_paths(self, name: str) -> HeaderPaths:
        """`x-mcp-header` annotations of one tool, from a cached upstream tools/list."""
        return (await self._fresh_tools()).get(name, ())

    async def tool_task_modes(self) -> dict[str, str]:
        """Every tool's `execution.taskSupport` that is not forbidden, from the
        same cached upstream tools/list (app/tasks)."""
        await self._fresh_tools()
        return self._task_modes

    async def _fresh_tools(self) -> dict[str, HeaderPaths]:
        # tools/list_changed invalidates the cache when a GET stream is open;
        # the age bound covers sessions that have none.
        if self._tools is None or time.monotonic() - self._tools_at > TOOLS_CACHE_S:
            async with self._tools_lock:
                if self._tools is None or time.monotonic() - self._tools_at > TOOLS_CACHE_S:
                    modes: dict[str, str] = {}
                    self._tools = await self._list_tool_paths(modes)
                    self._task_modes = modes
                    self._tools_at = time.monotonic()
        return self._tools

    async def _list_tool_paths(self, modes: dict[str, str]) -> dict[str, HeaderPaths]:
        tools: dict[str, HeaderPaths] = {}
        cursor: Any = None
        for _ in range(100):  # bounded: a server that pages forever is not followed
            params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
            message = {
                "jsonrpc": "2.0",
                "id": f"shim-{self.next_id()}",
                "method": "tools/list",
                "params": params,
            }
            exchange = await self.session.request(message)
            result = None
            try:
                async for reply in exchange:
                    if reply.get("id") == message["id"]:
                        result = reply.get("result")
                        break
            finally:
                await exchange.aclose(drain=True)
            if not isinstance(result, dict):
                return tools
            for tool in result.get("tools") or []:
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    execution = tool.get("execution")
                    mode = execution.get("taskSupport") if isinstance(execution, dict) else None
                    if mode in ("optional", "required"):
                        modes[tool["name"]] = mode
                    paths = annotated_paths(tool.get("inputSchema"))
                    if paths:
                        tools[tool["name"]] = paths
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return tools


# Something else that holds upstream sessions of the pool (the MRTR bridge's idle
# lanes): asked to close one idle session, of one credential or of any (None).
Reclaimer = Callable[[str | None], Awaitable[bool]]


class SessionPool:
    """Upstream sessions, bounded.

    Every session counts against `max_sessions` from the moment its
    `initialize` starts until it is closed: pooled ones, ones being opened, and
    detached ones (lanes); legacy clients' own sessions (`open_owned`) are
    bounded apart, by app/fronts/legacy, so they never take a modern caller's room.
    One credential (the hash of an `Authorization` value; all anonymous callers
    together) may hold at most `max_per_credential`. When a bound is reached,
    an idle session (pooled or an idle lane) is closed to make room; when none
    is idle the call is refused: `PoolExhausted` (503) for the pool,
    `SessionShareExceeded` (429) for a credential's share.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        max_sessions: int,
        idle_s: float,
        max_per_credential: int | None = None,
    ) -> None:
        self._transport = transport
        self._max = max_sessions
        self._share = min(max_per_credential or max_sessions, max_sessions)
        self._idle_s = idle_s
        self._sessions: dict[SessionKey, PooledSession] = {}
        self._opening: dict[SessionKey, asyncio.Task[PooledSession]] = {}
        # Callers awaiting the open of a key: each is leased the session as it
        # lands in the map (_open), before any of them runs again.
        self._waiting: Counter[SessionKey] = Counter()
        self._reaper: asyncio.Task[None] | None = None
        # Sessions alive or being opened, in all and per credential hash.
        self._count = 0
        self._per_credential: Counter[str] = Counter()
        # Out of the map (the upstream forgot them) but still leased.
        self._retired: set[PooledSession] = set()
        self._reclaimers: list[Reclaimer] = []
        self._background: set[asyncio.Task[None]] = set()
        # When the upstream last answered (monotonic) and in which version: /readyz.
        self.last_answer: tuple[float, Version] | None = None
        # When a call last failed to reach it, or it stopped answering one: /readyz.
        self.last_failure: float | None = None

    def note_answer(self, version: Version) -> None:
        """The upstream just answered something (a response, even an error)."""
        self.last_answer = (time.monotonic(), version)

    def note_failure(self, exc: BaseException) -> None:
        """A call could not reach the upstream (refused, broken, timed out): /readyz
        stops trusting the last answer at once. The gateway's own limits and the
        upstream's answers, even refusals, are not failures of the upstream."""
        if isinstance(exc, (UpstreamUnavailable, UpstreamTimeout)):
            self.last_failure = time.monotonic()

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def open_sessions(self) -> int:
        """Every upstream session counted against MCP_SHIM_MAX_SESSIONS."""
        return self._count

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap_idle())

    def add_holder(self, reclaim: Reclaimer) -> None:
        """Register an owner of detached sessions (the MRTR lanes): `reclaim` closes
        one of its idle sessions when a bound is reached."""
        self._reclaimers.append(reclaim)

    @staticmethod
    def key_for(
        capabilities: Mapping[str, Any], version: Version, authorization: str | None
    ) -> SessionKey:
        # Canonical capabilities: the key space is what the upstream's revision can
        # tell apart, not whatever a client declares (app/upstream/capabilities.py).
        canonical_caps = jsonio.dumps_sorted(canonical(capabilities, version))
        return SessionKey(canonical_caps, version.name, credential_hash(authorization))

    async def acquire(
        self, key: SessionKey, capabilities: Mapping[str, Any], authorization: str | None
    ) -> PooledSession:
        """A session for this key, leased: counted as in use until `release`, so
        neither eviction nor the idle reaper closes it under a call."""
        pooled = self._sessions.get(key)
        if pooled is None:
            opening = self._opening.get(key)
            if opening is None:
                # A task of its own, which every caller of the key awaits: a
                # caller that goes away (its task cancelled) leaves the open to
                # the others, never cancels it under them.
                opening = asyncio.get_running_loop().create_task(
                    self._open_once(key, capabilities, authorization)
                )
                opening.add_done_callback(_retrieved)
                self._opening[key] = opening
            # Leased by `_open` the moment it is in the map: this caller resumes
            # some loop turns later, and a caller at a bound in between must not
            # find the session idle and close it before its first request.
            self._waiting[key] += 1
            try:
                return await asyncio.shield(opening)
            except BaseException:
                if opening.done() and not opening.cancelled() and opening.exception() is None:
                    self.release(opening.result())  # opened, but this caller left
                raise
            finally:
                self._waiting[key] -= 1
                if self._waiting[key] <= 0:
                    del self._waiting[key]
        pooled.in_flight += 1
        pooled.last_used = time.monotonic()
        return pooled

    def lease(self, pooled: PooledSession) -> None:
        """One more lease on a session already held (a task pins the session that
        created it, app/tasks): released with `release` like any other."""
        pooled.in_flight += 1
        pooled.last_used = time.monotonic()

    def release(self, pooled: PooledSession) -> None:
        pooled.in_flight -= 1
        pooled.last_used = time.monotonic()
        if pooled in self._retired and pooled.in_flight == 0 and pooled.listener.users == 0:
            self._retired.discard(pooled)
            self._spawn(self._close(pooled))

    async def _open_once(
        self, key: SessionKey, capabilities: Mapping[str, Any], authorization: str | None
    ) -> PooledSession:
        try:
            return await self._open(key, capabilities, authorization)
        finally:
            self._opening.pop(key, None)

    async def _open(
        self, key: SessionKey, capabilities: Mapping[str, Any], authorization: str | None
    ) -> PooledSession:
        pooled = await self._handshake(key, authorization)
        # No await from here to the task's end: its waiters hold their leases
        # from the moment the session can be found (acquire).
        pooled.in_flight += self._waiting[key]
        self._sessions[key] = pooled
        log.info(
            "upstream_session_opened",
            upstream_version=pooled.version.name,
            sessions=len(self._sessions),
            open_sessions=self._count,
        )
        return pooled

    async def open_detached(
        self, key: SessionKey, capabilities: Mapping[str, Any], authorization: str | None
    ) -> PooledSession:
        """A fresh session for `key` that the pool neither keeps nor hands to anyone:
        its owner uses it alone and closes it with `close_detached` (the MRTR
        bridge's lanes, app/mrtr/lanes.py). It counts against the bounds."""
        pooled = await self._handshake(key, authorization)
        pooled.detached = True
        return pooled

    async def close_detached(self, pooled: PooledSession) -> None:
        await self._close(pooled)

    async def open_owned(
        self,
        key: SessionKey,
        authorization: str | None,
        client_info: Mapping[str, Any] | None,
        end: OwnerEnd | None = None,
    ) -> PooledSession:
        """A fresh session for one owner alone (a legacy client's session, app/fronts/legacy),
        until `close_owned`. Not counted against this pool's bounds: owned sessions
        cannot be closed to make room for a modern caller (their client holds state
        on them), so they have a bound of their own (app/fronts/legacy/bound.py).
        A transport that bounds its sessions itself (stdio processes) may ask the
        owner to end it through `end`."""
        pooled = await self._handshake(key, authorization, client_info, counted=False)
        pooled.detached = True
        if isinstance(pooled.session, Reclaimable):
            pooled.session.mark_owned(end)
        log.info("upstream_session_opened", upstream_version=pooled.version.name, owned=True)
        return pooled

    @property
    def can_rejoin(self) -> bool:
        """Sessions of this upstream can be spoken on by another worker (`rejoin`)."""
        return isinstance(self._transport, Rejoining)

    def shared_state(self, pooled: PooledSession) -> dict[str, Any] | None:
        """What another worker needs to speak on `pooled` (`Shareable`); None: it
        lives in this process only (a stdio process, a stateless modern session)."""
        session = pooled.session
        if not isinstance(session, Shareable) or not isinstance(self._transport, Rejoining):
            return None
        return session.shared_state()

    def rejoin(
        self, state: Mapping[str, Any], authorization: str | None, key: SessionKey
    ) -> PooledSession | None:
        """The session another worker opened and shared (`shared_state`), not this
        pool's to count nor to close: its opener ends it upstream."""
        transport = self._transport
        if not isinstance(transport, Rejoining):
            return None
        session = transport.rejoin(state, authorization)
        version = getattr(session, "version", None)
        if session is None or not isinstance(version, Version):
            return None
        return PooledSession(key, session, version, {}, counted=False, detached=True)

    async def close_owned(self, pooled: PooledSession) -> None:
        """End a session from `open_owned` (DELETE upstream)."""
        await self._close(pooled)

    async def _reserve(self, credentials: str) -> None:
        """Count one more session for `credentials`, closing idle ones to make room."""
        while True:
            # The share first: a credential at its own bound makes room only from
            # its own sessions, never by closing another credential's.
            if self._per_credential[credentials] >= self._share:
                if await self._reclaim(credentials):
                    continue
                log.warning(
                    "session_share_exceeded",
                    limit=self._share,
                    setting="MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL",
                )
                raise SessionShareExceeded(
                    f"this caller's credentials already hold {self._share} upstream sessions, "
                    "all busy (MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL); retry later"
                )
            if self._count >= self._max:
                if await self._reclaim(None):
                    continue
                log.warning(
                    "session_pool_exhausted", limit=self._max, setting="MCP_SHIM_MAX_SESSIONS"
                )
                raise PoolExhausted(
                    f"all {self._max} upstream sessions are busy; raise MCP_SHIM_MAX_SESSIONS "
                    "or retry later"
                )
            # No await between the checks above and the count: the bound is strict.
            self._count += 1
            self._per_credential[credentials] += 1
            return

    def _uncount(self, pooled: PooledSession) -> None:
        if pooled.counted:
            pooled.counted = False
            self._uncount_key(pooled.key.credentials)

    def _uncount_key(self, credentials: str) -> None:
        self._count -= 1
        self._per_credential[credentials] -= 1
        if self._per_credential[credentials] <= 0:
            del self._per_credential[credentials]

    async def _reclaim(self, credentials: str | None) -> bool:
        """Close one idle session (of these credentials, or of any): pooled ones
        first (least recently used), then the holders' (idle lanes)."""
        idle = [
            p
            for p in self._sessions.values()
            if p.in_flight == 0
            and p.listener.users == 0
            and (credentials is None or p.key.credentials == credentials)
        ]
        if idle:
            await self.discard(min(idle, key=lambda p: p.last_used))
            return True
        for reclaim in self._reclaimers:
            if await reclaim(credentials):
                return True
        return False

    async def _handshake(
        self,
        key: SessionKey,
        authorization: str | None,
        client_info: Mapping[str, Any] | None = None,
        *,
        counted: bool = True,
    ) -> PooledSession:
        if counted:
            await self._reserve(key.credentials)
        try:
            headers = {"authorization": authorization} if authorization is not None else {}
            initialize: Message = {
                "jsonrpc": "2.0",
                "id": "shim-init",
                "method": "initialize",
                "params": {
                    "protocolVersion": key.version,
                    # Exactly what the key says, so a session serves what it was keyed by.
                    "capabilities": jsonio.loads(key.capabilities),
                    # A legacy client's own session introduces that client.
                    "clientInfo": dict(client_info) if client_info is not None else GATEWAY_INFO,
                },
            }
            session, result = await self._transport.open_session(initialize, headers)
            version = get_version(result.get("protocolVersion"))
            if version is None:
                await session.close()
                raise UpstreamProtocolError("upstream negotiated an unknown protocol version")
            self.note_answer(version)
        except BaseException as exc:
            self.note_failure(exc)
            if counted:
                self._uncount_key(key.credentials)
            raise
        return PooledSession(key, session, version, result, counted=counted)

    async def discard(self, pooled: PooledSession) -> None:
        if self._sessions.get(pooled.key) is pooled:
            del self._sessions[pooled.key]
        self._retired.discard(pooled)
        await self._close(pooled)

    async def _close(self, pooled: PooledSession) -> None:
        self._retired.discard(pooled)
        self._uncount(pooled)  # first: the slot is free even if closing is cut short
        await pooled.listener.aclose()
        with contextlib.suppress(Exception):
            await pooled.session.close()

    def expired(self, stale: PooledSession) -> None:
        """The upstream answered 404 for `stale`'s session id: it forgot that
        session. Only that one is retired (closed when its lease ends): a 404 says
        nothing of the others, which may be alive (the session was closed, or
        expired upstream alone). After a restart each other session meets a 404 of
        its own and is renewed once, transparently (a 404 means the upstream never
        ran the request). A detached session is its holder's to close."""
        if not stale.detached:
            self._retire(stale)

    def _retire(self, pooled: PooledSession) -> None:
        """Out of the map; closed now if idle, else when its last user leaves."""
        if self._sessions.get(pooled.key) is pooled:
            del self._sessions[pooled.key]
        if pooled.in_flight == 0 and pooled.listener.users == 0:
            self._retired.discard(pooled)
            self._spawn(self._close(pooled))
        else:
            self._retired.add(pooled)

    async def renew(
        self, stale: PooledSession, capabilities: Mapping[str, Any], authorization: str | None
    ) -> PooledSession:
        """Replace a session the upstream expired (404) with a fresh, leased one.
        The caller still releases its lease on the stale one."""
        self.expired(stale)
        log.info("upstream_session_expired", upstream_version=stale.version.name)
        return await self.acquire(stale.key, capabilities, authorization)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(min(self._idle_s / 2, 30.0))
            now = time.monotonic()
            for pooled in list(self._sessions.values()):
                idle = pooled.in_flight == 0 and pooled.listener.users == 0
                if idle and now - pooled.last_used > self._idle_s:
                    await self.discard(pooled)
                    log.info("upstream_session_closed_idle", upstream_version=pooled.version.name)
            for pooled in list(self._retired):
                if pooled.in_flight == 0 and pooled.listener.users == 0:
                    await self.discard(pooled)

    async def aclose(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for task in list(self._background):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 2.0)
        openings = list(self._opening.values())
        for opening in openings:  # none may land after this
            opening.cancel()
        if openings:
            await asyncio.wait(openings)
        for pooled in list(self._sessions.values()) + list(self._retired):
            await self.discard(pooled)


def _retrieved(task: asyncio.Task[PooledSession]) -> None:
    # Each caller awaiting the open re-raises its error itself; when none is
    # left, nothing should be logged as "never retrieved".
    if not task.cancelled():
        task.exception()


__all__ = ["PooledSession", "SessionExpired", "SessionKey", "SessionPool", "credential_hash"]
