"""The one way a test waits for something to become true: `until` (async) and
`until_sync` (threads, subprocesses). Each checks a predicate, returns its
first truthy value, and on timeout fails naming what it waited for and the
last value seen, so a failure reads "timed out after 5 s waiting for the
worker to start (last: False)" rather than a bare assertion.

A test waits on an event, a condition or this helper; a fixed sleep is not a
way to wait for something (tests/unit/general/test_no_sleeps.py checks that
the unit tier keeps it so).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# How often a predicate is re-checked: short enough that a wait ends promptly
# once its condition holds, long enough not to spin a shared CPU.
ASYNC_INTERVAL_S = 0.005
SYNC_INTERVAL_S = 0.02


class WaitTimeout(AssertionError):
    """A condition did not hold within its timeout."""


def _failure(what: str, timeout: float, last: object) -> WaitTimeout:
    return WaitTimeout(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")


async def until(
    predicate: Callable[[], T | Awaitable[T]],
    *,
    what: str,
    timeout_s: float = 10.0,
    interval: float = ASYNC_INTERVAL_S,
) -> T:
    """Re-check `predicate` (sync or async) on the running loop until it gives a
    truthy value, which is returned; fail after `timeout_s` seconds naming `what`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise _failure(what, timeout_s, value)
        # Yields to the code under test between checks; not a synchronisation.
        await asyncio.sleep(interval)


def until_sync(
    predicate: Callable[[], T],
    *,
    what: str,
    timeout_s: float = 10.0,
    interval: float = SYNC_INTERVAL_S,
) -> T:
    """Re-check `predicate` from a thread until it gives a truthy value, which is
    returned; fail after `timeout_s` seconds naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _failure(what, timeout_s, value)
        time.sleep(interval)


async def forever() -> None:
    """A step that never ends by itself: it ends only when cancelled (a peer
    that stays silent, a call that hangs)."""
    await asyncio.Event().wait()


async def one_turn() -> None:
    """A step that suspends for one turn of the loop: what was scheduled with
    `call_soon` before it runs before it returns. For code whose behaviour is
    the loop's turn (writes held to the next iteration) or that times or counts
    its awaits; never as a way to let another task catch up (it may need more
    than one turn: wait for what it does instead)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done


def clock_marks(*at_s: float) -> tuple[list[float], list[asyncio.TimerHandle]]:
    """Timers on the running loop's clock, `at_s` from now, each noting its
    time in the list when it fires. Timers run in the order of their time, so
    which have fired when a wait ends says how long it took on the clock the
    code under test uses (an ordering, not a wall-clock measurement). Cancel
    the handles once read."""
    loop = asyncio.get_running_loop()
    fired: list[float] = []
    return fired, [loop.call_later(s, fired.append, s) for s in at_s]
