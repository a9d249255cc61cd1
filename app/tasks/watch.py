"""`notifications/tasks` on `subscriptions/listen` streams (SEP-2663 `taskIds`).

A listen stream that names a task (and owns it: `watch` checks) hears the
task's status at once and at every change the gateway sees, as `tasks/get`
would give it (the result or error inlined once terminal). The same status is
never sent twice to the watchers of a task; a terminal one ends the watch.
Offering to a mailbox never waits (app/subscriptions/mailbox.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from app.call import Message, ModernCall
from app.cluster.sealing import Sealer
from app.rejections import Rejection
from app.subscriptions.mailbox import Mailbox
from app.tasks import ids
from app.tasks.replies import missing_extension
from app.tasks.store import TaskStore, TaskStoreUnavailable
from app.upstream.errors import UpstreamError
from app.upstream.sessions.pool import credential_hash
from translators import tasks as wire

log = structlog.get_logger("mcp_shim.tasks")

# (task id, owner) -> the task's DetailedTask now, or None if it is gone.
Detailed = Callable[[str, str], Awaitable[Message | None]]


class Watchers:
    """The subscriptions/listen streams watching tasks: what listen calls
    (app/subscriptions/listen.py, its `TaskWatch`)."""

    def __init__(self, detailed: Detailed, sealer: Sealer, store: TaskStore) -> None:
        self._detailed = detailed
        self._sealer = sealer
        self._store = store
        self._boxes: dict[str, set[Mailbox]] = {}
        self._owners: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._sent: dict[str, tuple[Any, ...]] = {}
        self._background: set[asyncio.Task[None]] = set()

    def add(self, task_id: str, owner: str, mailbox: Mailbox) -> None:
        """Watch `task_id` on `mailbox`; its status is announced at once."""
        self._boxes.setdefault(task_id, set()).add(mailbox)
        self._owners[task_id] = owner
        self._sent.pop(task_id, None)  # the new stream hears the status now
        self.changed(task_id)

    @staticmethod
    def task_watch_refusal(call: ModernCall, task_ids: tuple[str, ...]) -> Rejection | None:
        """SEP-2663: a listen filter naming task ids needs the extension declared."""
        if wire.declares_extension(call.client_capabilities):
            return None
        return missing_extension(call.id)

    async def watch(
        self, authorization: str | None, task_ids: tuple[str, ...], mailbox: Mailbox
    ) -> tuple[str, ...]:
        """The task ids of a listen filter this caller owns and the gateway knows,
        each now watched on `mailbox`."""
        owner = credential_hash(authorization)
        watched = []
        for task_id in task_ids:
            if ids.open_for(self._sealer, task_id, ids.owner_of(owner)) is None:
                continue
            try:
                if await self._store.get(owner, task_id) is None:
                    continue
            except TaskStoreUnavailable:
                continue  # left out of the acknowledgment: the caller sees it is not watched
            self.add(task_id, owner, mailbox)
            watched.append(task_id)
        return tuple(watched)

    def unwatch(self, mailbox: Mailbox) -> None:
        for task_id in list(self._boxes):
            boxes = self._boxes[task_id]
            boxes.discard(mailbox)
            if not boxes:
                self._forget(task_id)

    def changed(self, task_id: str) -> None:
        """Something about the task changed (called synchronously, never waits)."""
        if task_id in self._boxes:
            task = asyncio.get_running_loop().create_task(self._announce(task_id))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _forget(self, task_id: str) -> None:
        self._boxes.pop(task_id, None)
        self._owners.pop(task_id, None)
        self._locks.pop(task_id, None)
        self._sent.pop(task_id, None)

    async def _announce(self, task_id: str) -> None:
        lock = self._locks.setdefault(task_id, asyncio.Lock())
        async with lock:
            owner = self._owners.get(task_id)
            if owner is None:
                return
            try:
                detailed = await self._detailed(task_id, owner)
            except UpstreamError as exc:
                log.info("task_status_unavailable", error=exc.message)
                return
            if detailed is None:
                return
            seen = (detailed.get("status"), tuple(sorted(detailed.get("inputRequests") or ())))
            if self._sent.get(task_id) == seen:
                return
            self._sent[task_id] = seen
            params = {k: v for k, v in detailed.items() if k != "resultType"}
            note = wire.status_notification(params)
            for box in list(self._boxes.get(task_id, ())):
                box.offer(note)
            if detailed.get("status") in wire.TERMINAL:
                self._forget(task_id)

    async def aclose(self) -> None:
        for task in list(self._background):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
