"""Guest copies of other workers' (replicas') legacy sessions, and the owner's
side of them.

A request carrying a session id another replica owns is relayed there as it
came, except a plain request on a Streamable HTTP upstream: this replica joins
the session (a *guest* copy, from the owner's state) and sends it upstream
itself (`GuestCopies.guest`), on the owner's upstream session. The copy tells
the owner a server request or a call left to resume on the GET stream (the
owner serves what answers them), which copies are in use (a touch: the owner's
idle reaper and bound count that use), and an upstream session found expired.
The owner tells its guests when the session ends (not at shutdown), a
cancellation of a call one of them serves, and an id text an integer id shares
("1") held while its own request of that text is in flight. Each is a sealed
note (app/cluster/notes.py); the owner's sessions themselves are
app/fronts/legacy/sessions.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

import structlog

from app.cluster.notes import Notes
from app.cluster.replicas import OwnedIds, reachable
from app.cluster.session import MAX_PENDING, LegacySession, held_by, shares_integer_text
from app.upstream.sessions.pool import SessionKey, SessionPool, credential_hash
from translators.registry import get_version

log = structlog.get_logger("mcp_shim.legacy")

# Workers (replicas) holding a guest copy of one session: beyond this, the
# next one relays its requests to the owner as before.
_MAX_GUESTS = 64
# Sessions named in one touch note at most, of each kind (used, only asked
# about): the rest in the next ones.
_TOUCH_BATCH = 2000


class SessionBound(Protocol):
    """The legacy front's bound on sessions (app/fronts/legacy/bound.py
    `Limits`), as far as guest copies count against it."""

    @property
    def total(self) -> int: ...

    @property
    def reclaim_idle_s(self) -> float: ...


def _let_go(copy: LegacySession) -> None:
    copy.ended = True
    for released in copy.held.values():
        released.set()
    copy.held.clear()


def _strings(items: Any) -> list[str]:
    return [i for i in items if isinstance(i, str)] if isinstance(items, list) else []


def _bounded_set(table: OrderedDict[str, None], key: str, limit: int) -> None:
    table[key] = None
    table.move_to_end(key)
    while len(table) > limit:
        table.popitem(last=False)


class GuestCopies:
    def __init__(
        self,
        pool: SessionPool,
        *,
        idle_s: float,
        ids: OwnedIds,
        limits: SessionBound,
        notes: Notes | None,
        sessions: Mapping[str, LegacySession],
        end: Callable[[LegacySession, str], Awaitable[None]],
    ) -> None:
        self._pool = pool
        self.ids = ids
        # Guest copies of other replicas' sessions: only where the upstream's
        # sessions can be spoken on from anywhere, and this replica is reachable
        # by the owners' notes.
        self._notes = notes if notes and pool.can_rejoin and reachable(notes.me) else None
        self._guests: OrderedDict[str, LegacySession] = OrderedDict()
        # Sessions whose owner said no (not shareable, unknown): relayed, not asked again.
        self._unshared: OrderedDict[str, None] = OrderedDict()
        self._joining: dict[str, asyncio.Future[LegacySession | None]] = {}
        self._touched_at = 0.0
        self._toucher: asyncio.Task[None] | None = None
        # A guest's call the client cancelled through the owner (LegacyCalls).
        self.on_cancel: Callable[[str, Any], bool] | None = None
        # Waits until no call of (session id, id text) is in flight here (IdTurns).
        self.on_hold: Callable[[str, str], Awaitable[None]] | None = None
        self._releases: set[asyncio.Task[None]] = set()
        self._idle_s = idle_s
        self._limits = limits
        # The owner's sessions (LegacySessions), and its way to end one.
        self._sessions = sessions
        self._end = end

    def start(self) -> None:
        if self._notes is not None:
            self._toucher = asyncio.create_task(self._touch_owners())

    async def aclose(self) -> None:
        if self._toucher is not None:
            self._toucher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._toucher
        self._guests.clear()

    def refuse_joins(self) -> None:
        """Serve no other replica's session here: each is relayed (or its
        connection handed over) to its owner."""
        self._notes = None

    @property
    def joins(self) -> bool:
        """This process may serve other replicas' sessions on guest copies."""
        return self._notes is not None

    async def guest(
        self, session_id: str | None, authorization: str | None, hopped: bool
    ) -> LegacySession | None:
        """A guest copy of another replica's session, to serve a plain request here;
        None: relay it (or answer it) as before."""
        if self._notes is None or session_id is None or hopped or session_id in self._sessions:
            return None
        copy = self._guests.get(session_id)
        if copy is not None:
            if not held_by(copy.credentials, authorization):
                return None  # answered as before: another credential's id is unknown
            self._guests.move_to_end(session_id)
            return copy
        if session_id in self._unshared:
            return None
        credentials = credential_hash(authorization)
        owner = self.ids.elsewhere(session_id, credentials, hopped)
        if owner is None:
            return None
        pending = self._joining.get(session_id)
        if pending is None:
            pending = asyncio.ensure_future(
                self._join(session_id, owner, credentials, authorization)
            )
            self._joining[session_id] = pending
            pending.add_done_callback(lambda _: self._joining.pop(session_id, None))
        copy = await asyncio.shield(pending)
        if copy is None or not held_by(copy.credentials, authorization):
            return None
        return copy

    async def _join(
        self, session_id: str, owner: str, credentials: str, authorization: str | None
    ) -> LegacySession | None:
        assert self._notes is not None
        note = {"k": "join", "s": session_id, "c": credentials, "g": self._notes.me}
        # None: the owner is unreachable; relayed from now on, which says so.
        reply = await self._notes.send(owner, note) or {}
        client_version = get_version(reply.get("v"))
        state = reply.get("state")
        upstream = None
        if client_version is not None and isinstance(state, dict):
            key = SessionKey(b"", str(state.get("w")), credentials)
            upstream = self._pool.rejoin(state, authorization, key)
        # Ended while the answer was on its way (`_forget`): no copy of it.
        if upstream is None or client_version is None or session_id in self._unshared:
            _bounded_set(self._unshared, session_id, self._limits.total)
            return None
        copy = LegacySession(
            session_id,
            credentials,
            client_version,
            upstream,
            owner=owner,
            remembered=self._remember_at_owner,
        )
        for text in _strings(reply.get("held")):
            copy.held[text] = asyncio.Event()
        if self._room_for_guest():
            self._guests[session_id] = copy
        log.info("legacy_session_joined", owner=owner[:200], guests=len(self._guests))
        return copy

    def _room_for_guest(self) -> bool:
        """At MCP_SHIM_MAX_LEGACY_SESSIONS copies, the least recently used idle one
        is forgotten (it costs a join again, nothing upstream); with all busy, the
        new copy serves its request without being kept."""
        if len(self._guests) < self._limits.total:
            return True
        for session_id, copy in self._guests.items():
            if copy.in_flight == 0:
                del self._guests[session_id]
                _let_go(copy)
                return True
        return False

    async def _remember_at_owner(
        self, copy: LegacySession, kind: str, request_id: Any, method: str
    ) -> None:
        if self._notes is not None and copy.owner is not None and not copy.ended:
            note = {"k": "remember", "s": copy.id, "w": kind, "i": request_id, "m": method}
            await self._notes.send(copy.owner, note)

    async def answer_note(self, body: bytes) -> bytes | None:
        """Another replica's note (app/cluster/notes.py), answered sealed; None:
        not a note of this deployment."""
        notes = self._notes
        if notes is None:
            return None
        note = notes.open(body)
        if note is None:
            return None
        kind = note.get("k")
        reply: dict[str, Any] = {}
        if kind == "join":
            reply = self._joined(note)
        elif kind == "touch":
            reply = self._touched(note.get("ids"), note.get("check"))
        elif kind == "end":
            self._forget(note.get("ids"))
        elif kind == "expired":
            session = self._sessions.get(str(note.get("s")))
            if session is not None:
                await self._end(session, "upstream_session_expired")
        elif kind == "remember":
            self._remembered(note)
        elif kind == "cancel" and self.on_cancel is not None:
            self.on_cancel(str(note.get("s")), note.get("i"))
        elif kind in ("hold", "release"):
            await self._guest_hold(kind, note)
        return notes.seal_reply(reply)

    async def _guest_hold(self, kind: str, note: Mapping[str, Any]) -> None:
        """The owner sends a request of this id text upstream (`held_elsewhere`):
        answered once none of this text is in flight here, and none starts until
        the owner's `release` (while fewer than MAX_PENDING texts are held on the
        copy)."""
        copy = self._guests.get(str(note.get("s")))
        text = note.get("t")
        if copy is None or not isinstance(text, str):
            return
        if kind == "release":
            released = copy.held.pop(text, None)
            if released is not None:
                released.set()
            return
        if len(copy.held) < MAX_PENDING:
            copy.held.setdefault(text, asyncio.Event())
        if self.on_hold is not None:
            await self.on_hold(copy.id, text)

    @contextlib.asynccontextmanager
    async def held_elsewhere(self, session: LegacySession, request_id: Any) -> AsyncIterator[None]:
        """At the owner, around a request whose id text an integer id has too ("1"):
        the workers with a copy send no request of that text upstream meanwhile,
        as IdTurns keeps them apart in one process (the SDK 1.x server routes each
        answer by the id's text)."""
        text = request_id if shares_integer_text(request_id) else None
        if text is None or session.owner is not None or not session.guests:
            yield
            return
        session.holds[text] += 1
        try:
            if session.holds[text] == 1:
                hold = {"k": "hold", "s": session.id, "t": text}
                await self.tell_guests(session, hold, as_long_as_a_call=True)
            yield
        finally:
            session.holds[text] -= 1
            if session.holds[text] <= 0:
                del session.holds[text]
                # Sent even when the call was cut short (its client went away).
                release = {"k": "release", "s": session.id, "t": text}
                task = asyncio.ensure_future(self.tell_guests(session, release))
                self._releases.add(task)
                task.add_done_callback(self._releases.discard)

    async def tell_guests(
        self, session: LegacySession, note: dict[str, Any], *, as_long_as_a_call: bool = False
    ) -> None:
        notes = self._notes
        if notes is not None and session.guests:
            await asyncio.gather(
                *(
                    notes.send(g, note, as_long_as_a_call=as_long_as_a_call)
                    for g in list(session.guests)
                )
            )

    def _joined(self, note: Mapping[str, Any]) -> dict[str, Any]:
        """The state a replica needs to serve a session's plain requests itself."""
        session = self._sessions.get(str(note.get("s")))
        guest = note.get("g")
        if session is None or session.credentials != note.get("c") or not isinstance(guest, str):
            return {}
        if not reachable(guest) or (
            guest not in session.guests and len(session.guests) >= _MAX_GUESTS
        ):
            return {}
        state = self._pool.shared_state(session.upstream)
        if state is None:
            return {}
        session.guests.add(guest)
        session.last_used = time.monotonic()
        return {"v": session.client_version.name, "state": state, "held": list(session.holds)}

    def _touched(self, used: Any, unused: Any) -> dict[str, Any]:
        """`used` elsewhere since the last touch: the idle clock starts again. The
        sessions no longer here, used or not, are named back (`gone`), to be
        forgotten there; and the id texts held of those in use (`held`), so a
        release that was lost is not waited for beyond the next touch."""
        now, gone, held = time.monotonic(), [], {}
        for session_id in _strings(used):
            session = self._sessions.get(session_id)
            if session is None:
                gone.append(session_id)
                continue
            session.last_used = max(session.last_used, now)
            session.used_elsewhere = now
            if session.holds:
                held[session_id] = list(session.holds)
        gone += [i for i in _strings(unused) if i not in self._sessions]
        return {"gone": gone, "held": held}

    def _remembered(self, note: Mapping[str, Any]) -> None:
        session = self._sessions.get(str(note.get("s")))
        method = note.get("m")
        if session is None or not isinstance(method, str):
            return
        if note.get("w") == "server":
            session.remember_server_request(note.get("i"), method)
        else:
            session.remember_request(note.get("i"), method)

    async def spread_cancel(self, session: LegacySession, request_id: Any) -> None:
        """A cancellation of a call this process does not serve: to the guests."""
        await self.tell_guests(session, {"k": "cancel", "s": session.id, "i": request_id})

    async def _touch_owners(self) -> None:
        """Every few seconds, the owners hear which of their sessions were used here
        (or are in use): their idle reaper and the bound's reclaim count that use."""
        while True:
            await asyncio.sleep(self.touch_period)
            with contextlib.suppress(Exception):
                await self._touch_once()

    @property
    def touch_period(self) -> float:
        """How often the owners hear of their copies' use here."""
        return min(max(min(self._idle_s, self._limits.reclaim_idle_s) / 4, 0.2), 10.0)

    async def _touch_once(self) -> None:
        assert self._notes is not None
        since, self._touched_at = self._touched_at, time.monotonic()
        # Per owner: the copies used since the last touch (or in use), and the others,
        # only asked about (a restarted owner no longer has them).
        by_owner: dict[str, tuple[list[str], list[str]]] = {}
        # A copy idle as long as its owner's reaper waits is forgotten here: the
        # session may well be gone, and if not, using it again costs a join.
        stale = self._touched_at - self._idle_s
        for copy in [c for c in self._guests.values() if not c.in_flight and c.last_used < stale]:
            del self._guests[copy.id]
            _let_go(copy)
        for copy in self._guests.values():
            if copy.owner is not None:
                used, unused = by_owner.setdefault(copy.owner, ([], []))
                (used if copy.in_flight or copy.last_used >= since else unused).append(copy.id)
        for owner, (used, unused) in by_owner.items():
            for start in range(0, max(len(used), len(unused)), _TOUCH_BATCH):
                end = start + _TOUCH_BATCH
                note = {"k": "touch", "ids": used[start:end], "check": unused[start:end]}
                reply = await self._notes.send(owner, note) or {}
                self._forget(reply.get("gone"))
                self._release_lost(used[start:end], reply.get("held"))

    def _release_lost(self, ids: list[str], held: Any) -> None:
        """Texts the owner no longer holds on these copies: a release that was lost."""
        held = held if isinstance(held, dict) else {}
        for session_id in ids:
            copy = self._guests.get(session_id)
            if copy is None:
                continue
            still = set(_strings(held.get(session_id)))
            for text in [t for t in copy.held if t not in still]:
                copy.held.pop(text).set()

    def _forget(self, ids: Any) -> None:
        """Guest copies of sessions their owner ended: a next request is relayed; a
        call waiting for the owner's release of an id text waits no longer."""
        for session_id in _strings(ids):
            # Relayed from now on (the owner answers 404), even a join on its way.
            _bounded_set(self._unshared, session_id, self._limits.total)
            if session_id in self._guests:
                _let_go(self._guests.pop(session_id))

    async def leave(self, copy: LegacySession, reason: str) -> None:
        """A guest copy ended here (`LegacySessions.end`): forgotten; its owner,
        which ends the session, told if the upstream session expired."""
        if self._guests.get(copy.id) is copy:
            del self._guests[copy.id]
        _let_go(copy)
        if reason == "upstream_session_expired" and self._notes is not None:
            assert copy.owner is not None
            await self._notes.send(copy.owner, {"k": "expired", "s": copy.id})
        log.info("legacy_session_left", reason=reason, guests=len(self._guests))
