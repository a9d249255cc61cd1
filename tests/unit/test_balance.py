"""app/balance.py: where a worker's connections go. The plan as a table of
cases (gather onto a lower-numbered worker under a light load, spill off a
saturated one to a sibling with room, stay otherwise, and never back and forth
between the two rules); the shared load table over a real memfd, mapped twice
as two workers map it; the loop's busy time from the kernel. Real workers
moving real connections: tests/integration/test_workers_balance.py."""

from __future__ import annotations

import os

import pytest

from app import balance
from app.balance import GATHER_BELOW, ROOM_BELOW, SPILL_AT, Move, Siblings, plan
from app.load_board import STALE_S, LoadBoard

CASES: list[tuple[str, int, list[float | None], int, Move | None]] = [
    ("light load on worker 1 gathers on 0", 1, [0.1, 0.2], 6, Move(0, 6, "gather")),
    ("worker 0 never gathers upwards", 0, [0.1, 0.2], 6, None),
    ("together too busy to gather", 1, [0.4, 0.3], 6, None),
    ("nothing idle to move", 1, [0.1, 0.1], 0, None),
    ("own load unknown", 1, [0.1, None], 6, None),
    ("the lower worker gone: nothing to gather on", 1, [None, 0.1], 6, None),
    ("saturated, sibling idle: a quarter spills", 0, [0.95, 0.1], 16, Move(1, 4, "spill")),
    ("saturated with few: at least one spills", 0, [1.0, 0.0], 3, Move(1, 1, "spill")),
    ("saturated by one connection: it stays", 0, [1.0, 0.0], 1, None),
    ("saturated, sibling busy too: stay", 0, [0.95, 0.6], 16, None),
    ("busy but not saturated: stay", 0, [0.85, 0.0], 16, None),
    ("spills to the least busy of several", 1, [0.4, 0.95, 0.2], 8, Move(2, 2, "spill")),
    ("gathers on the lowest that has room", 2, [0.5, 0.1, 0.1], 4, Move(1, 4, "gather")),
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


def test_the_loop_s_busy_time_grows_with_work_and_is_none_without_the_file(
    tmp_path: os.PathLike[str],
) -> None:
    before = balance.read_schedstat()
    assert before is not None
    sum(i * i for i in range(200_000))
    after = balance.read_schedstat()
    assert after is not None and after > before
    assert balance.read_schedstat(str(tmp_path) + "/missing") is None


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
