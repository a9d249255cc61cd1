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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from app import jsonio
from app.front.param_headers import HeaderPaths, annotated_paths
from app.upstream.base import Message, Session, Transport
from app.upstream.errors import PoolExhausted, SessionExpired, UpstreamProtocolError
from app.upstream.listener import SessionListener
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
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _tools: dict[str, HeaderPaths] | None = None
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
        # tools/list_changed invalidates the cache when a GET stream is open;
        # the age bound covers sessions that have none.
        if self._tools is None or time.monotonic() - self._tools_at > TOOLS_CACHE_S:
            async with self._tools_lock:
                if self._tools is None or time.monotonic() - self._tools_at > TOOLS_CACHE_S:
                    self._tools = await self._list_tool_paths()
                    self._tools_at = time.monotonic()
        return self._tools.get(name, ())

    async def _list_tool_paths(self) -> dict[str, HeaderPaths]:
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
                    paths = annotated_paths(tool.get("inputSchema"))
                    if paths:
                        tools[tool["name"]] = paths
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return tools


class SessionPool:
    def __init__(
        self,
        transport: Transport,
        *,
        max_sessions: int,
        idle_s: float,
    ) -> None:
        self._transport = transport
        self._max = max_sessions
        self._idle_s = idle_s
        self._sessions: dict[SessionKey, PooledSession] = {}
        self._opening: dict[SessionKey, asyncio.Future[PooledSession]] = {}
        # Sessions held by one owner each (legacy clients' sessions, app/legacy):
        # not pooled, but counted against MCP_SHIM_MAX_SESSIONS with the pooled ones.
        self._owned = 0
        self._reaper: asyncio.Task[None] | None = None
        # When the upstream last answered (monotonic) and in which version: /readyz.
        self.last_answer: tuple[float, Version] | None = None

    def note_answer(self, version: Version) -> None:
        """The upstream just answered something (a response, even an error)."""
        self.last_answer = (time.monotonic(), version)

    def __len__(self) -> int:
        return len(self._sessions)

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap_idle())

    @staticmethod
    def key_for(
        capabilities: Mapping[str, Any], version: Version, authorization: str | None
    ) -> SessionKey:
        canonical = jsonio.dumps_sorted(capabilities)
        return SessionKey(canonical, version.name, credential_hash(authorization))

    async def acquire(
        self, key: SessionKey, capabilities: Mapping[str, Any], authorization: str | None
    ) -> PooledSession:
        """A session for this key, leased: counted as in use until `release`, so
        neither eviction nor the idle reaper closes it under a call."""
        pooled = self._sessions.get(key)
        if pooled is None:
            pending = self._opening.get(key)
            if pending is not None:
                pooled = await asyncio.shield(pending)
            else:
                pooled = await self._open_once(key, capabilities, authorization)
        pooled.in_flight += 1
        pooled.last_used = time.monotonic()
        return pooled

    def release(self, pooled: PooledSession) -> None:
        pooled.in_flight -= 1
        pooled.last_used = time.monotonic()

    async def _open_once(
        self, key: SessionKey, capabilities: Mapping[str, Any], authorization: str | None
    ) -> PooledSession:
        future: asyncio.Future[PooledSession] = asyncio.get_running_loop().create_future()
        self._opening[key] = future
        try:
            pooled = await self._open(key, capabilities, authorization)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self._opening.pop(key, None)
        future.set_result(pooled)
        return pooled

    async def _open(
        self, key: SessionKey, capabilities: Mapping[str, Any], authorization: str | None
    ) -> PooledSession:
        if len(self._sessions) + self._owned >= self._max:
            await self._evict_one()
        pooled = await self._handshake(key, capabilities, authorization)
        self._sessions[key] = pooled
        log.info(
            "upstream_session_opened",
            upstream_version=pooled.version.name,
            sessions=len(self._sessions),
        )
        return pooled

    async def open_detached(
        self, key: SessionKey, capabilities: Mapping[str, Any], authorization: str | None
    ) -> PooledSession:
        """A fresh session for `key` that the pool neither keeps nor hands to anyone:
        its owner uses it alone and closes it (the MRTR bridge's lanes, app/mrtr/lanes.py)."""
        return await self._handshake(key, capabilities, authorization)

    async def open_owned(
        self,
        key: SessionKey,
        capabilities: Mapping[str, Any],
        authorization: str | None,
        client_info: Mapping[str, Any] | None = None,
    ) -> PooledSession:
        """A fresh session for one owner alone (a legacy client's session), counted
        against MCP_SHIM_MAX_SESSIONS until `close_owned`. When the bound is reached
        an idle pooled session is closed to make room; owned sessions are never
        evicted (their client holds state on them): PoolExhausted instead."""
        if len(self._sessions) + self._owned >= self._max:
            await self._evict_one()
        self._owned += 1
        try:
            pooled = await self._handshake(key, capabilities, authorization, client_info)
        except BaseException:
            self._owned -= 1
            raise
        log.info("upstream_session_opened", upstream_version=pooled.version.name, owned=True)
        return pooled

    async def close_owned(self, pooled: PooledSession) -> None:
        """End a session from `open_owned` (DELETE upstream) and free its place."""
        self._owned -= 1
        await pooled.listener.aclose()
        with contextlib.suppress(Exception):
            await pooled.session.close()

    async def _handshake(
        self,
        key: SessionKey,
        capabilities: Mapping[str, Any],
        authorization: str | None,
        client_info: Mapping[str, Any] | None = None,
    ) -> PooledSession:
        headers = {"authorization": authorization} if authorization is not None else {}
        initialize: Message = {
            "jsonrpc": "2.0",
            "id": "shim-init",
            "method": "initialize",
            "params": {
                "protocolVersion": key.version,
                "capabilities": dict(capabilities),
                "clientInfo": dict(client_info) if client_info is not None else GATEWAY_INFO,
            },
        }
        session, result = await self._transport.open_session(initialize, headers)
        version = get_version(result.get("protocolVersion"))
        if version is None:
            await session.close()
            raise UpstreamProtocolError("upstream negotiated an unknown protocol version")
        self.note_answer(version)
        return PooledSession(key, session, version, result)

    async def _evict_one(self) -> None:
        idle = [p for p in self._sessions.values() if p.in_flight == 0 and p.listener.users == 0]
        if not idle:
            raise PoolExhausted(
                f"all {self._max} upstream sessions are busy; raise MCP_SHIM_MAX_SESSIONS "
                "or retry later"
            )
        victim = min(idle, key=lambda p: p.last_used)
        await self.discard(victim)

    async def discard(self, pooled: PooledSession) -> None:
        if self._sessions.get(pooled.key) is pooled:
            del self._sessions[pooled.key]
        await pooled.listener.aclose()
        with contextlib.suppress(Exception):
            await pooled.session.close()

    async def renew(
        self, stale: PooledSession, capabilities: Mapping[str, Any], authorization: str | None
    ) -> PooledSession:
        """Replace a session the upstream expired (404) with a fresh, leased one.
        The caller still releases its lease on the stale one."""
        if self._sessions.get(stale.key) is stale:
            del self._sessions[stale.key]
        log.info("upstream_session_expired", upstream_version=stale.version.name)
        return await self.acquire(stale.key, capabilities, authorization)

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(min(self._idle_s / 2, 30.0))
            now = time.monotonic()
            for pooled in list(self._sessions.values()):
                idle = pooled.in_flight == 0 and pooled.listener.users == 0
                if idle and now - pooled.last_used > self._idle_s:
                    await self.discard(pooled)
                    log.info("upstream_session_closed_idle", upstream_version=pooled.version.name)

    async def aclose(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for pooled in list(self._sessions.values()):
            await self.discard(pooled)


__all__ = ["PooledSession", "SessionExpired", "SessionKey", "SessionPool", "credential_hash"]
