"""The end of the tasks this replica holds (app/tasks/held.py): a settled
task's result filed and its upstream session let go at once; the expired ones
and the input rounds never answered reaped every REAP_EVERY_S; on SIGTERM the
rolling restart's wind-down (app/tasks/shutdown.py); and at shutdown, the rest
dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from app.rejections import INTERNAL_ERROR
from app.tasks import own
from app.tasks.held import Held
from app.tasks.live import LiveTask
from app.tasks.shutdown import LiveTask as Running
from app.tasks.shutdown import WindDown, wind_down
from app.tasks.store import TaskStoreUnavailable
from app.tasks.watch import Detailed
from app.upstream.errors import UpstreamError

log = structlog.get_logger("mcp_shim.tasks")

REAP_EVERY_S = 1.0


class Reaper:
    def __init__(self, held: Held, detailed: Detailed) -> None:
        self._held = held
        # A task's DetailedTask as tasks/get gives it, which files a settled
        # one's record and releases it (app/tasks/serve.py).
        self._detailed = detailed
        self._reaper: asyncio.Task[None] | None = None
        # Settling finished tasks (their result kept, their session released).
        self._settling: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._reap())

    def on_settled(self, task_id: str, owner: str) -> Callable[[], None]:
        """Once a task's payload is in, its result goes to the store and its
        upstream session (or lane) is released at once, not at the next poll:
        a client that never polls again holds nothing but the record."""

        async def settle() -> None:
            try:
                await self._detailed(task_id, owner)
            except (UpstreamError, TaskStoreUnavailable) as exc:
                log.info("task_settle_deferred", error=exc.message)

        def settled() -> None:
            task = asyncio.get_running_loop().create_task(settle())
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)

        return settled

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            try:
                await self._reap_once()
            except TaskStoreUnavailable:
                pass  # logged by the store; the next round tries again

    async def _reap_once(self) -> None:
        held = self._held
        now = time.monotonic()
        for live in [t for t in held.live.values() if t.deadline <= now]:
            log.info("task_expired", settled=live.settled.is_set())
            await held.release(live, cancel_upstream=True)
        for live in [t for t in held.live.values() if (t.hidden_until or now) < now]:
            log.info("task_input_round_abandoned")
            await held.store.delete(live.owner, live.task_id)
            await held.release(live, cancel_upstream=True)
        for task in [t for t in held.own.values() if t.deadline <= now]:
            log.info("task_expired", settled=task.settled.is_set(), run_by="gateway")
            await held.release_own(task)

    # -- a rolling restart -------------------------------------------------

    async def wind_down(self, grace_s: float, *, shared: bool) -> WindDown:
        """SIGTERM (app/wiring.py `drain`): the running tasks get up to `grace_s` to
        finish, their results filed in the store; the rest are dropped (cancelled
        upstream, a `failed` record left for their next poll). None is handed over:
        a 2025-11-25 task id is valid only on the upstream session that created it,
        which no other replica can take over (app/tasks/shutdown.py)."""
        tasks: list[LiveTask | own.OwnTask] = [*self._held.live.values(), *self._held.own.values()]
        running = [
            Running(t.owner, t.task_id, self._finishing(t.task_id, t.owner, t.settled))
            for t in tasks
            if not t.released
        ]
        return await wind_down(
            self._held.store, running, grace_s, shared=shared, on_drop=self._drop
        )

    def _finishing(self, task_id: str, owner: str, settled: asyncio.Event) -> asyncio.Task[None]:
        """The end of a task's work: its payload in, and its record filed."""

        async def finish() -> None:
            await settled.wait()
            try:
                await self._detailed(task_id, owner)
            except (UpstreamError, TaskStoreUnavailable) as exc:
                log.info("task_settle_deferred", error=exc.message)

        return asyncio.get_running_loop().create_task(finish())

    async def _drop(self, task: Running) -> None:
        """A task the grace period did not see end: cancelled upstream, and its
        record made `failed`, which any replica answers with a shared store."""
        live = self._held.live.get(task.task_id)
        if live is not None:
            await self._held.release(live, cancel_upstream=True)
        held = self._held.own.get(task.task_id)
        if held is not None:
            await self._held.release_own(held)
        record = await self._held.store.get(task.owner, task.task_id)
        if record is None:
            return
        why = (
            "Internal error: the gateway stopped before the task finished "
            "(MCP_SHIM_SHUTDOWN_GRACE_S); it was cancelled"
        )
        fields = {**record["fields"], "status": "failed", "statusMessage": why}
        inline = {"error": {"code": INTERNAL_ERROR, "message": why}}
        await self._held.store.update(
            task.owner, task.task_id, {"fields": fields, "inline": inline}
        )

    # -- shutdown ----------------------------------------------------------

    async def stop(self) -> None:
        """The reaping stopped; then, once its watchers are closed (app/tasks/
        bridge.py `aclose`), `drop_all`."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper

    async def drop_all(self) -> None:
        """Settling given its moment, then every task still held let go (those
        still running cancelled upstream)."""
        held = self._held
        for settling in list(self._settling):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(settling, 2.0)
        running = [t for t in held.live.values() if not t.settled.is_set()]
        running_own = [t for t in held.own.values() if not t.settled.is_set()]
        if running or running_own:
            log.warning("tasks_dropped_at_shutdown", running=len(running) + len(running_own))
        for live in list(held.live.values()):
            with contextlib.suppress(Exception):
                await held.release(live, cancel_upstream=True)
        for task in list(held.own.values()):
            with contextlib.suppress(Exception):
                await held.release_own(task)
