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
sealed (`OwnedIds`, app/replicas.py); it is bound to the SHA-256 of the
caller's `Authorization`: presented with another credential it is unknown
(404). A request carrying an id another replica owns is relayed there as it
came (`LegacyFront`, `HttpSseFront`), except a plain request on a Streamable
HTTP upstream: the replica joins the session (a *guest* copy, from the
owner's state: app/fronts/legacy/notes.py) and sends it upstream itself.
When the upstream forgets its session the client's session ends too (404,
the client initialises again): never a silent new upstream session under a
client that holds state on the old one.

These sessions have their own bound and per-credential share, apart from the
pooled sessions modern callers use; at the bound an idle one may be ended to
make room (app/fronts/legacy/bound.py), its client then gets 404 as for any session
that expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from app.fronts.legacy import bound
from app.fronts.legacy.notes import Notes
from app.fronts.shared.binding import held_by
from app.replicas import OwnedIds, reachable
from app.upstream.errors import PoolExhausted, SessionShareExceeded
from app.upstream.pool import PooledSession, SessionKey, SessionPool, credential_hash
from translators.registry import Version, get_version

log = structlog.get_logger("mcp_shim.legacy")

# Requests waiting for an answer, per session and direction: beyond this the
# oldest is forgotten (its answer then passes untranslated).
_MAX_PENDING = 256
# Workers (replicas) holding a guest copy of one session: beyond this, the
# next one relays its requests to the owner as before.
_MAX_GUESTS = 64
# Sessions named in one touch note at most (the rest in the next ones).
_TOUCH_BATCH = 2000

# What str() of an integer id gives: a string id with this text goes upstream
# from the owner only (IdTurns keeps it and the integer one apart there).
_NUMBER_TEXT = re.compile(r"0|-?[1-9][0-9]*")


def shares_integer_text(request_id: Any) -> bool:
    """A string id whose text an integer id has too ("1" and 1)."""
    return isinstance(request_id, str) and _NUMBER_TEXT.fullmatch(request_id) is not None


# A guest's way to tell the owner a server request (or a call left to resume
# on the GET stream) its client will answer there: kind, request id, method.
Remembered = Callable[["LegacySession", str, Any, str], Awaitable[None]]


@dataclass(eq=False)
class LegacySession:
    id: str
    credentials: str
    client_version: Version
    upstream: PooledSession
    last_used: float = field(default_factory=time.monotonic)
    in_flight: int = 0  # leases held: requests and GET streams
    streams: int = 0  # GET streams among them
    # The owner's: when a guest copy last said it was used (a touch), since a
    # request may run there unseen here.
    used_elsewhere: float = -math.inf
    ended: bool = False
    # Requests the upstream sent the client, by id: their method, so the
    # client's answer is translated as the result of that method.
    server_requests: dict[Any, str] = field(default_factory=dict)
    # The client's requests not answered yet, by id: their method, so a response
    # the upstream replays on the GET stream (Last-Event-ID) is translated too.
    open_requests: dict[Any, str] = field(default_factory=dict)
    # A guest copy: the replica owning the session (app/fronts/legacy/notes.py),
    # told what only it can serve; None: the session is this process's own.
    owner: str | None = None
    remembered: Remembered | None = None
    # The owner's: the replicas holding a guest copy, told when it ends.
    guests: set[str] = field(default_factory=set)
    # Id texts an integer id could share ("1") in flight at the owner, which the
    # guests must not send upstream meanwhile (IdTurns across workers): counted
    # at the owner, waited on (until released) in a guest copy.
    holds: Counter[str] = field(default_factory=Counter)
    held: dict[str, asyncio.Event] = field(default_factory=dict)

    @property
    def upstream_version(self) -> Version:
        return self.upstream.version

    def remember_server_request(self, request_id: Any, method: str) -> None:
        _bounded_put(self.server_requests, request_id, method)

    def remember_request(self, request_id: Any, method: str) -> None:
        _bounded_put(self.open_requests, request_id, method)

    async def tell_owner(self, kind: str, request_id: Any, method: str) -> None:
        """A guest copy's server request (`server`) or call to resume on the GET
        stream (`open`), told to the owner, which serves what answers them."""
        if self.remembered is not None:
            await self.remembered(self, kind, request_id, method)


