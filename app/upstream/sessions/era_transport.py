"""The upstream seam, by era: legacy Streamable HTTP sessions or stateless
modern ones (app/upstream/modern/session.py), whichever the upstream speaks.

`EraTransport` is what the pool opens sessions with. It asks `EraProbe` for
the upstream's era and opens the session of that era; if a legacy handshake is
refused, the era is probed again (a server redeployed as modern) before the
refusal stands. Legacy sessions are watched: an HTTP 400 with a JSON-RPC error
under the request's id is what a modern server answers a session's request
with, so the era is probed again then too (`EraProbe.recheck`, the decision the
pass-through and the modern sessions make), and if it changed the request fails as `SessionExpired`
(the upstream never ran it): the gateway's callers already open a new session
for that, which is now a modern one, and a legacy client initialises again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import structlog

from app.call import Message
from app.upstream.base import Exchange, Session, Shareable
from app.upstream.errors import (
    SessionExpired,
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamHttpError,
    UpstreamProtocolError,
)
from app.upstream.modern.transport import ModernTransport
from app.upstream.modern.upstream import ModernHttpUpstream
from app.upstream.sessions.era import Era, EraProbe
from app.upstream.sessions.pool import SessionPool
from app.upstream.streamable_http.transport import HttpExchange, StreamableHttpTransport

log = structlog.get_logger("mcp_shim.era")

# The start-up line waits this long at most for the first probe.
FIRST_PROBE_S = 5.0


async def era_for(probe: EraProbe, authorization: str | None) -> Era | None:
    """The era to serve a call in; None when it cannot be told now (the
    upstream is unreachable or wants credentials): the legacy path then
    serves the call and reports the failure as it always did."""
    known = probe.known
    if known is not None:
        return known
    try:
        return await probe.current(authorization)
    except UpstreamError:
        return None


def describe(probe: EraProbe, pool: SessionPool | None) -> dict[str, Any]:
    """The era and the protocol version in use, as last seen (no probe)."""
    era = probe.known
    if era is None:
        return {"era": None, "protocol_version": None, "era_source": None}
    body = era.describe()
    if era.name == "modern":
        body["legacy_handshake"] = probe.legacy_handshake
    if era.name == "legacy" and pool is not None and pool.last_answer is not None:
        body["protocol_version"] = pool.last_answer[1].name
    return body


async def first_look(probe: EraProbe, pool: SessionPool) -> dict[str, Any]:
    """Probe once at start-up, so the start-up line says what the upstream
    speaks. The version of a legacy upstream is known once a handshake
    negotiated it (then /healthz shows it); nothing is opened for the line."""
    try:
        async with asyncio.timeout(FIRST_PROBE_S):
            await probe.current()
    except UpstreamAuthChallenge:
        # A protected upstream answers, only not to the gateway's own probe.
        log.info("upstream_era_unknown", reason="the upstream asks for credentials")
    except (UpstreamError, TimeoutError) as exc:
        # Most often a wrong URL or a server not started: worth an operator's look.
        log.warning("upstream_era_unknown", reason=getattr(exc, "message", "timed out"))
    return {f"upstream_{k}": v for k, v in describe(probe, pool).items()}


class _WatchedSession:
    """A legacy session that notices the upstream turned modern under it."""

    def __init__(
        self, inner: Session, probe: EraProbe, seen: Era, authorization: str | None
    ) -> None:
        self._inner = inner
        self._probe = probe
        self._seen = seen
        self._authorization = authorization
        self.session_id = inner.session_id
        self.version = getattr(inner, "version", None)

    async def request(self, message: Message) -> Exchange:
        exchange = await self._inner.request(message)
        status = getattr(exchange, "status", 200)
        # A modern server answers a session's request with 400 and a JSON-RPC
        # error under the request's id; a legacy one's own refusals do not.
        if status == 400 and not self._probe.fixed and isinstance(exchange, HttpExchange):
            era = await self._probe.recheck(
                self._seen,
                status,
                await exchange.peek(),
                message.get("id"),
                message.get("method"),
                self._authorization,
            )
            if era.name == "modern":
                await exchange.aclose()
                raise SessionExpired("the upstream now speaks the modern era")
        return exchange

    async def notify(self, message: Message) -> None:
        await self._inner.notify(message)

    async def respond(self, message: Message) -> None:
        await self._inner.respond(message)

    async def listen(self, last_event_id: str | None = None) -> Exchange:
        return await self._inner.listen(last_event_id)

    async def close(self) -> None:
        await self._inner.close()

    def shared_state(self) -> dict[str, Any] | None:
        inner = self._inner
        state = inner.shared_state() if isinstance(inner, Shareable) else None
        return None if state is None else {**state, "watched": True}


class EraTransport:
    def __init__(
        self, legacy: StreamableHttpTransport, modern: ModernHttpUpstream, probe: EraProbe
    ) -> None:
        self._legacy = legacy
        self._modern = ModernTransport(modern, probe)
        self._probe = probe

    async def open_session(
        self, initialize: Message, headers: Mapping[str, str]
    ) -> tuple[Session, Message]:
        authorization = headers.get("authorization")
        try:
            era = await self._probe.current(authorization)
        except UpstreamAuthChallenge:
            era = Era("legacy")  # the handshake below relays the challenge
        if era.name == "modern":
            return await self._modern_era_session(initialize, headers)
        try:
            session, result = await self._legacy.open_session(initialize, headers)
        except (UpstreamProtocolError, UpstreamHttpError):
            if self._probe.fixed:
                raise
            now = await self._probe.reprobe(authorization, seen=self._probe.known or era)
            if now.name != "modern":
                raise
            return await self._modern.open_session(initialize, headers)
        return _WatchedSession(session, self._probe, era, authorization), result

    async def _modern_era_session(
        self, initialize: Message, headers: Mapping[str, str]
    ) -> tuple[Session, Message]:
        """A dual-era upstream serves a legacy client in its own era, with no
        translation: its handshake is tried once, and remembered until the next
        probe; a modern-only one gets the stateless session."""
        probe = self._probe
        if probe.legacy_handshake is not False:
            try:
                session, result = await self._legacy.open_session(initialize, headers)
            except (UpstreamProtocolError, UpstreamHttpError):
                probe.legacy_handshake = False
            else:
                if probe.legacy_handshake is None:
                    log.info("upstream_dual_era", legacy_version=result.get("protocolVersion"))
                probe.legacy_handshake = True
                return session, result
        return await self._modern.open_session(initialize, headers)

    def rejoin(self, state: Mapping[str, Any], authorization: str | None) -> Session | None:
        """A legacy session another worker opened (`shared_state`): watched as its
        opener watches it, when it was."""
        session = self._legacy.rejoin(state, authorization)
        if session is None or state.get("watched") is not True:
            return session
        known = self._probe.known
        seen = known if known is not None and known.name == "legacy" else Era("legacy")
        return _WatchedSession(session, self._probe, seen, authorization)

    async def fetch_document(self, url: str, *, max_bytes: int) -> Any:
        return await self._legacy.fetch_document(url, max_bytes=max_bytes)

    async def aclose(self) -> None:
        await self._legacy.aclose()
