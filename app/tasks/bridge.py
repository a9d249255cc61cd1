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
and is what the rest of the gateway calls.
"""

from __future__ import annotations

from collections.abc import Callable

from app.call import CallState, Message, ModernCall, Outgoing
from app.mrtr.forwarding import ReplicaForwarder
from app.mrtr.lanes import Lanes
from app.mrtr.state import Sealer
from app.rejections import Rejection
from app.subscriptions.mailbox import Mailbox
from app.tasks import watch
from app.tasks.advertise import Advertiser
from app.tasks.create import Resume, RunAsTask, TaskCreator
from app.tasks.held import Held, TaskSettings
from app.tasks.reap import Reaper
from app.tasks.serve import METHODS, TaskServer
from app.tasks.shutdown import WindDown
from app.tasks.store import TaskStore
from app.tasks.watch import Watchers
from app.upstream.pool import PooledSession, SessionPool

__all__ = ["METHODS", "Resume", "RunAsTask", "TaskBridge", "TaskSettings"]


class TaskBridge:
    def __init__(
        self,
        pool: SessionPool,
        store: TaskStore,
        sealer: Sealer,
        settings: TaskSettings,
        lanes: Lanes | None = None,
        forwarder: ReplicaForwarder | None = None,
    ) -> None:
        self._held = Held(pool, store, sealer, settings, lanes)
        self.bounds = self._held.bounds
        self._advertiser = Advertiser(settings.tools, lanes)
        self._server = TaskServer(self._held, self._advertiser, forwarder)
        # subscriptions/listen streams watching a task (notifications/tasks).
        self._watchers = Watchers(self._server.detailed)
        self._reaper = Reaper(self._held, self._server.detailed)
        self._creator = TaskCreator(
            self._held, self._advertiser, self._on_change, self._reaper.on_settled
        )

    def start(self) -> None:
        self._reaper.start()

    @property
    def live_tasks(self) -> int:
        return len(self._held.live) + len(self._held.own)

    # -- what the client is told (app/tasks/advertise.py) -------------------

    def discover_capabilities(self, pooled: PooledSession, caps: Message) -> Message:
        return self._advertiser.discover_capabilities(pooled, caps)

    def annotate_tools(self, pooled: PooledSession, upstream: Message, result: Message) -> Message:
        return self._advertiser.annotate_tools(pooled, upstream, result)

    # -- tools/call (app/tasks/create.py) ------------------------------------

    async def plan(
        self, call: ModernCall, pooled: PooledSession, authorization: str | None
    ) -> Rejection | ModernCall | RunAsTask | Resume:
        return await self._creator.plan(call, pooled, authorization)

    async def create(
        self,
        call: ModernCall,
        pooled: PooledSession,
        outbound: Message,
        authorization: str | None,
        state: CallState,
        mode: str,
    ) -> Outgoing:
        return await self._creator.create(call, pooled, outbound, authorization, state, mode)

    async def resume(
        self, call: ModernCall, resume: Resume, authorization: str | None, state: CallState
    ) -> Outgoing:
        return await self._creator.resume(call, resume, authorization, state)

    # -- tasks/get, tasks/update, tasks/cancel (app/tasks/serve.py) ----------

    async def serve(
        self, call: ModernCall, pooled: PooledSession, authorization: str | None, state: CallState
    ) -> Outgoing:
        return await self._server.serve(call, pooled, authorization, state)

    # -- notifications/tasks on subscriptions/listen (app/tasks/watch.py) ----

    def task_watch_refusal(self, call: ModernCall, task_ids: tuple[str, ...]) -> Rejection | None:
        return watch.task_watch_refusal(call, task_ids)

    async def watch(
        self, authorization: str | None, task_ids: tuple[str, ...], mailbox: Mailbox
    ) -> tuple[str, ...]:
        held = self._held
        return await watch.watch(
            self._watchers, held.sealer, held.store, authorization, task_ids, mailbox
        )

    def unwatch(self, mailbox: Mailbox) -> None:
        self._watchers.remove(mailbox)

    def _on_change(self, task_id: str) -> Callable[[], None]:
        return lambda: self._watchers.changed(task_id)

    # -- the end (app/tasks/reap.py) -----------------------------------------

    async def wind_down(self, grace_s: float, *, shared: bool) -> WindDown:
        return await self._reaper.wind_down(grace_s, shared=shared)

    async def aclose(self) -> None:
        await self._reaper.stop()
        await self._watchers.aclose()
        await self._reaper.drop_all()
        await self._held.store.close()
