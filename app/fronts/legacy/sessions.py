"""The gateway's own sessions for legacy clients.

A legacy client negotiates a session with the gateway at `initialize`; the
gateway answers with its own `Mcp-Session-Id` and holds one upstream session
(through the upstream seam: `SessionPool.open_owned`) for that client alone,
opened with the client's capabilities. Nothing else ever runs on it, so what
the client sets there (log level, subscriptions) stays its own, and the
client's JSON-RPC ids can be the upstream session's ids unchanged: the
identity is the id mapping, and it keeps cancellation, progress tokens and
`Last-Event-ID` resumption exact.

The id holds 256 random bits and names the replica that owns the session,
sealed (`OwnedIds`, app/cluster/replicas.py); it is bound to the SHA-256 of the
caller's `Authorization`: presented with another credential it is unknown
(404). A request carrying an id another replica owns is relayed there as it
came (`LegacyFront`, `HttpSseFront`), except a plain request on a Streamable
HTTP upstream: the replica joins the session (a *guest* copy, from the
owner's state: app/cluster/guests.py) and sends it upstream itself.
When the upstream forgets its session the client's session ends too (404,
the client initialises again): never a silent new upstream session under a
client that holds state on the old one.

These sessions have their own bound and per-credential share, apart from the
pooled sessions modern callers use; at the bound an idle one may be ended to
make room (app/fronts/legacy/bound.py), its client then gets 404 as for any session
that expired. One session's record and lease are app/cluster/session.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import structlog

from app.cluster.guests import GuestCopies
from app.cluster.notes import Notes
from app.cluster.replicas import OwnedIds
from app.cluster.session import LegacySession, held_by
from app.fronts.legacy import bound
from app.upstream.errors import PoolExhausted, SessionShareExceeded
from app.upstream.sessions.pool import SessionPool, credential_hash
from translators.registry import Version

log = structlog.get_logger("mcp_shim.legacy")


class LegacySessions:
    def __init__(
        self,
        pool: SessionPool,
        *,
        idle_s: float,
        ids: OwnedIds,
        limits: bound.Limits,
        notes: Notes | None = None,
    ) -> None:
        self._pool = pool
        self.ids = ids
        self._idle_s = idle_s
        # From the settings (Settings.legacy_session_share holds the default share).
        self._limits = limits
        self._sessions: dict[str, LegacySession] = {}
        # Sessions being opened (counted from the start of their initialize), and
        # every session held, opened or being opened, per credential hash.
        self._opening: Counter[str] = Counter()
        self._held: Counter[str] = Counter()
        self._reaper: asyncio.Task[None] | None = None
        # Guest copies of other replicas' sessions (app/cluster/guests.py).
        self.copies = GuestCopies(
            pool,
            idle_s=idle_s,
            ids=ids,
            limits=limits,
            notes=notes,
            sessions=self._sessions,
            end=self.end,
        )

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    @property
    def held(self) -> int:
        """Sessions counted against MCP_SHIM_MAX_LEGACY_SESSIONS: open or being opened."""
        return len(self._sessions) + self._opening.total()

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap_idle())
        self.copies.start()

    async def open(
        self,
        client_version: Version,
        upstream_caps: Mapping[str, Any],
        offered: Version,
        authorization: str | None,
        client_info: Mapping[str, Any] | None,
    ) -> LegacySession:
        key = self._pool.key_for(upstream_caps, offered, authorization)
        credentials = credential_hash(authorization)
        await self._make_room(credentials)
        # Counted from here; no await between the room made and the count.
        self._opening[credentials] += 1
        self._held[credentials] += 1
        opened: LegacySession | None = None

        async def end_for_room() -> bool:
            # The upstream transport needs the room its session holds (a stdio
            # process): ended as at the share, if idle.
            now = time.monotonic()
            if opened is None or self._busy(opened, now):
                return False
            log.info("legacy_session_reclaimed", idle_s=round(now - opened.last_used, 1))
            await self.end(opened, "reclaimed")
            return True

        try:
            upstream = await self._pool.open_owned(key, authorization, client_info, end_for_room)
        except BaseException:
            self._uncount(credentials)
            raise
        finally:
            self._opening[credentials] -= 1
            if self._opening[credentials] <= 0:
                del self._opening[credentials]
        session = LegacySession(self.ids.mint(credentials), credentials, client_version, upstream)
        self._sessions[session.id] = session
        opened = session
        log.info(
            "legacy_session_opened",
            client_version=client_version.name,
            upstream_version=upstream.version.name,
            sessions=len(self._sessions),
        )
        return session

    def find(self, session_id: str, authorization: str | None) -> LegacySession | None:
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if not held_by(session.credentials, authorization):
            log.warning("legacy_session_refused", reason="credential_mismatch")
            return None
        return session

    def elsewhere(
        self, session_id: str | None, authorization: str | None, hopped: bool
    ) -> str | None:
        """The replica owning a session that is not here, if it is to be relayed there."""
        if session_id is None or session_id in self._sessions:
            return None
        return self.ids.elsewhere(session_id, credential_hash(authorization), hopped)

    async def end(self, session: LegacySession, reason: str) -> None:
        """End both sides: forget the id, tell the replicas holding a guest copy
        (not at shutdown), and close the upstream session (DELETE). A guest copy is
        only forgotten here; its owner ends the session (told when it expired)."""
        if session.ended:
            return
        session.ended = True
        if session.owner is not None:
            await self.copies.leave(session, reason)
            return
        if self._sessions.pop(session.id, None) is not None:
            self._uncount(session.credentials)  # first: the place is free at once
        # Not at shutdown: the sibling workers stop too, and a stopped worker's
        # listener (kept by the supervisor) would hold each note for its whole
        # timeout. The upstream's 404 for the DELETEd session ends the copies.
        if reason != "shutdown":
            await self.copies.tell_guests(session, {"k": "end", "ids": [session.id]})
        await self._pool.close_owned(session.upstream)
        log.info("legacy_session_ended", reason=reason, sessions=len(self._sessions))

    def _uncount(self, credentials: str) -> None:
        self._held[credentials] -= 1
        if self._held[credentials] <= 0:
            del self._held[credentials]

    async def _make_room(self, credentials: str) -> None:
        """Return when a session for `credentials` fits, having ended idle sessions to
        make room if need be (app/fronts/legacy/bound.py); else raise SessionShareExceeded
        (429) or PoolExhausted (503), with the seconds to wait."""
        limits = self._limits
        while self._held[credentials] >= limits.share or self.held >= limits.total:
            now = time.monotonic()
            live = list(self._sessions.values())
            held = [self._held_now(s, now) for s in live]
            held += [
                bound.Held(c, None, bound.OPENING)
                for c, n in self._opening.items()
                for _ in range(n)
            ]
            decision = bound.decide(held, credentials, limits)
            if isinstance(decision, bound.Reclaim):
                victim = live[decision.index]
                log.info("legacy_session_reclaimed", idle_s=round(now - victim.last_used, 1))
                await self.end(victim, "reclaimed")
                continue
            if isinstance(decision, bound.Refuse):
                raise self._refusal(decision)
            return

    def _busy(self, session: LegacySession, now: float) -> str:
        """What keeps `session` busy ("": idle), so it is not ended for room. A
        guest copy's request is unseen here: a copy used within two of its
        touch periods may have one under way."""
        if session.streams:
            return bound.STREAM
        if session.in_flight:
            return bound.REQUEST
        if now - session.used_elsewhere < 2 * self.copies.touch_period:
            return bound.ELSEWHERE
        return ""

    def _held_now(self, session: LegacySession, now: float) -> bound.Held:
        busy = self._busy(session, now)
        return bound.Held(session.credentials, None if busy else now - session.last_used, busy)

    def _refusal(self, refused: bound.Refuse) -> PoolExhausted:
        limits = self._limits
        if refused.share:
            log.warning(
                "session_share_exceeded",
                limit=limits.share,
                setting="MCP_SHIM_MAX_LEGACY_SESSIONS_PER_CREDENTIAL",
                holding=refused.holding,
            )
            return SessionShareExceeded(
                f"this caller's credentials already hold {limits.share} legacy sessions, "
                f"all busy: {refused.holding} (MCP_SHIM_MAX_LEGACY_SESSIONS_PER_CREDENTIAL); "
                "retry later",
                refused.retry_after_s,
            )
        log.warning(
            "session_pool_exhausted", limit=limits.total, setting="MCP_SHIM_MAX_LEGACY_SESSIONS"
        )
        return PoolExhausted(
            f"all {limits.total} legacy sessions are in use, none idle for "
            f"{limits.reclaim_idle_s:g} s; raise MCP_SHIM_MAX_LEGACY_SESSIONS or retry later",
            refused.retry_after_s,
        )

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(min(self._idle_s / 2, 30.0))
            now = time.monotonic()
            for session in list(self._sessions.values()):
                if session.in_flight == 0 and now - session.last_used > self._idle_s:
                    await self.end(session, "idle")

    async def aclose(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await self.copies.aclose()
        for session in list(self._sessions.values()):
            await self.end(session, "shutdown")
