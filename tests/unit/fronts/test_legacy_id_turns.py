"""`IdTurns` (app/fronts/legacy/turns.py): a legacy client's requests whose ids have one
text (1 and "1") never run upstream at once; others never wait (issue 19)."""

from __future__ import annotations

import asyncio
import collections.abc
from collections.abc import Generator
from typing import Any

from app.fronts.legacy.turns import IdTurns
from tests.waiting import one_turn, until


def _waiting(turns: IdTurns, session_id: str, request_id: int | str) -> int:
    """How many requests wait in line for this id's turn."""
    line = turns._taken.get((session_id, str(request_id)))
    return 0 if line is None else len(line.waiters)


async def test_ids_of_one_text_take_turns_and_others_do_not_wait() -> None:
    turns = IdTurns()
    order: list[str] = []
    first_in = asyncio.Event()
    release = asyncio.Event()

    async def hold(request_id: int | str, name: str) -> None:
        async with turns.of("s", request_id):
            order.append(f"{name} in")
            first_in.set()
            await release.wait()
            order.append(f"{name} out")

    async def quick(session: str, request_id: int | str, name: str) -> None:
        async with turns.of(session, request_id):
            order.append(name)

    holder = asyncio.create_task(hold(1, "int"))
    await first_in.wait()
    # Another id, or the same text on another session: no wait.
    await asyncio.wait_for(quick("s", 2, "other id"), 1.0)
    await asyncio.wait_for(quick("t", "1", "other session"), 1.0)
    twin = asyncio.create_task(quick("s", "1", "text"))
    await until(lambda: _waiting(turns, "s", 1) == 1, what="the twin in line")
    assert not twin.done()
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, twin), 1.0)
    assert order == ["int in", "other id", "other session", "int out", "text"]
    assert len(turns) == 0


async def test_a_waiter_cancelled_takes_nothing() -> None:
    turns = IdTurns()
    async with turns.of("s", 1):
        waiter = asyncio.create_task(quick_enter(turns))
        await until(lambda: _waiting(turns, "s", 1) == 1, what="the waiter in line")
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    assert len(turns) == 0
    await asyncio.wait_for(quick_enter(turns), 1.0)
    assert len(turns) == 0


async def quick_enter(turns: IdTurns) -> None:
    async with turns.of("s", "1"):
        pass


class Counted(collections.abc.Coroutine[Any, Any, None]):
    """A coroutine that counts how often its task resumes it: a waiter woken
    for nothing (its turn not come) is resumed once more than one woken once."""

    def __init__(self, coro: collections.abc.Coroutine[Any, Any, None]) -> None:
        self._coro = coro
        self.steps = 0

    def send(self, value: Any) -> Any:
        self.steps += 1
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        self.steps += 1
        return self._coro.throw(*args)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, None]:
        return self._coro.__await__()


async def queued(
    turns: IdTurns, count: int, order: list[int], request_id: int | str = 7
) -> tuple[list[Counted], list[asyncio.Task[None]]]:
    """`count` requests of one id waiting for their turn, in this order. Each one
    is in line when its `ready` is set: `__aenter__` queues it before it yields."""
    readies = [asyncio.Event() for _ in range(count)]

    async def one(n: int) -> None:
        readies[n].set()
        async with turns.of("s", request_id):
            order.append(n)
            # The turn is held across a suspension, as a call's is.
            await one_turn()

    counted = [Counted(one(n)) for n in range(count)]
    tasks = []
    for n, coro in enumerate(counted):
        tasks.append(asyncio.create_task(coro))
        await readies[n].wait()
    return counted, tasks


async def test_the_end_of_a_turn_wakes_only_the_next_waiter_in_order() -> None:
    """200 requests of id 7 behind one in flight: each is resumed three times
    (queued, its turn, the suspension it holds the turn across), and they go in
    the order they came. Before, the end of every turn woke every waiter: the
    k-th (from 0) was resumed k + 3 times."""
    turns = IdTurns()
    order: list[int] = []
    async with turns.of("s", "7"):
        counted, tasks = await queued(turns, 200, order)
        assert order == []
    await asyncio.wait_for(asyncio.gather(*tasks), 5.0)
    assert order == list(range(200))
    assert [c.steps for c in counted] == [3] * 200
    assert len(turns) == 0


async def test_a_waiter_cancelled_in_line_is_skipped() -> None:
    turns = IdTurns()
    order: list[int] = []
    async with turns.of("s", 7):
        _, tasks = await queued(turns, 3, order)
        tasks[1].cancel()
        await asyncio.gather(tasks[1], return_exceptions=True)
    await asyncio.wait_for(asyncio.gather(tasks[0], tasks[2]), 5.0)
    assert order == [0, 2]
    assert len(turns) == 0


async def test_a_waiter_cancelled_once_handed_the_turn_passes_it_on() -> None:
    """The turn is handed to the next waiter when the holder leaves; cancelled
    before it ran, that waiter must give it to the one after, or the id is
    taken for ever."""
    turns = IdTurns()
    order: list[int] = []
    holder = turns.of("s", 7)
    await holder.__aenter__()
    _, tasks = await queued(turns, 2, order)
    await holder.__aexit__()  # the turn is tasks[0]'s now, which has not run yet
    tasks[0].cancel()
    await asyncio.gather(tasks[0], return_exceptions=True)
    await asyncio.wait_for(tasks[1], 5.0)
    assert order == [1]
    assert len(turns) == 0


async def test_free_waits_for_every_request_of_the_text() -> None:
    """`free` (the owner's hold, at a worker with a copy) returns once no request of
    the text is in flight or waiting here, and only then."""
    turns = IdTurns()
    order: list[int] = []
    holder = turns.of("s", 7)
    await holder.__aenter__()
    _, tasks = await queued(turns, 2, order)
    freed = asyncio.create_task(turns.free("s", "7"))
    await holder.__aexit__()
    await asyncio.wait_for(asyncio.gather(*tasks), 5.0)
    await asyncio.wait_for(freed, 5.0)
    assert order == [0, 1]
    assert len(turns) == 0
    await asyncio.wait_for(turns.free("s", "7"), 1.0)  # nothing in flight: at once


async def test_a_waiter_cancelled_as_the_turn_ends_is_passed_over() -> None:
    """Cancelled, then the turn ends before the cancelled task runs: the turn goes
    to the next waiter, and the cancelled one leaves without taking it."""
    turns = IdTurns()
    order: list[int] = []
    holder = turns.of("s", 7)
    await holder.__aenter__()
    _, tasks = await queued(turns, 3, order)
    tasks[0].cancel()
    await holder.__aexit__()
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5.0)
    assert isinstance(results[0], asyncio.CancelledError)
    assert order == [1, 2]
    assert len(turns) == 0
