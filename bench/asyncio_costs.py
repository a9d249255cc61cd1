"""What the asyncio constructs of a call's path cost, one by one, on uvloop.

    .venv/bin/python bench/asyncio_costs.py [--iterations 100000] [--rounds 3]

Each row runs one construct `--iterations` times inside one task and prints
this process's CPU time per iteration (`time.process_time`), best of
`--rounds`. They justify the fourth round's changes to the hot path
(bench/JOURNAL.md, "Fourth round"):

- `asyncio.timeout` enter and exit around an await that does not suspend,
  against `StepDeadline` (app/deadline.py), which replaced it for the call
  deadline and the SSE drain;
- a chain of async generators, one to four deep, each layer closing the one
  below with `contextlib.aclosing` (what a layer of `Gateway.run`, `_call`,
  `_forward`, `HttpExchange._read` costs a call that yields one message);
- an inner generator left unfinished by its consumer and closed by the event
  loop's finalizer hook (a task created through `call_soon_threadsafe`, what
  `Gateway._call` left behind for every call), against the same closed with
  `aclosing`; the finalizer's task is counted by letting the loop run it;
- `asyncio.get_running_loop()`, which on Python 3.11 makes a `getpid` system
  call each time (fork detection), for scale.

And the fifth round's (bench/JOURNAL.md, "Fifth round"): `StepDeadline` over a
call's two steps, now one timer for both; and one JSON answer's message read
through an async generator (what `HttpExchange._read` was) against the
exchange's own iterator (what it is now).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.deadline import StepDeadline


async def _leaf() -> AsyncGenerator[int, None]:
    try:
        yield 1
    finally:
        pass


async def _layer(inner: AsyncGenerator[int, None]) -> AsyncGenerator[int, None]:
    async with contextlib.aclosing(inner) as items:
        async for item in items:
            yield item


async def _abandoning(inner: AsyncGenerator[int, None]) -> AsyncGenerator[int, None]:
    async for item in inner:  # left at the consumer's close: the hook closes `inner`
        yield item


def _chain(depth: int) -> AsyncGenerator[int, None]:
    items = _leaf()
    for _ in range(depth - 1):
        items = _layer(items)
    return items


async def _one_message(items: AsyncGenerator[int, None]) -> None:
    async with contextlib.aclosing(items):
        await anext(items)


async def _nothing() -> None:
    pass


class _OneMessage:
    """An answer's messages read by the object itself (HttpExchange's JSON case)."""

    def __init__(self) -> None:
        self._left: list[int] | None = None

    def __aiter__(self) -> _OneMessage:
        return self

    async def __anext__(self) -> int:
        if self._left is None:
            self._left = [1]
        if not self._left:
            raise StopAsyncIteration
        return self._left.pop()


def cases(loop: asyncio.AbstractEventLoop) -> dict[str, Callable[[], Awaitable[None]]]:
    async def with_timeout() -> None:
        async with asyncio.timeout(30):
            await _nothing()

    async def with_step_deadline() -> None:
        deadline = StepDeadline(loop.time() + 30)
        with deadline:
            await _nothing()
        deadline.close()

    async def step_deadline_two_steps() -> None:
        deadline = StepDeadline(loop.time() + 30)
        with deadline:
            await _nothing()
        with deadline:
            await _nothing()
        deadline.close()

    async def read_by_generator() -> None:
        messages = _leaf()
        await anext(messages)
        await messages.aclose()

    async def read_by_iterator() -> None:
        await anext(_OneMessage())

    async def finalizer_closed() -> None:
        await _one_message(_abandoning(_leaf()))
        await asyncio.sleep(0)  # the finalizer's task runs here

    async def aclosing_closed() -> None:
        await _one_message(_layer(_leaf()))
        await asyncio.sleep(0)  # the same loop turn, for a fair comparison

    async def running_loop() -> None:
        asyncio.get_running_loop()

    table: dict[str, Callable[[], Awaitable[None]]] = {
        "asyncio.timeout enter/exit": with_timeout,
        "StepDeadline enter/exit": with_step_deadline,
        "StepDeadline, two steps (one timer)": step_deadline_two_steps,
        "one message read through an async generator": read_by_generator,
        "one message read through the exchange's iterator": read_by_iterator,
    }
    for depth in (1, 2, 3, 4):
        table[f"generators {depth} deep, one message"] = (
            lambda depth=depth: _one_message(_chain(depth))  # type: ignore[misc]
        )
    table["inner generator closed by the loop's finalizer"] = finalizer_closed
    table["inner generator closed by aclosing"] = aclosing_closed
    table["asyncio.get_running_loop()"] = running_loop
    return table


async def measure(iterations: int, rounds: int) -> None:
    table = cases(asyncio.get_running_loop())
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, case in table.items():
            started = time.process_time()
            for _ in range(iterations):
                await case()
            per = (time.process_time() - started) / iterations * 1e6
            best[name] = min(best.get(name, per), per)
    print(f"{'construct':52} {'CPU us/iteration (best of ' + str(rounds) + ')':>34}")
    for name, per in best.items():
        print(f"{name:52} {per:34.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    uvloop.run(measure(args.iterations, args.rounds))


if __name__ == "__main__":
    main()
