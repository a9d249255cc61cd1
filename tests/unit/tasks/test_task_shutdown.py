"""A rolling restart's wind-down of the tasks this process runs: fakes of the
running work (plain asyncio tasks) and of the store, no MCP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from app.tasks import shutdown
from app.tasks.shutdown import LiveTask, wind_down
from app.tasks.store import MemoryTaskStore, Record, TaskStoreUnavailable
from tests.waiting import clock_marks, forever

# The grace period of the wind-downs that wait it out.
GRACE_S = 0.2


class DownStore(MemoryTaskStore):
    """A shared store whose engine has gone away."""

    async def get(self, owner: str, task_id: str) -> Record | None:
        raise TaskStoreUnavailable("the task store (MCP_SHIM_TASK_STORE) failed; retry later")


async def _work(ends: asyncio.Event | None, log: list[str], name: str) -> None:
    """A task's work that ends when `ends` is set (never when None)."""
    try:
        await (ends.wait() if ends is not None else forever())
    except asyncio.CancelledError:
        log.append(f"{name} cancelled")
        raise


async def _filed(store: MemoryTaskStore, *ids: str) -> None:
    for task_id in ids:
        assert await store.create("owner", task_id, {"status": "working"}, 60_000) is None


def _one_line(logs: list[dict[str, Any]]) -> dict[str, Any]:
    lines = [line for line in logs if line["event"] == "tasks_wound_down"]
    assert len(lines) == 1, logs
    return lines[0]


async def test_finished_handed_over_and_dropped_are_told_apart() -> None:
    store = MemoryTaskStore(max_per_owner=10)
    await _filed(store, "quick", "upstream-runs", "gateway-runs", "not-filed-here")
    await store.delete("owner", "not-filed-here")
    events: list[str] = []
    ended = asyncio.Event()
    ended.set()
    quick = LiveTask("owner", "quick", asyncio.ensure_future(_work(ended, events, "quick")))
    resumable = LiveTask(
        "owner", "upstream-runs", asyncio.ensure_future(_work(None, events, "upstream")), True
    )
    gateway_run = LiveTask(
        "owner", "gateway-runs", asyncio.ensure_future(_work(None, events, "gw"))
    )
    # Resumable, but its record is gone from the store: nobody could carry it on.
    lost = LiveTask(
        "owner", "not-filed-here", asyncio.ensure_future(_work(None, events, "lost")), True
    )
    dropped_hooks: list[str] = []

    async def on_drop(task: LiveTask) -> None:
        dropped_hooks.append(task.task_id)

    fired, marks = clock_marks(GRACE_S, GRACE_S + 2 * shutdown.DROP_WAIT_S)
    with capture_logs() as logs:
        result = await wind_down(
            store, [quick, resumable, gateway_run, lost], GRACE_S, shared=True, on_drop=on_drop
        )
    for mark in marks:
        mark.cancel()

    assert result.finished == [quick]
    assert result.handed_over == [resumable]
    assert result.dropped == [gateway_run, lost]
    # The grace period was waited for (the long work never ended), and no more
    # than it and the bounded cancellation.
    assert fired == [GRACE_S]
    assert sorted(events) == ["gw cancelled", "lost cancelled"]
    assert gateway_run.work.cancelled() and lost.work.cancelled()
    assert not resumable.work.done(), "handed-over work is the caller's to end"
    assert sorted(dropped_hooks) == ["gateway-runs", "not-filed-here"]
    line = _one_line(logs)
    assert (line["finished"], line["handed_over"], line["dropped"]) == (1, 1, 2)
    assert line["log_level"] == "info" and line["drop_hooks_unfinished"] == 0
    resumable.work.cancel()


async def test_everything_finished_within_the_grace_period_returns_at_once() -> None:
    store = MemoryTaskStore(max_per_owner=10)
    events: list[str] = []
    ends = [asyncio.Event() for _ in range(3)]
    works = [
        LiveTask("owner", f"t{n}", asyncio.ensure_future(_work(ends[n], events, str(n))))
        for n in range(3)
    ]
    for end in ends:  # each ends at its first turn
        end.set()
    fired, marks = clock_marks(5.0)
    with capture_logs() as logs:
        result = await wind_down(store, works, 30.0, shared=False)
    marks[0].cancel()
    # Ended when the last work did, not at the end of the 30 s.
    assert fired == [] and all(work.work.done() for work in works)
    assert result.finished == works and not result.handed_over and not result.dropped
    assert _one_line(logs)["finished"] == 3 and events == []


async def test_a_store_of_this_process_hands_nothing_over() -> None:
    store = MemoryTaskStore(max_per_owner=10)
    await _filed(store, "t")
    task = LiveTask("owner", "t", asyncio.ensure_future(_work(None, [], "t")), resumable=True)
    with capture_logs() as logs:
        result = await wind_down(store, [task], 0.05, shared=False)
    assert result.dropped == [task] and task.work.cancelled()
    assert _one_line(logs)["dropped"] == 1


async def test_an_unreachable_store_drops_what_it_cannot_confirm() -> None:
    store = DownStore(max_per_owner=10)
    task = LiveTask("owner", "t", asyncio.ensure_future(_work(None, [], "t")), resumable=True)
    with capture_logs() as logs:
        result = await wind_down(store, [task], 0.05, shared=True)
    assert result.dropped == [task] and not result.handed_over
    assert _one_line(logs)["handed_over"] == 0


async def test_work_and_hooks_that_will_not_end_are_left_behind_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutdown, "DROP_WAIT_S", 0.1)
    release = asyncio.Event()

    async def stubborn() -> None:
        # Ignores the first cancellation, as a careless work might.
        try:
            await release.wait()
        except asyncio.CancelledError:
            await release.wait()

    async def hook(task: LiveTask) -> None:
        if task.task_id == "hangs":
            await release.wait()
        raise RuntimeError("cannot mark it")

    store = MemoryTaskStore(max_per_owner=10)
    tasks = [
        LiveTask("owner", "hangs", asyncio.ensure_future(stubborn())),
        LiveTask("owner", "fails", asyncio.ensure_future(_work(None, [], "fails"))),
    ]
    fired, marks = clock_marks(2.0)
    with capture_logs() as logs:
        result = await wind_down(store, tasks, 0.05, shared=False, on_drop=hook)
    marks[0].cancel()
    assert fired == [], "not left behind within the bounded waits"
    assert result.dropped == tasks
    assert _one_line(logs)["drop_hooks_unfinished"] == 2
    release.set()
    await asyncio.wait_for(tasks[0].work, 5)
