"""Connections kept on as few workers as the load needs (MCP_SHIM_WORKERS > 1).

The kernel hands each new connection to whichever worker accepts it, so a
light load is spread over every worker (one accept per wake, app/serving/workers.py).
Spread costs CPU when it is not needed: two half-idle loops each wake for
fewer events and coalesce fewer writes, and a gateway with two workers spent
up to 1.3x one worker's CPU per call in front of a slow server (bench/peers.py).
And a burst of connections can leave one worker saturated while
another idles. Both are a question of load, which only the workers know, so
they move keep-alive connections between them (app/serving/handoff.py), between two
requests: at once when idle, else with the first bytes of the next request
(a closed-loop client is almost never idle at the instant of a tick). Two
rules, decided every PERIOD_S:

- *gather*: when this worker and a lower-numbered one are together busy less
  than GATHER_BELOW of one core, this worker's connections go to it, and it
  stops accepting new ones (app/serving/accept_gate.py) until every lower-numbered
  worker is saturated or gone, so a light load ends up on one worker and the
  others sleep;
- *spill*: when this worker's loop is busy at least SPILL_AT of the time and a
  sibling's is at most ROOM_BELOW, the share of its connections that evens
  the two out goes to that sibling.

The gap between the two (a gathered load is well under SPILL_AT, a load that
spills is over GATHER_BELOW) keeps a connection from going back and forth.
"Busy" is the fraction of wall time the worker's loop thread was running or
waiting for a CPU (`/proc/thread-self/schedstat`): a loop that is not waiting
in epoll. Over stdio it is the busier of that and the worker's busiest server
process (its threads', `/proc/<pid>/task/*/schedstat`, from the end of its
initialize: its start is a one-off, not load): a worker's calls of one kind
share one process (app/upstream/sessions/pool.py), so in front of a server that
takes a core per process the second worker's process is what doubles the
calls/s, and gathering on one worker's loop would have halved them. Each
worker writes its own into a small shared table the supervisor creates (a
memfd, one slot per worker) and reads its siblings' there.

Only connections that no state pins move: a client's (not a sibling's relay on
this worker's own listener), here for SETTLE_S, and, unless
`sessions_anywhere` (a legacy session's plain calls are served by any worker,
app/cluster/notes.py), whose last request named no session.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeGuard

import structlog

from app.serving.accept_gate import AcceptGate
from app.serving.http_protocol import GuardedHttpToolsProtocol
from app.serving.load_board import LoadBoard

log = structlog.get_logger("mcp_shim.balance")

PERIOD_S: Final = 0.25
# A worker's busy fraction from which it sheds connections to an idle sibling.
SPILL_AT: Final = 0.9
# A sibling busy at most this much has room for them.
ROOM_BELOW: Final = 0.5
# Two workers busy together less than this gather on the lower-numbered one,
# which then carries less than their sum: one loop wakes for more events at a
# time (two half-idle loops spent 1.2-1.3x one loop's CPU per call).
GATHER_BELOW: Final = 0.8
# A connection that just arrived stays where it is for this long. One period:
# a burst of connections landing on one worker (the others not accepting,
# app/serving/accept_gate.py) spills as soon as the load shows; at 1 s, a 3 s run of 8
# connections on the fast upstream got 1.15x one worker's calls/s, at 0.25 s
# 1.50x (bench/moves.py).
SETTLE_S: Final = 0.25
_LOG_EVERY_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class Move:
    to: int
    count: int
    reason: str  # "gather" | "spill"


def plan(me: int, busy: Sequence[float | None], movable: int) -> Move | None:
    """Where `movable` idle connections of worker `me` should go, given every
    worker's busy fraction (None: unknown, gone or starting); None: stay."""
    own = busy[me]
    if own is None or movable == 0:
        return None
    for other in range(me):
        theirs = busy[other]
        if theirs is not None and own + theirs < GATHER_BELOW:
            return Move(other, movable, "gather")
    # One connection's load cannot be shared: moving it only moves the saturation.
    if own < SPILL_AT or movable < 2:
        return None
    siblings = [(b, i) for i, b in enumerate(busy) if i != me and b is not None and b <= ROOM_BELOW]
    if not siblings:
        return None
    theirs, target = min(siblings)
    # The share that evens the two out, as far as connections carry equal load:
    # half to an idle sibling, a quarter to one half busy. A quarter every time
    # left a burst of connections opened on worker 0 (the others not
    # accepting) saturating it for seconds while worker 1 idled.
    share = (own - theirs) / (2 * own)
    return Move(target, max(1, round(movable * share)), "spill")


