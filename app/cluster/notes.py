"""The small notes the workers (replicas) send each other about legacy sessions.

A legacy client's plain requests on a Streamable HTTP upstream need nothing of
the worker that opened the session but the upstream session's id and the two
versions, so another worker serves them itself: it *joins* the session once
(asking its owner for that state) and from then on speaks to the upstream
directly. What keeps the session one session is these notes, never a
request's relay:

- `join` (a worker to the owner): the owner answers with the upstream
  session's state, and from then on knows that worker holds a copy;
- `touch` (a worker to the owner, every few seconds while it uses copies): the
  owner's idle clock, which ends idle sessions and makes room at the bound,
  counts the other workers' use; the owner answers with the sessions it no
  longer has, which the worker forgets, and the id texts it holds (`hold`);
- `end` (the owner to the workers that joined): the session ended (DELETE,
  idle, reclaimed, expired); they forget their copy before the client's
  DELETE is answered;
- `expired` (a worker to the owner): the upstream answered 404 for it;
- `remember` (a worker to the owner): a server request met on a call (the
  client answers it with a POST, relayed to the owner) or a call left to be
  resumed on the GET stream (the owner's), so the owner translates them;
- `cancel` (the owner to the workers that joined): a client's
  `notifications/cancelled` for a call one of them serves;
- `hold`, `release` (the owner to the workers that joined): a request of an id
  text an integer id shares ("1") is in flight at the owner, and is no longer;
  meanwhile they send none of that text upstream (`IdTurns` across workers).

Each note is sealed with the state key (app/cluster/sealing.py, its own purpose):
only a replica of this deployment can send one or read its answer, and the
upstream session id it carries is never readable on the wire.

A sealed note could still be captured on the way and sent again: a `cancel`
ending a later call of the same id, an `end` or `expired` repeated. So each
note and each answer carries, under the seal, when it was sealed, and is
opened only within NOTE_LIFETIME_S of that; and a note is opened once: the
nonces of those opened within their lifetime are kept (at most
_MAX_SEEN_NOTES; beyond, the oldest is forgotten, so a flood of real notes
can only shorten the window, never grow memory). Answers are not kept: one
is read only on the connection of the note it answers.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

import structlog

from app import jsonio
from app.cluster.replicas import MAX_NOTE_BYTES, ReplicaRelay
from app.cluster.sealing import Sealer, sealed_nonce
from app.connection.busy import RateLimitedLog

log = structlog.get_logger("mcp_shim.legacy")

# v2: sealed with the time it was sealed (v1 notes, which had none, never open).
_PURPOSE: Final = b"mcp-shim legacy note v2"
_REPLY_PURPOSE: Final = b"mcp-shim legacy note reply v2"
# A note is small and between replicas: one that takes longer is as good as lost.
NOTE_TIMEOUT_S: Final = 5.0
# How far the replicas' wall clocks may disagree (they are separate machines,
# each kept by NTP to within milliseconds; this leaves room for one that drifted).
CLOCK_SKEW_S: Final = 5.0
# A note (or answer) sealed longer ago than this is refused. A note is opened as
# it arrives and its sender gives up on it after NOTE_TIMEOUT_S (a `hold`'s
# sender waits longer, for the answer, which is sealed when it is sent): one
# older than that is one its sender counts as lost, or a captured one sent
# again. Plus the clocks' disagreement, either way.
NOTE_LIFETIME_S: Final = NOTE_TIMEOUT_S + CLOCK_SKEW_S
# Nonces of the notes opened within their lifetime. The busiest note traffic
# (a `hold` and a `release` per call of an id that shares an integer's text on
# a shared session, a touch per worker every few seconds) stays far below
# this many per lifetime; each costs about 170 bytes (under 3 MB in all).
_MAX_SEEN_NOTES: Final = 16_384


class Notes:
    """Sealing, sending and opening the notes; `me` is this replica's advertised URL."""

    def __init__(
        self,
        sealer: Sealer,
        relay: ReplicaRelay,
        me: str,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sealer = sealer
        self._relay = relay
        self.me = me
        # Wall-clock seconds: the time sealed in a note is read by another machine.
        self._clock = clock
        # Nonces of the notes opened, with when each stops being valid (in arrival order).
        self._seen: OrderedDict[str, float] = OrderedDict()
        # One rate-limited line per reason: a flood of one kind hides no other.
        self._refusals: dict[str, RateLimitedLog] = {}

    async def send(
        self, replica: str, note: dict[str, Any], *, as_long_as_a_call: bool = False
    ) -> dict[str, Any] | None:
        """The owner's (or worker's) answer to `note`, or None: not delivered.
        `as_long_as_a_call`: the answer may wait for a call in flight there (a
        `hold`), so it is waited for as long as a call (MCP_SHIM_REQUEST_TIMEOUT_S)."""
        body = self.seal(note)
        timeout_s = self._relay.request_timeout_s if as_long_as_a_call else NOTE_TIMEOUT_S
        reply = await self._relay.note(replica, body, timeout_s=timeout_s)
        log.info("replica_note", kind=note.get("k"), replica=replica[:200], ok=reply is not None)
        if reply is None:
            return None
        opened = self._opened(reply, _REPLY_PURPOSE)
        return None if opened is None else opened[1]

    def seal(self, note: dict[str, Any]) -> bytes:
        """`note` as it goes on the wire."""
        return self._sealed(note, _PURPOSE)

    def open(self, body: bytes) -> dict[str, Any] | None:
        """A note another replica sealed, or None: not one (forged, altered, too big),
        stale, or one opened before."""
        opened = self._opened(body, _PURPOSE)
        if opened is None:
            return None
        token, note = opened
        nonce = sealed_nonce(token)
        now = self._clock()
        seen = self._seen
        while seen and next(iter(seen.values())) <= now:
            seen.popitem(last=False)
        if nonce in seen:
            self._refused("replayed", note)
            return None
        if len(seen) >= _MAX_SEEN_NOTES:
            seen.popitem(last=False)
        # Sealed at most CLOCK_SKEW_S from now, so stale by this time at the latest:
        # kept till then, in arrival order, which is also the order of these times.
        seen[nonce] = now + NOTE_LIFETIME_S + CLOCK_SKEW_S
        return note

    def seal_reply(self, reply: dict[str, Any]) -> bytes:
        return self._sealed(reply, _REPLY_PURPOSE)

    def _sealed(self, message: dict[str, Any], purpose: bytes) -> bytes:
        # Milliseconds since the epoch: an integer, exact in JSON.
        at = int(self._clock() * 1000)
        return self._sealer.seal_bytes(jsonio.dumps({"at": at, "m": message}), purpose).encode(
            "ascii"
        )

    def _opened(self, body: bytes, purpose: bytes) -> tuple[str, dict[str, Any]] | None:
        """The token and the message sealed in it, if it is one of ours and fresh."""
        try:
            token = body.decode("ascii")
        except UnicodeDecodeError:
            return None
        sealed = self._sealer.open_object(token, purpose, max_chars=2 * MAX_NOTE_BYTES)
        if sealed is None:
            return None
        at, message = sealed.get("at"), sealed.get("m")
        if not isinstance(at, int) or isinstance(at, bool) or not isinstance(message, dict):
            return None
        age_s = self._clock() - at / 1000
        if age_s > NOTE_LIFETIME_S or age_s < -CLOCK_SKEW_S:
            self._refused("stale" if age_s > 0 else "from_the_future", message, age_s)
            return None
        return token, message

    def _refused(self, reason: str, message: dict[str, Any], age_s: float | None = None) -> None:
        kind = message.get("k")
        self._refusals.setdefault(reason, RateLimitedLog()).event(
            "replica_note_refused",
            reason=reason,
            kind=kind if isinstance(kind, str) else None,
            age_s=None if age_s is None else round(age_s, 3),
            lifetime_s=NOTE_LIFETIME_S,
        )