class _Lease:
    """`LegacySessions.lease`: a class rather than a generator-based context
    manager, since every legacy call takes one (a generator costs more to enter
    and leave)."""

    __slots__ = ("_session", "_stream")

    def __init__(self, session: LegacySession, stream: bool) -> None:
        self._session = session
        self._stream = stream

    async def __aenter__(self) -> LegacySession:
        self._session.in_flight += 1
        self._session.streams += self._stream
        self._session.last_used = time.monotonic()
        return self._session

    async def __aexit__(self, *_exc: object) -> None:
        self._session.in_flight -= 1
        self._session.streams -= self._stream
        self._session.last_used = time.monotonic()


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


def _bounded_put(table: dict[Any, str], key: Any, method: str) -> None:
    if key not in table and len(table) >= _MAX_PENDING:
        table.pop(next(iter(table)))
    table[key] = method


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
        # From the settings (Settings.legacy_session_share holds the default share).
        self._limits = limits
        self._sessions: dict[str, LegacySession] = {}
        # Sessions being opened (counted from the start of their initialize), and
        # every session held, opened or being opened, per credential hash.
        self._opening: Counter[str] = Counter()
        self._held: Counter[str] = Counter()
        self._reaper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def held(self) -> int:
        """Sessions counted against MCP_SHIM_MAX_LEGACY_SESSIONS: open or being opened."""
        return len(self._sessions) + self._opening.total()

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap_idle())
        if self._notes is not None:
            self._toucher = asyncio.create_task(self._touch_owners())

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

    # -- guest copies of other replicas' sessions (app/fronts/legacy/notes.py) ----

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
        """Another replica's note (app/fronts/legacy/notes.py), answered sealed; None:
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
                await self.end(session, "upstream_session_expired")
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
        the owner's `release`."""
        copy = self._guests.get(str(note.get("s")))
        text = note.get("t")
        if copy is None or not isinstance(text, str):
            return
        if kind == "release":
            released = copy.held.pop(text, None)
            if released is not None:
                released.set()
            return
        if len(copy.held) < _MAX_PENDING:
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
                await self._tell_guests(session, hold, as_long_as_a_call=True)
            yield
        finally:
            session.holds[text] -= 1
            if session.holds[text] <= 0:
                del session.holds[text]
                # Sent even when the call was cut short (its client went away).
                release = {"k": "release", "s": session.id, "t": text}
                task = asyncio.ensure_future(self._tell_guests(session, release))
                self._releases.add(task)
                task.add_done_callback(self._releases.discard)

    async def _tell_guests(
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
        await self._tell_guests(session, {"k": "cancel", "s": session.id, "i": request_id})

    async def _touch_owners(self) -> None:
        """Every few seconds, the owners hear which of their sessions were used here
        (or are in use): their idle reaper and the bound's reclaim count that use."""
        while True:
            await asyncio.sleep(self._touch_period)
            with contextlib.suppress(Exception):
                await self._touch_once()

    @property
    def _touch_period(self) -> float:
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

    def lease(self, session: LegacySession, *, stream: bool = False) -> _Lease:
        """Counted as in use while held (`stream`: a GET stream): the idle reaper
        and the bound leave it alone."""
        return _Lease(session, stream)

    async def end(self, session: LegacySession, reason: str) -> None:
        """End both sides: forget the id, close the upstream session (DELETE), and
        tell the replicas holding a guest copy before returning. A guest copy is
        only forgotten here; its owner ends the session (told when it expired)."""
        if session.ended:
            return
        session.ended = True
        if session.owner is not None:
            await self._end_copy(session, reason)
            return
        if self._sessions.pop(session.id, None) is not None:
            self._uncount(session.credentials)  # first: the place is free at once
        # Not at shutdown: the sibling workers stop too, and a stopped worker's
        # listener (kept by the supervisor) would hold each note for its whole
        # timeout. The upstream's 404 for the DELETEd session ends the copies.
        if reason != "shutdown":
            await self._tell_guests(session, {"k": "end", "ids": [session.id]})
        await self._pool.close_owned(session.upstream)
        log.info("legacy_session_ended", reason=reason, sessions=len(self._sessions))

    async def _end_copy(self, copy: LegacySession, reason: str) -> None:
        if self._guests.get(copy.id) is copy:
            del self._guests[copy.id]
        _let_go(copy)
        if reason == "upstream_session_expired" and self._notes is not None:
            assert copy.owner is not None
            await self._notes.send(copy.owner, {"k": "expired", "s": copy.id})
        log.info("legacy_session_left", reason=reason, guests=len(self._guests))

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
        if now - session.used_elsewhere < 2 * self._touch_period:
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
        for task in (self._reaper, self._toucher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._guests.clear()
        for session in list(self._sessions.values()):
            await self.end(session, "shutdown")
