"""`app/deadline.py` `StepDeadline`: the call deadline of `Gateway.run`, timed
only while a step is awaited, with asyncio.timeout's contract.

The deadline reads the loop's clock and arms its one timer with the loop's
`call_at`; `Timers` fakes both, and a test moves the clock past the deadline
and fires the timer when the scenario says the time has come, so no test waits
on the clock except the one that checks the real timer fires."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from app.deadline import StepDeadline
from tests.waiting import forever, one_turn

# A deadline's distance in the faked clock's tests: far enough that it is
# still ahead when the step starts on a loaded machine (5 ms was not, under
# several test processes), so a timer is armed; `Timers.fire` moves the clock.
SOON_S = 60.0


class Timers:
    """The running loop's clock and `call_at`, faked: each timer is recorded and
    armed an hour out, and `fire()` moves the clock to the last one's time and
    runs its callback, as the loop would then. Deadlines in these tests are a
    few milliseconds out, so moving the clock leaves other timers alone."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.loop = asyncio.get_running_loop()
        self.armed: list[tuple[float, asyncio.TimerHandle, Callable[..., Any], tuple[Any, ...]]]
        self.armed = []
        self.ahead_s = 0.0
        real = self.loop.call_at
        real_time = self.loop.time
        monkeypatch.setattr(self.loop, "time", lambda: real_time() + self.ahead_s)

        def recorded(when: float, callback: Callable[..., Any], *args: Any, **kw: Any) -> Any:
            handle = real(self.loop.time() + 3600, callback, *args, **kw)
            self.armed.append((when, handle, callback, args))
            return handle

        monkeypatch.setattr(self.loop, "call_at", recorded)

    def fire(self) -> None:
        """The last armed timer's time has come. Fired inside a step (before its
        await) the cancel lands at the step's suspension, as a timer firing
        while the step waits."""
        when, handle, callback, args = self.armed[-1]
        assert not handle.cancelled(), "the timer was cancelled before its time"
        handle.cancel()
        self.ahead_s += max(0.0, when - self.loop.time())
        callback(*args)


@pytest.fixture
async def timers(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Timers]:
    faked = Timers(monkeypatch)
    yield faked
    for _, handle, _, _ in faked.armed:  # none outlives its test
        handle.cancel()


async def test_a_step_within_the_deadline_is_untouched(timers: Timers) -> None:
    deadline = StepDeadline(timers.loop.time() + SOON_S)
    with deadline:
        await one_turn()
    assert not deadline.expired
    assert [when for when, *_ in timers.armed] == [deadline._when]


async def test_a_step_past_the_deadline_raises_timeout_and_the_task_is_not_left_cancelled(
    timers: Timers,
) -> None:
    deadline = StepDeadline(timers.loop.time() + SOON_S)
    with pytest.raises(TimeoutError):
        with deadline:
            timers.fire()
            await forever()
    assert deadline.expired
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await one_turn()  # no cancel left pending for the next await


async def test_the_real_timer_ends_a_step_that_never_ends() -> None:
    # The deadline firing on the loop's clock is the behaviour under test:
    # 50 ms out, and the step would otherwise never end.
    deadline = StepDeadline(asyncio.get_running_loop().time() + 0.05)
    with pytest.raises(TimeoutError):
        with deadline:
            await forever()
    assert deadline.expired


async def test_a_deadline_already_past_cancels_the_first_suspension(timers: Timers) -> None:
    deadline = StepDeadline(timers.loop.time() - 1)
    with pytest.raises(TimeoutError):
        with deadline:
            await forever()
    assert timers.armed == [], "a deadline already past needs no timer"


async def test_only_the_steps_are_timed(timers: Timers) -> None:
    deadline = StepDeadline(timers.loop.time() + SOON_S)
    with deadline:
        await one_turn()
    timers.fire()  # between steps, past the deadline: not cancelled
    assert not deadline.expired
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    with pytest.raises(TimeoutError):  # the next step is
        with deadline:
            await forever()


async def test_no_deadline_never_fires(timers: Timers) -> None:
    deadline = StepDeadline(None)
    with deadline:
        await one_turn()
    assert not deadline.expired
    assert timers.armed == []


async def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    loop = asyncio.get_running_loop()
    waiting = asyncio.Event()

    async def step() -> None:
        with StepDeadline(loop.time() + 5):
            waiting.set()
            await forever()

    task = asyncio.create_task(step())
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancel_from_elsewhere_at_the_deadline_stays_a_cancel() -> None:
    # Both at once: asyncio.timeout's rule, the other canceller wins.
    loop = asyncio.get_running_loop()
    seen: list[BaseException] = []

    async def step() -> None:
        deadline = StepDeadline(loop.time() - 1)
        try:
            with deadline:
                asyncio.current_task().cancel()  # type: ignore[union-attr]
                await forever()
        except BaseException as exc:
            seen.append(exc)
            raise

    task = asyncio.create_task(step())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert type(seen[0]) is asyncio.CancelledError


async def test_one_timer_serves_every_step_and_close_cancels_it(timers: Timers) -> None:
    # Armed at the first step, not per step (3.8 us for a call's two steps
    # against 5.9, bench/asyncio_costs.py); no timer outlives the call.
    deadline = StepDeadline(timers.loop.time() + SOON_S)
    for _ in range(3):
        with deadline:
            await one_turn()
    assert len(timers.armed) == 1
    handle = timers.armed[0][1]
    assert not handle.cancelled()
    deadline.close()
    assert handle.cancelled()
    assert not deadline.expired


async def test_a_deadline_that_passes_between_steps_cancels_the_next_one(timers: Timers) -> None:
    deadline = StepDeadline(timers.loop.time() + SOON_S)
    with deadline:
        await one_turn()  # arms the one timer
    timers.fire()  # it fires here, between steps: nothing is cancelled
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    with pytest.raises(TimeoutError):
        with deadline:
            await forever()
    deadline.close()