def accepts(me: int, busy: Sequence[float | None], accepting: bool) -> bool:
    """Whether worker `me` accepts new connections on the shared port
    (app/serving/accept_gate.py): not while its load gathers on a lower-numbered
    worker; again once every lower-numbered one is saturated or unknown
    (gone, starting), so that a connection never waits for a worker that
    cannot take it. In between it keeps what it does: the same gap as
    between the two rules of `plan`."""
    own = busy[me]
    lower = [b for b in busy[:me] if b is not None]
    if own is not None and any(own + b < GATHER_BELOW for b in lower):
        return False
    return accepting or all(b >= SPILL_AT for b in lower)


def read_schedstat(path: str = "/proc/thread-self/schedstat") -> int | None:
    """Nanoseconds this thread has run or waited to run; None where the kernel
    does not say (then the worker does not balance)."""
    try:
        with open(path, "rb") as handle:
            running, waiting, _ = handle.read().split()
        return int(running) + int(waiting)
    except (OSError, ValueError):
        return None


def process_schedstat(pid: int) -> int | None:
    """Nanoseconds the threads of process `pid` have run or waited to run, the
    living ones summed; None when it is gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total = 0
    for task in tasks:
        # A thread that ended since the listing counts nothing.
        total += read_schedstat(f"/proc/{pid}/task/{task}/schedstat") or 0
    return total


class ServerLoad:
    """How busy the busiest of this worker's stdio server processes was: the
    share of wall time its threads together ran or waited for a CPU, as for
    the loop (`read_schedstat`), at most one. Its CPU time alone would stay
    under a core on a machine whose cores the server shares with its clients,
    while it keeps every call waiting; its main thread alone misses a Python
    SDK server's work, which reads stdin in other threads."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self._pids = pids
        self._last: dict[int, int] = {}

    def share(self, seconds: float) -> float:
        """Over the last `seconds` (since the last reading); a process started
        since then counts from the next one."""
        now: dict[int, int] = {}
        busiest = 0.0
        for pid in self._pids():
            ran = process_schedstat(pid)
            if ran is None:
                continue
            now[pid] = ran
            before = self._last.get(pid)
            if before is not None and seconds > 0:
                busiest = max(busiest, (ran - before) / 1e9 / seconds)
        self._last = now
        return min(1.0, busiest)


class Sender(Protocol):
    def send_idle(self, owner: str, connection: object, data: bytes = b"") -> bool: ...


