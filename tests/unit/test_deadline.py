"""`app/deadline.py` `StepDeadline`: the call deadline of `Gateway.run`, timed
only while a step is awaited, with asyncio.timeout's contract."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.deadline import StepDeadline


async def test_a_step_within_the_deadline_is_untouched() -> None:
    deadline = StepDeadline(asyncio.get_running_loop().time() + 5)
    with deadline:
        await asyncio.sleep(0.01)
    assert not deadline.expired


async def test_a_step_past_the_deadline_raises_timeout_and_the_task_is_not_left_cancelled() -> None:
    loop = asyncio.get_running_loop()
    deadline = StepDeadline(loop.time() + 0.05)
    started = loop.time()
    with pytest.raises(TimeoutError):
        with deadline:
            await asyncio.sleep(10)
    assert deadline.expired
    assert 0.04 <= loop.time() - started < 1
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # no cancel left pending for the next await


async def test_a_deadline_already_past_cancels_the_first_suspension() -> None:
    deadline = StepDeadline(asyncio.get_running_loop().time() - 1)
    with pytest.raises(TimeoutError):
        with deadline:
            await asyncio.sleep(1)


async def test_only_the_steps_are_timed() -> None:
    loop = asyncio.get_running_loop()
    deadline = StepDeadline(loop.time() + 0.05)
    with deadline:
        await asyncio.sleep(0)
    await asyncio.sleep(0.1)  # between steps, past the deadline: not cancelled
    assert not deadline.expired
    with pytest.raises(TimeoutError):  # the next step is
        with deadline:
            await asyncio.sleep(1)


async def test_no_deadline_never_fires() -> None:
    deadline = StepDeadline(None)
    with deadline:
        await asyncio.sleep(0.05)
    assert not deadline.expired


async def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    loop = asyncio.get_running_loop()

    async def step() -> None:
        with StepDeadline(loop.time() + 5):
            await asyncio.sleep(10)

    task = asyncio.create_task(step())
    await asyncio.sleep(0.01)
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
                await asyncio.sleep(1)
        except BaseException as exc:
            seen.append(exc)
            raise

    task = asyncio.create_task(step())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert type(seen[0]) is asyncio.CancelledError


async def test_one_timer_serves_every_step_and_close_cancels_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Armed at the first step, not per step (3.8 us for a call's two steps
    # against 5.9, bench/asyncio_costs.py); no timer outlives the call.
    loop = asyncio.get_running_loop()
    armed: list[asyncio.TimerHandle] = []
    call_at = loop.call_at

    def counted(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        handle = call_at(when, callback, *args, **kwargs)
        armed.append(handle)
        return handle

    monkeypatch.setattr(loop, "call_at", counted)
    deadline = StepDeadline(loop.time() + 5)
    for _ in range(3):
        with deadline:
            await asyncio.sleep(0)
    assert len(armed) == 1 and not armed[0].cancelled()
    deadline.close()
    assert armed[0].cancelled()
    assert not deadline.expired


async def test_a_deadline_that_passes_between_steps_cancels_the_next_one() -> None:
    loop = asyncio.get_running_loop()
    deadline = StepDeadline(loop.time() + 0.05)
    with deadline:
        await asyncio.sleep(0)  # arms the one timer
    await asyncio.sleep(0.1)  # it fires here, between steps: nothing is cancelled
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    with pytest.raises(TimeoutError):
        with deadline:
            await asyncio.sleep(1)
    deadline.close()
