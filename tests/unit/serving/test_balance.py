"""app/serving/balance.py: where a worker's connections go. The plan as a table of
cases (gather onto a lower-numbered worker under a light load, spill off a
saturated one to a sibling with room, stay otherwise, and never back and forth
between the two rules); whether a worker accepts new connections, as a table
too, and app/serving/accept_gate.py turning a real server's accepting off and on over
a real listening socket; the shared load table over a real memfd, mapped twice
as two workers map it; the loop's busy time from the kernel, and a stdio
server process's from real processes. Real workers
moving real connections: tests/integration/test_workers_balance.py."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import uvloop

from app.serving import balance
from app.serving.accept_gate import AcceptGate
from app.serving.balance import GATHER_BELOW, ROOM_BELOW, SPILL_AT, Move, Siblings, accepts, plan
from app.serving.http_protocol import GuardedHttpToolsProtocol
from app.serving.load_board import CANCELS_WITHHELD, FLAGS, STALE_S, LoadBoard
from tests.waiting import until

CASES: list[tuple[str, int, list[float | None], int, Move | None]] = [
    ("light load on worker 1 gathers on 0", 1, [0.1, 0.2], 6, Move(0, 6, "gather")),
    ("worker 0 never gathers upwards", 0, [0.1, 0.2], 6, None),
    ("together too busy to gather", 1, [0.5, 0.4], 6, None),
    ("nothing idle to move", 1, [0.1, 0.1], 0, None),
    ("own load unknown", 1, [0.1, None], 6, None),
    ("the lower worker gone: nothing to gather on", 1, [None, 0.1], 6, None),
    ("saturated, sibling idle: half spills", 0, [1.0, 0.0], 16, Move(1, 8, "spill")),
    ("saturated, sibling half busy: a quarter", 0, [1.0, 0.5], 16, Move(1, 4, "spill")),
    ("the share that evens them out", 0, [0.95, 0.1], 16, Move(1, 7, "spill")),
    ("saturated with few: at least one spills", 0, [1.0, 0.0], 2, Move(1, 1, "spill")),
    ("saturated by one connection: it stays", 0, [1.0, 0.0], 1, None),
    ("saturated, sibling busy too: stay", 0, [0.95, 0.6], 16, None),
    ("busy but not saturated: stay", 0, [0.85, 0.0], 16, None),
    ("spills to the least busy of several", 1, [0.4, 0.95, 0.2], 8, Move(2, 3, "spill")),
    ("gathers on the lowest that has room", 2, [0.75, 0.1, 0.1], 4, Move(1, 4, "gather")),
]


@pytest.mark.parametrize(("me", "busy", "movable", "expected"), [c[1:] for c in CASES])
def test_the_plan(me: int, busy: list[float | None], movable: int, expected: Move | None) -> None:
    assert plan(me, busy, movable) == expected


def test_a_gathered_load_does_not_spill_and_a_spilled_one_does_not_gather() -> None:
    # The rules' thresholds leave a gap: what one rule produces, the other leaves.
    assert GATHER_BELOW < SPILL_AT
    gathered = GATHER_BELOW - 0.01  # at most what the receiving worker then carries
    assert plan(0, [gathered, 0.0], 10) is None
    # A spill starts at SPILL_AT on one worker; together they stay above GATHER_BELOW.
    assert plan(1, [SPILL_AT - ROOM_BELOW, ROOM_BELOW], 10) is None


ACCEPTING: list[tuple[str, int, list[float | None], bool, bool]] = [
    ("worker 0 always accepts", 0, [0.0, 0.0], True, True),
    ("worker 0 accepts even when it could not gather", 0, [0.0, 0.0], False, True),
    ("a light load: stop, it gathers on worker 0", 1, [0.2, 0.1], True, False),
    ("still light: stay off", 1, [0.3, 0.0], False, False),
    ("worker 0 busy, not saturated: stay off", 1, [0.85, 0.0], False, False),
    ("worker 0 saturated: on again", 1, [0.95, 0.0], False, True),
    ("worker 0 gone or starting: on again", 1, [None, 0.0], False, True),
    ("own load unknown, worker 0 busy: keep accepting", 1, [0.85, None], True, True),
    ("too busy together to gather: keep accepting", 1, [0.5, 0.4], True, True),
    ("off until every lower worker is saturated", 2, [0.95, 0.5, 0.0], False, False),
    ("every lower worker saturated: on", 2, [0.95, 0.92, 0.0], False, True),
]


@pytest.mark.parametrize(("me", "busy", "accepting", "expected"), [c[1:] for c in ACCEPTING])
def test_whether_a_worker_accepts(
    me: int, busy: list[float | None], accepting: bool, expected: bool
) -> None:
    assert accepts(me, busy, accepting) is expected


def test_accepting_has_the_plan_s_gap() -> None:
    # What stops accepting (a load gathered on worker 0) does not start it again.
    assert not accepts(1, [GATHER_BELOW - 0.01, 0.0], False)
    assert accepts(1, [SPILL_AT, 0.0], False)


async def _connect(port: int) -> socket.socket:
    loop = asyncio.get_running_loop()
    client = socket.socket()
    client.setblocking(False)
    await loop.sock_connect(client, ("127.0.0.1", port))
    return client


LOOPS = pytest.mark.parametrize(
    "loop_factory", [uvloop.new_event_loop, asyncio.new_event_loop], ids=["uvloop", "asyncio"]
)


@LOOPS
def test_the_gate_turns_a_real_server_s_accepting_off_and_on(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    # uvloop is what workers run (app/serving/cli.py); its close() of a server given a
    # socket closes the descriptor, which the gate's spare outlives.
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(_off_and_on())


class _Serving:
    """A real listening socket served by one asyncio server, as uvicorn's list
    holds it, and the servers the gate opens on it (recorded)."""

    def __init__(self, protocol: Callable[[], asyncio.Protocol]) -> None:
        self.protocol = protocol
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.servers: list[asyncio.AbstractServer] = []
        self.opened: list[asyncio.AbstractServer] = []

    async def gate(self) -> AcceptGate:
        loop = asyncio.get_running_loop()
        self.servers.append(await loop.create_server(self.protocol, sock=self.listener))
        return AcceptGate(self.servers, 0, self.listener, self.open_server)

    async def open_server(self, sock: socket.socket) -> asyncio.AbstractServer:
        server = await asyncio.get_running_loop().create_server(self.protocol, sock=sock)
        self.opened.append(server)
        return server


async def _off_and_on() -> None:
    accepted: list[asyncio.BaseTransport] = []

    class Serve(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.append(transport)

    serving = _Serving(Serve)
    port, servers, opened = serving.port, serving.servers, serving.opened
    gate = await serving.gate()
    clients = [await _connect(port)]
    await until(lambda: len(accepted) == 1, what="the first connection accepted")
    gate.set(False)
    assert not gate.accepting
    # Nothing serves the socket any more: the kernel completes the handshake
    # into the accept queue and nobody takes it.
    assert not servers[0].is_serving() and opened == []
    clients.append(await _connect(port))
    assert len(accepted) == 1
    gate.set(True)
    await until(lambda: len(accepted) == 2, what="the connection that waited to be served")
    assert len(opened) == 1 and opened[0].is_serving()
    assert servers == opened  # uvicorn's list holds the live server, for its shutdown
    gate.close()
    gate.set(False)  # after close: nothing changes any more
    assert gate.accepting and opened[0].is_serving()
    clients.append(await _connect(port))
    await until(lambda: len(accepted) == 3, what="a connection accepted after close")
    servers[0].close()
    await servers[0].wait_closed()
    for transport in accepted:
        transport.close()
    for client in clients:
        client.close()


@LOOPS
def test_a_gate_turned_off_while_opening_closes_what_it_opened(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(_off_while_opening())


async def _off_while_opening() -> None:
    serving = _Serving(asyncio.Protocol)
    gate = await serving.gate()
    servers, opened = serving.servers, serving.opened
    gate.set(False)
    gate.set(True)  # opening...
    gate.set(False)  # ...and off again before it is ready
    await until(lambda: len(opened) == 1, what="the server being opened")
    await until(lambda: not opened[0].is_serving(), what="the opened server closed")
    assert not servers[0].is_serving()
    gate.close()


def test_the_board_is_shared_and_forgets_silent_workers() -> None:
    fd = LoadBoard.create(2)
    try:
        worker0, worker1 = LoadBoard(fd, 2), LoadBoard(os.dup(fd), 2)
        assert worker0.read(100.0) == [None, None]  # nothing written yet
        worker0.write(0, 0.25, 100.0)
        worker1.write(1, 0.75, 100.2)
        assert worker1.read(100.3) == [0.25, 0.75]
        assert worker0.read(100.0 + STALE_S + 0.1) == [None, 0.75]
        worker0.close()
        worker1.close()
    finally:
        os.close(fd)


def test_a_flag_one_worker_raises_every_worker_sees_until_its_table_closes() -> None:
    fd = LoadBoard.create(2)
    try:
        worker0, worker1 = LoadBoard(fd, 2), LoadBoard(os.dup(fd), 2)
        seen = worker1.flag(CANCELS_WITHHELD)
        assert not seen.is_set()
        worker0.write(1, 0.5, 100.0)  # the slots and the flags do not overlap
        worker0.flag(CANCELS_WITHHELD).set()
        assert seen.is_set() and worker1.read(100.0) == [None, 0.5]
        worker1.write(1, 0.75, 100.0)
        assert seen.is_set()
        worker1.close()
        assert not seen.is_set()  # a stopping worker's: reads as lowered, never raises
        seen.set()
        worker0.close()
    finally:
        os.close(fd)


def test_each_server_s_flag_is_its_own() -> None:
    # Many servers (app/servers): one flag per server's graph, a byte each, so
    # raising one never lowers or raises another, whoever raises them.
    fd = LoadBoard.create(2)
    try:
        worker0, worker1 = LoadBoard(fd, 2), LoadBoard(os.dup(fd), 2)
        worker0.flag(CANCELS_WITHHELD + 2).set()
        worker1.flag(CANCELS_WITHHELD + 64).set()
        raised = [i for i in range(FLAGS) if worker1.flag(i).is_set()]
        assert raised == [CANCELS_WITHHELD + 2, CANCELS_WITHHELD + 64]
        with pytest.raises(IndexError):
            worker0.flag(FLAGS)
        worker0.close()
        worker1.close()
    finally:
        os.close(fd)


def test_the_loop_s_busy_time_grows_with_work_and_is_none_without_the_file(
    tmp_path: os.PathLike[str],
) -> None:
    before = balance.read_schedstat()
    assert before is not None
    sum(i * i for i in range(200_000))
    after = balance.read_schedstat()
    assert after is not None and after > before
    assert balance.read_schedstat(str(tmp_path) + "/missing") is None


def test_a_stdio_server_s_load_is_how_busy_its_main_thread_was() -> None:
    # Real processes: one spinning, one asleep; the busiest is what counts.
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    sleep = subprocess.Popen(
        # Asleep in the kernel until killed.
        [sys.executable, "-c", "import signal; print('asleep', flush=True); signal.pause()"],
        stdout=subprocess.PIPE,
    )
    try:
        # Read once it sleeps: an interpreter's start-up is a CPU burst of its
        # own (0.06 s on a slow machine, more than a tenth of the window below).
        assert sleep.stdout is not None and sleep.stdout.readline() == b"asleep\n"
        pids = [sleep.pid]
        load = balance.ServerLoad(lambda: pids)
        assert load.share(0.5) == 0.0  # the first reading has nothing to compare
        time.sleep(0.5)  # the window measured is the behaviour under test
        assert load.share(0.5) < 0.1
        pids.append(spin.pid)
        load.share(0.5)  # the spinning one counts from its first reading
        time.sleep(0.5)  # the window measured is the behaviour under test
        # Ran or waited to run all along, but for the time a cgroup's CPU quota
        # throttled it, which counts as neither (0.79 seen on a loaded 2-core
        # container): well above the asleep one's, not all of the window.
        assert 0.5 < load.share(0.5) <= 1.0
        spin.kill()
        spin.wait()
        time.sleep(0.3)  # the window measured is the behaviour under test: gone, left out
        assert load.share(0.3) < 0.1
    finally:
        for proc in (spin, sleep):
            proc.kill()
            proc.wait()
        if sleep.stdout is not None:
            sleep.stdout.close()


def test_siblings_come_from_the_command_line() -> None:
    fd = LoadBoard.create(3)
    try:
        siblings = Siblings.parse(
            1, ["0=http://127.0.0.1:9001", "2=http://127.0.0.1:9003"], f"{fd}:3"
        )
        assert siblings.me == 1
        assert siblings.urls == {0: "http://127.0.0.1:9001", 2: "http://127.0.0.1:9003"}
        assert siblings.board is not None and siblings.board.slots == 3
        siblings.board.close()
        assert Siblings.parse(0, [], None).board is None
    finally:
        os.close(fd)


class _NothingSent:
    def send_idle(self, owner: str, connection: object, data: bytes = b"") -> bool:
        raise AssertionError("no connection is eligible: nothing may be sent")


def test_a_tick_that_changes_no_plan_leaves_the_protocol_class_alone() -> None:
    # Setting a class's attribute, even to the value it holds, voids the
    # interpreter's attribute caches for every instance of the class (its
    # version tag): a tick that did so four times a second made the next
    # calls' protocol code run unspecialized (bench/instructions.py counts it).
    from _testcapi import type_get_version

    fd = LoadBoard.create(2)
    balancer = balance.Balancer(
        LoadBoard(fd, 2),
        0,
        {1: "http://127.0.0.1:9"},
        _NothingSent(),
        [],
        port=1,
        sessions_anywhere=False,
        moved=lambda reason, count: None,
    )
    try:
        balancer.tick(100.0)
        assert GuardedHttpToolsProtocol.mover is None  # a look-up: the class gets a tag
        version = type_get_version(GuardedHttpToolsProtocol)
        assert version != 0
        for i in range(1, 6):
            balancer.tick(100.0 + i * balance.PERIOD_S)
        assert GuardedHttpToolsProtocol.mover is None
        assert type_get_version(GuardedHttpToolsProtocol) == version
        # A plan that does change it is set, and the check sees the change.
        balancer._want(Move(1, 1, "spill"), 1)
        assert GuardedHttpToolsProtocol.mover is balancer
        assert type_get_version(GuardedHttpToolsProtocol) != version
        # A plan that stays in force from one period to the next: set once.
        version = type_get_version(GuardedHttpToolsProtocol)
        assert version != 0
        balancer._want(Move(1, 2, "spill"), 2)
        assert GuardedHttpToolsProtocol.mover is balancer
        assert type_get_version(GuardedHttpToolsProtocol) == version
    finally:
        balancer.stop()  # its plan dropped, the class's mover None again
        os.close(fd)
    assert GuardedHttpToolsProtocol.mover is None
