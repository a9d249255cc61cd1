"""Where the gateway keeps its records of tasks: the contract every store meets.

A record is a JSON object (so that a store on another engine can hold it
as it is) filed under its owner, the caller's credential hash, and the task
id the caller sees. A record never outlives its TTL; how many live records
one owner may hold, and how large one may be, is the store's to bound, so
that one credential's tasks never crowd out another's.

The in-memory store is the default. A store on an external engine
(`MCP_SHIM_TASK_STORE=redis://...`) is what lets a finished result outlive a
restart and be read from any replica without a relay.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

Record = dict[str, Any]


@dataclass(frozen=True)
class TaskLimitReached:
    """A refusal as a value: the owner already holds `limit` live tasks."""

    limit: int


class TaskStore(Protocol):
    async def create(
        self, owner: str, task_id: str, record: Record, ttl_ms: int
    ) -> TaskLimitReached | None:
        """File a new record that expires `ttl_ms` from now; a refusal when the
        owner is at its bound (nothing is filed then)."""
        ...

    async def get(self, owner: str, task_id: str) -> Record | None:
        """The record, or None: unknown, expired, or another owner's."""
        ...

    async def update(self, owner: str, task_id: str, record: Record) -> bool:
        """Replace a live record, keeping its expiry; False when there is none."""
        ...

    async def delete(self, owner: str, task_id: str) -> None: ...

    async def live(self, owner: str) -> list[str]:
        """The ids of the owner's live tasks, oldest first."""
        ...

    async def close(self) -> None: ...


class MemoryTaskStore:
    """Records in this process, expired lazily on every access."""

    def __init__(self, max_per_owner: int) -> None:
        self.max_per_owner = max_per_owner
        # owner -> task id -> (deadline on the monotonic clock, record)
        self._owners: dict[str, dict[str, tuple[float, Record]]] = {}

    def _live(self, owner: str) -> dict[str, tuple[float, Record]]:
        tasks = self._owners.get(owner)
        if tasks is None:
            return {}
        now = time.monotonic()
        for task_id in [t for t, (deadline, _) in tasks.items() if deadline <= now]:
            del tasks[task_id]
        if not tasks:
            del self._owners[owner]
        return tasks

    async def create(
        self, owner: str, task_id: str, record: Record, ttl_ms: int
    ) -> TaskLimitReached | None:
        tasks = self._live(owner)
        if len(tasks) >= self.max_per_owner:
            return TaskLimitReached(self.max_per_owner)
        self._owners.setdefault(owner, tasks)[task_id] = (
            time.monotonic() + ttl_ms / 1000,
            record,
        )
        return None

    async def get(self, owner: str, task_id: str) -> Record | None:
        entry = self._live(owner).get(task_id)
        return None if entry is None else entry[1]

    async def update(self, owner: str, task_id: str, record: Record) -> bool:
        tasks = self._live(owner)
        entry = tasks.get(task_id)
        if entry is None:
            return False
        tasks[task_id] = (entry[0], record)
        return True

    async def delete(self, owner: str, task_id: str) -> None:
        self._live(owner).pop(task_id, None)

    async def live(self, owner: str) -> list[str]:
        return list(self._live(owner))

    async def close(self) -> None:
        self._owners.clear()
