"""The bound on legacy clients' sessions, as pure decisions (no clock, no I/O).

A legacy client's session holds state the client set (a log level,
subscriptions), so it cannot be closed and reopened behind the client's back
as a pooled session can: closing it costs the client a 404 and a new
`initialize`. The gateway therefore holds these sessions apart from the
pooled ones modern callers share (never one of them makes a modern call wait),
within their own bound and a per-credential share of it, and makes room only
under pressure. A credential at its share makes room from its own sessions:
the least recently used idle one is ended, however short its idle time, since
most clients end a session by dropping the connection, never with `DELETE`,
and a share of sessions their clients left would lock the credential out
until the idle timeout. At the whole bound a session idle for at least
`reclaim_idle_s` is ended, oldest idle first, taken from the credential that
holds the most (so one credential's sessions never starve another's). A
session with a request in flight or an open GET stream is never taken. When
nothing can be taken the caller is refused: 429 for its own credential's share
(all of it busy: one may be idle any moment), 503 for the whole bound, with
the seconds after which a retry may find room.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Held:
    """A session as the bound sees it."""

    credentials: str
    # Seconds with nothing in flight; None: busy (`busy` says with what).
    idle_s: float | None
    busy: str = ""  # REQUEST, STREAM, OPENING or ELSEWHERE when idle_s is None


# What keeps a session busy, as the refusal names it.
REQUEST = "with a request in flight"
STREAM = "with a GET stream open"
OPENING = "being opened"
# Used on another worker (a guest copy) since shortly: a request may run there.
ELSEWHERE = "in use on another worker"


@dataclass(frozen=True, slots=True)
class Limits:
    total: int  # MCP_SHIM_MAX_LEGACY_SESSIONS
    share: int  # MCP_SHIM_MAX_LEGACY_SESSIONS_PER_CREDENTIAL
    reclaim_idle_s: float  # MCP_SHIM_LEGACY_SESSION_RECLAIM_IDLE_S


@dataclass(frozen=True, slots=True)
class Admit:
    """Room: count the new session."""


@dataclass(frozen=True, slots=True)
class Reclaim:
    """End `held[index]` first, then decide again."""

    index: int


@dataclass(frozen=True, slots=True)
class Refuse:
    # True: the caller's credential holds its whole share (429); False: the
    # whole bound is held (503).
    share: bool
    retry_after_s: int
    # The share's sessions by what keeps them busy: "2 with a request in flight, ..."
    holding: str = ""


ADMIT = Admit()


def decide(held: Sequence[Held], credentials: str, limits: Limits) -> Admit | Reclaim | Refuse:
    """Whether a session for `credentials` fits among `held`, and what to end if not."""
    mine = [i for i, h in enumerate(held) if h.credentials == credentials]
    if len(mine) >= limits.share:
        # Its own load: only its own sessions make room for it, the least
        # recently used idle one whatever its idle time.
        victim = _oldest_idle(held, mine, 0.0)
        if victim is not None:
            return Reclaim(victim)
        return Refuse(True, 1, holding(held, mine))
    if len(held) >= limits.total:
        counts = Counter(h.credentials for h in held)
        takeable = [
            i
            for i, h in enumerate(held)
            if h.idle_s is not None and h.idle_s >= limits.reclaim_idle_s
        ]
        if takeable:
            # From the credential holding the most, so the least hold on to theirs;
            # among its sessions, the one idle longest.
            return Reclaim(
                max(takeable, key=lambda i: (counts[held[i].credentials], held[i].idle_s))
            )
        return Refuse(False, _retry_after(held, range(len(held)), limits.reclaim_idle_s))
    return ADMIT


def _oldest_idle(held: Sequence[Held], among: Sequence[int], reclaim_idle_s: float) -> int | None:
    best: int | None = None
    best_idle = -1.0
    for i in among:
        idle = held[i].idle_s
        if idle is not None and idle >= reclaim_idle_s and idle > best_idle:
            best, best_idle = i, idle
    return best


def _retry_after(held: Sequence[Held], among: Sequence[int], reclaim_idle_s: float) -> int:
    """Seconds until the first of `among` could be taken, if nothing is used meanwhile:
    the longest idle one's remaining time; with none idle, a whole reclaim period
    (one that goes idle now is taken that much later)."""
    idle = [held[i].idle_s for i in among]
    longest = max((s for s in idle if s is not None), default=0.0)
    return max(1, math.ceil(reclaim_idle_s - longest))


def holding(held: Sequence[Held], among: Sequence[int]) -> str:
    """How many of `among` each thing keeps busy: "2 with a request in flight, 1 ..."."""
    counts = Counter(held[i].busy or "idle" for i in among)
    order = (REQUEST, STREAM, OPENING, ELSEWHERE, "idle")
    return ", ".join(f"{counts[what]} {what}" for what in order if counts[what])