class Balancer:
    """One worker's side: measures its loop, publishes it, moves connections."""

    def __init__(
        self,
        board: LoadBoard,
        me: int,
        siblings: dict[int, str],
        handoff: Sender,
        connections: Iterable[object],
        *,
        port: int,
        sessions_anywhere: bool,
        moved: Callable[[str, int], None],
        gate: AcceptGate | None = None,
        servers: ServerLoad | None = None,
    ) -> None:
        self._board = board
        self._gate = gate
        self._servers = servers
        self._port = port
        self._me = me
        self._siblings = siblings
        self._handoff = handoff
        self._connections = connections
        self._sessions_anywhere = sessions_anywhere
        self._moved = moved
        self._last: tuple[float, int] | None = None
        self._previous = 0.0
        self._pending: dict[str, int] = {}
        self._logged = 0.0
        self._timer: asyncio.TimerHandle | None = None
        # This period's plan while connections are left to move at their next request.
        self._wanted: Move | None = None
        self._left = 0
        self._loads: list[float | None] = []

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(PERIOD_S, self._run, loop)

    def stop(self) -> None:
        self._want(None, 0)
        if self._gate is not None:
            self._gate.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._board.close()

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self.tick()
        except Exception:  # a balancing error must not stop the worker
            log.exception("balance_failed")
            self._want(None, 0)  # nor leave the last period's plan in force
        self._timer = loop.call_later(PERIOD_S, self._run, loop)

    def tick(self, now: float | None = None) -> None:
        """Called every PERIOD_S on the worker's loop."""
        now = time.monotonic() if now is None else now
        move, left = self._plan(now)
        self._want(move, left)

    def _plan(self, now: float) -> tuple[Move | None, int]:
        """This period's plan and how many connections it leaves to move at their
        next request (the idle ones go now)."""
        ran = read_schedstat()
        if ran is None:
            return None, 0
        last, self._last = self._last, (now, ran)
        if last is None or now <= last[0]:
            return None, 0
        sample = min(1.0, (ran - last[1]) / 1e9 / (now - last[0]))
        if self._servers is not None:
            sample = max(sample, self._servers.share(now - last[0]))
        # The mean of two periods: one noisy period does not move anything.
        busy, self._previous = (sample + self._previous) / 2, sample
        self._board.write(self._me, busy, now)
        loads = self._loads = self._board.read(now)
        if self._gate is not None:
            self._gate.set(accepts(self._me, loads, self._gate.accepting))
        eligible = [c for c in self._connections if self._eligible(c, now)]
        move = plan(self._me, loads, len(eligible))
        if move is None or move.to not in self._siblings:
            return None, 0
        owner = self._siblings[move.to]
        idle = [c for c in eligible if c.between_requests()][: move.count]
        sent = sum(self._handoff.send_idle(owner, c) for c in idle)
        self._count(move, sent, now)
        # The others go at their next request's first bytes, until the next tick.
        return move, move.count - sent

    def take(self, connection: GuardedHttpToolsProtocol, data: bytes) -> bool:
        """At the first read of a request: move this connection with `data`
        while this period's plan wants more moved."""
        move = self._wanted
        if move is None or not self._eligible(connection, time.monotonic()):
            return False
        if not self._handoff.send_idle(self._siblings[move.to], connection, data):
            return False
        self._count(move, 1, time.monotonic())
        self._want(move, self._left - 1)
        return True

    def _eligible(self, connection: object, now: float) -> TypeGuard[GuardedHttpToolsProtocol]:
        return isinstance(connection, GuardedHttpToolsProtocol) and connection.movable(
            self._port, now - SETTLE_S, self._sessions_anywhere
        )

    def _want(self, move: Move | None, left: int) -> None:
        self._wanted, self._left = (move, left) if move is not None and left > 0 else (None, 0)
        mover = self if self._wanted is not None else None
        # Only when it changes: setting a class's attribute, even to the value it
        # holds, voids the interpreter's caches of every attribute look-up on its
        # instances, and every tick would have made the next calls' protocol
        # code run unspecialized (bench/instructions.py counts it).
        if GuardedHttpToolsProtocol.mover is not mover:
            GuardedHttpToolsProtocol.mover = mover

    def _count(self, move: Move, sent: int, now: float) -> None:
        if not sent:
            return
        self._moved(move.reason, sent)
        self._pending[move.reason] = self._pending.get(move.reason, 0) + sent
        self._log(now, self._loads, move)

    def _log(self, now: float, loads: Sequence[float | None], move: Move) -> None:
        if now - self._logged < _LOG_EVERY_S:
            return
        self._logged = now
        pending, self._pending = self._pending, {}
        log.info(
            "connections_moved",
            worker=self._me,
            to=move.to,
            busy=[None if b is None else round(b, 2) for b in loads],
            **{f"{reason}_since_last": count for reason, count in pending.items()},
        )


@dataclass(frozen=True, slots=True)
class Siblings:
    """A worker's view of the others, from its command line (app/serving/workers.py)."""

    me: int
    urls: dict[int, str]
    board: LoadBoard | None

    @classmethod
    def parse(cls, me: int, items: Sequence[str], board: str | None) -> Siblings:
        """`items`: INDEX=URL each; `board`: FD:SLOTS of the shared load table."""
        urls = {int(index): url for index, url in (item.split("=", 1) for item in items)}
        table = None
        if board is not None:
            fd, slots = board.split(":")
            table = LoadBoard(int(fd), int(slots))
        return cls(me, urls, table)

    def balancer(
        self,
        handoff: Sender,
        connections: Iterable[object],
        *,
        port: int,
        sessions_anywhere: bool,
        moved: Callable[[str, int], None],
        gate: AcceptGate | None = None,
        server_pids: Callable[[], list[int]] | None = None,
    ) -> Balancer:
        assert self.board is not None
        servers = ServerLoad(server_pids) if server_pids is not None else None
        return Balancer(
            self.board,
            self.me,
            self.urls,
            handoff,
            connections,
            port=port,
            sessions_anywhere=sessions_anywhere,
            moved=moved,
            gate=gate,
            servers=servers,
        )
