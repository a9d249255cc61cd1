"""The tasks extension for modern clients in front of a 2025-11-25 server.

What a 2026-07-28 client gets (docs/tasks.md): the extension
`io.modelcontextprotocol/tasks` in `server/discover` when the upstream runs
tasks for `tools/call`, and each tool's `execution.taskSupport`
(app/tasks/advertise.py); a `tools/call` of a task-supporting tool from a
caller that declares the extension becomes the upstream's task, an input round
before it is shown if it asks at once (app/tasks/create.py); `tasks/get`,
`tasks/update`, `tasks/cancel` answered here or relayed to the replica running
the task (app/tasks/serve.py); the tools of `MCP_SHIM_TASK_TOOLS` run as tasks
by the gateway itself (app/tasks/own.py); `notifications/tasks` on the owner's
`subscriptions/listen` streams (app/tasks/watch.py); the end of every task:
settled, expired, wound down on SIGTERM, dropped at shutdown (app/tasks/reap.py).

Records go to the task store (app/tasks/store.py) under the caller's
credential hash: its TTL, and the bound on live tasks per credential. The
upstream task itself lives on one upstream session of this replica
(app/tasks/live.py, held in app/tasks/held.py). `TaskBridge` wires the parts
once; the modern front and subscriptions/listen call the part they need. The
call a task starts from is translated as every modern call is
(app/mrtr/forwarder.py).
"""

from __future__ import annotations

from collections.abc import Callable

from app.cluster.forwarding import ReplicaForwarder
from app.cluster.sealing import Sealer
from app.mrtr.forwarder import Forwarder
from app.mrtr.lanes import Lanes
from app.tasks.advertise import Advertiser
from app.tasks.create import Resume, RunAsTask, TaskCreator
from app.tasks.held import Held, TaskSettings
from app.tasks.reap import Reaper
from app.tasks.serve import METHODS, TaskServer
from app.tasks.store import TaskStore
from app.tasks.watch import Watchers
from app.upstream.sessions.pool import SessionPool

__all__ = ["METHODS", "Resume", "RunAsTask", "TaskBridge", "TaskSettings"]


class TaskBridge:
    """The parts of the extension, wired once; callers use the part they need:
    `advertiser` (server/discover, tools/list), `creator` (a tools/call:
    plan, create, resume), `server` (tasks/get, tasks/update, tasks/cancel),
    `watchers` (notifications/tasks on subscriptions/listen), `reaper`
    (every task's end)."""

    def __init__(
        self,
        pool: SessionPool,
        store: TaskStore,
        sealer: Sealer,
        settings: TaskSettings,
        upstream: Forwarder,
        lanes: Lanes | None = None,
        forwarder: ReplicaForwarder | None = None,
    ) -> None:
        self._held = Held(pool, store, sealer, settings, lanes)
        self.bounds = self._held.bounds
        self.advertiser = Advertiser(settings.tools, lanes)
        self.server = TaskServer(self._held, self.advertiser, forwarder)
        # subscriptions/listen streams watching a task (notifications/tasks).
        self.watchers = Watchers(self.server.detailed, sealer, store)
        self.reaper = Reaper(self._held, self.server.detailed)
        self.creator = TaskCreator(
            self._held, self.advertiser, self._on_change, self.reaper.on_settled, upstream
        )

    def start(self) -> None:
        self.reaper.start()

    @property
    def live_tasks(self) -> int:
        return len(self._held.live) + len(self._held.own)

    def _on_change(self, task_id: str) -> Callable[[], None]:
        return lambda: self.watchers.changed(task_id)

    async def aclose(self) -> None:
        await self.reaper.stop()
        await self.watchers.aclose()
        await self.reaper.drop_all()
        await self._held.store.close()
