"""Room for one more stdio server process, as pure choices (no clock, no I/O):
which processes may be stopped to make it, in which order, and what holds
them all when none may.

A process is taken only when idle: no call in flight, started, and, for a pooled
one, its opener's first request already sent (before it, a new process only
looks idle; a legacy client's own is its client's from its `initialize` on). One with no
listen stream goes first, then one no legacy client owns (a pooled session or
a lane: whoever used it gets a new process without noticing), then the least
recently used. A legacy client's own process goes too when it is idle with no
GET stream open: most clients end a session by dropping the connection, never
with `DELETE`, and a share full of sessions their clients left would lock the
credential out until the idle timeout. Its owner ends the client's session
with it (the client's next request gets 404, and it initialises again). At
the whole bound, not a credential's share, a legacy client's own process is
taken only from the credential holding the most, as app/fronts/legacy/bound.py
does with legacy sessions, so a caller never ends a lesser holder's session.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from typing import Protocol, TypeVar


class Process(Protocol):
    """A server process as these choices see it (a StdioSession)."""

    @property
    def credentials(self) -> str: ...
    @property
    def owned(self) -> bool: ...
    @property
    def closing(self) -> bool: ...
    @property
    def stopped(self) -> bool: ...
    @property
    def initialized(self) -> bool: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def listening(self) -> bool: ...
    @property
    def last_active(self) -> float: ...
    @property
    def unused(self) -> bool: ...


P = TypeVar("P", bound=Process)


def candidates(processes: Collection[P], credentials: str | None) -> list[P]:
    """The processes of `credentials` (None: of anyone, at the whole bound) that
    may be stopped to make room, the first to try first; none while one of them
    is already on its way out (its end makes the room)."""
    mine = [p for p in processes if credentials is None or p.credentials == credentials]
    if any(p.closing or p.stopped for p in mine):
        return []
    idle = [
        p
        for p in mine
        if p.in_flight == 0
        and p.initialized
        and not (p.unused and not p.owned)
        and not (p.owned and p.listening)
    ]
    if credentials is None:
        counts = Counter(p.credentials for p in processes)
        most = max(counts.values(), default=0)
        idle = [p for p in idle if not p.owned or counts[p.credentials] == most]
    return sorted(idle, key=lambda p: (p.listening, p.owned, p.last_active))


def holding(processes: Collection[Process], starting: int) -> str:
    """What holds each process when none may be taken, for the refusal:
    "4 with a call in flight, 2 with a stream open". `starting`: processes
    counted but not spawned yet."""
    held: Counter[str] = Counter()
    held["starting"] = starting
    for p in processes:
        if p.closing or p.stopped:
            held["stopping"] += 1
        elif not p.initialized:
            held["starting"] += 1
        elif p.in_flight:
            held["with a call in flight"] += 1
        elif p.listening:
            held["with a stream open"] += 1
        else:
            # At the whole bound: a legacy session of a credential holding fewer.
            held["idle, a legacy session of another caller"] += 1
    order = (
        "with a call in flight",
        "with a stream open",
        "starting",
        "stopping",
        "idle, a legacy session of another caller",
    )
    return ", ".join(f"{held[what]} {what}" for what in order if held[what])
