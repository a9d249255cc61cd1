"""A rolling restart's part for tasks: what this process runs, finished, handed
over or dropped, and one log line that says which.

On SIGTERM the task bridge (app/tasks/reap.py) hands `wind_down` its store
and the tasks whose work runs in this process. Each gets up to the grace period
(`MCP_SHIM_SHUTDOWN_GRACE_S`, the one the listen streams get) to end. One that
does not is handed over when another replica can carry it on from the shared
store alone: the upstream runs it (`resumable`) and its record is in a store
that outlives this process, checked there rather than assumed. The rest is
dropped: its work cancelled (which cancels its upstream call), and `on_drop`
given the chance to leave a terminal record for whoever asks next.

Handed-over work is not cancelled here: ending it must not end the upstream
task, which is the caller's to know (it stops its local watcher its own way).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog

from app.tasks.store import TaskStore, TaskStoreUnavailable

log = structlog.get_logger("mcp_shim.tasks")

# After the grace period: how long cancelled work and the `on_drop` hooks get,
# each, before the process goes on stopping without them.
DROP_WAIT_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class LiveTask:
    owner: str
    task_id: str
    work: asyncio.Future[Any]  # the in-process work (an asyncio.Task)
    # The upstream runs the task, and its record says enough for another
    # replica to carry on (a gateway-run task never is: its call dies here).
    resumable: bool = False


@dataclass(frozen=True, slots=True)
class WindDown:
    finished: list[LiveTask]  # ended within the grace period, however it ended
    handed_over: list[LiveTask]
    dropped: list[LiveTask]


async def wind_down(
    store: TaskStore,
    live: Sequence[LiveTask],
    grace_s: float,
    *,
    shared: bool,
    on_drop: Callable[[LiveTask], Awaitable[None]] | None = None,
) -> WindDown:
    """Wait up to `grace_s` for the live tasks' work to end, then hand over or drop
    the rest; `shared`: the store outlives this process (app/tasks/factory.py
    `is_shared`). One `tasks_wound_down` line says how many went which way."""
    started = time.monotonic()
    pending = {t.work for t in live if not t.work.done()}
    if pending and grace_s > 0:
        await asyncio.wait(pending, timeout=grace_s)
    finished = [t for t in live if t.work.done()]
    rest = [t for t in live if not t.work.done()]
    kept = await asyncio.gather(*(_kept(store, t) for t in rest)) if shared else [False] * len(rest)
    handed_over = [t for t, ok in zip(rest, kept, strict=True) if ok]
    dropped = [t for t, ok in zip(rest, kept, strict=True) if not ok]
    unfinished_hooks = await _drop(dropped, on_drop)
    log.info(
        "tasks_wound_down",
        finished=len(finished),
        handed_over=len(handed_over),
        dropped=len(dropped),
        drop_hooks_unfinished=unfinished_hooks,
        grace_s=grace_s,
        waited_ms=round((time.monotonic() - started) * 1000),
    )
    return WindDown(finished, handed_over, dropped)


async def _kept(store: TaskStore, task: LiveTask) -> bool:
    """Whether another replica can carry the task on: resumable, and its record
    there (an unreachable store cannot say so: the task is dropped)."""
    if not task.resumable:
        return False
    try:
        return await store.get(task.owner, task.task_id) is not None
    except TaskStoreUnavailable:
        return False


async def _drop(
    dropped: Sequence[LiveTask], on_drop: Callable[[LiveTask], Awaitable[None]] | None
) -> int:
    """Cancel the dropped work and run the hooks, each bounded; how many hooks
    did not end well (failed, or still running when their time was up)."""
    for task in dropped:
        task.work.cancel()
    if dropped:
        await asyncio.wait({t.work for t in dropped}, timeout=DROP_WAIT_S)
    if on_drop is None or not dropped:
        return 0
    hooks = [asyncio.ensure_future(on_drop(t)) for t in dropped]
    done, late = await asyncio.wait(hooks, timeout=DROP_WAIT_S)
    for hook in late:
        hook.cancel()
    if late:
        await asyncio.wait(late, timeout=DROP_WAIT_S)
    failed = sum(1 for hook in done if hook.cancelled() or hook.exception() is not None)
    return failed + len(late)
