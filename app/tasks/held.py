"""What this replica holds of its tasks, shared by the parts of the task bridge
(app/tasks/bridge.py): the upstream tasks it follows (app/tasks/live.py, each
pinning its upstream session), the ones it runs itself (app/tasks/own.py),
what they hold against the tasks' bounds (app/tasks/bounds.py), and the one
way each is let go.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from app.call import Message
from app.cluster.sealing import Sealer
from app.config import TaskLimits
from app.mrtr.lanes import Lanes
from app.tasks import own
from app.tasks.bounds import UNBOUNDED, TaskBounds
from app.tasks.live import LiveTask
from app.tasks.store import TaskStore
from app.tasks.upstream import ask
from app.upstream.errors import UpstreamError
from app.upstream.sessions.pool import SessionPool
from translators import tasks as wire


@dataclass(frozen=True, slots=True)
class TaskSettings:
    ttl_ms: int  # asked of the upstream, and the record's TTL if it names none
    max_per_owner: int  # live tasks per credential (the store enforces it too)
    poll_ms: int  # pollIntervalMs when the upstream names none
    max_result_bytes: int
    replica: str  # this replica's name in task ids
    # An input round before the task is shown (tasks-mrtr-composition): how long
    # a new task of a `required` tool is watched for a first question, how long
    # later questions are gathered with it, how long the round waits for its retry.
    round_wait_s: float = 0.5
    quiet_s: float = 0.05
    round_ttl_s: float = 120.0
    # MCP_SHIM_TASK_TOOLS: tools the gateway runs as tasks itself (app/tasks/own.py).
    tools: tuple[str, ...] = ()
    # What tasks may hold of the upstream (app/tasks/bounds.py).
    limits: TaskLimits = UNBOUNDED


class Held:
    def __init__(
        self,
        pool: SessionPool,
        store: TaskStore,
        sealer: Sealer,
        settings: TaskSettings,
        lanes: Lanes | None = None,
    ) -> None:
        self.pool = pool
        self.store = store
        self.sealer = sealer
        self.settings = settings
        # The MRTR bridge's lanes, for the tasks the gateway runs itself.
        self.lanes = lanes
        self.live: dict[str, LiveTask] = {}
        self.own: dict[str, own.OwnTask] = {}
        self.bounds = TaskBounds(settings.limits)

    def fields(self, live: LiveTask, task: Message) -> Message:
        """The task's fields for the client; its ttlMs at most MCP_SHIM_TASK_TTL_MS
        (the gateway keeps the task no longer than that, whatever the upstream)."""
        fields = wire.task_fields(task, live.task_id, self.settings.poll_ms)
        ttl = fields.get("ttlMs")
        if not isinstance(ttl, int) or ttl > self.settings.ttl_ms:
            fields["ttlMs"] = self.settings.ttl_ms
        return fields

    async def release(self, live: LiveTask, *, cancel_upstream: bool) -> None:
        if live.released:
            return
        live.released = True
        self.live.pop(live.task_id, None)
        try:
            if cancel_upstream and not live.settled.is_set():
                with contextlib.suppress(UpstreamError):
                    await ask(live.pooled, "tasks/cancel", {"taskId": live.upstream_id})
            await live.stop()
        finally:
            live.hold.release()
            self.pool.release(live.pooled)

    async def release_own(self, task: own.OwnTask) -> None:
        self.own.pop(task.task_id, None)
        await task.release()
