"""Where the gateway keeps its records of tasks: the contract every store meets.

A record is a JSON object (so that a store on another engine can hold it
as it is) filed under its owner, the caller's credential hash, and the task
id the caller sees. A record never outlives its TTL; how many live records
one owner may hold, and how large one may be, is the store's to bound, so
that one credential's tasks never crowd out another's.

The in-memory store is the default. A store on an external engine
(`MCP_SHIM_TASK_STORE=redis://...`, app/tasks/redis_store.py) is what lets a
finished result outlive a restart and be read from any replica without a relay.

Refusals (the owner's bound, a record over the size bound) are values that
`create` returns. An engine that cannot be reached is no refusal but a fault
of the moment: `get`, `update`, `live` and `delete` have no room for it in
their results (None, False, [] already mean "no such task"), so a store on an
engine raises `TaskStoreUnavailable`, its own exception and never the engine
client's, from one place, with one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from app import jsonio
from app.config import DEFAULT_MAX_RECORD_BYTES

log = structlog.get_logger("mcp_shim.tasks.store")

Record = dict[str, Any]

MAX_TASKS_SETTING = "MCP_SHIM_MAX_TASKS_PER_CREDENTIAL"
MAX_RECORD_SETTING = "MCP_SHIM_MAX_TASK_RESULT_BYTES"
# The memory store's sweep of expired records: how often, and at most how many
# expiries one pass looks at before it lets the loop run (then goes on).
SWEEP_EVERY_S = 1.0
SWEEP_MAX = 1000


@dataclass(frozen=True)
class TaskLimitReached:
    """A refusal as a value: the owner already holds `limit` live tasks."""

    limit: int

    @property
    def message(self) -> str:
        """What the caller is told: the bound, and the setting that sets it."""
        return (
            f"this credential already holds {self.limit} live tasks ({MAX_TASKS_SETTING}); "
            "wait for one to finish or expire"
        )


@dataclass(frozen=True)
class TaskRecordTooLarge(TaskLimitReached):
    """A refusal as a value: the record's JSON is `size` bytes, over the `limit`.

    A kind of `TaskLimitReached` (a bound of the store was reached) so that it
    fits `create`'s result as the contract states it; tell them apart with
    isinstance, or just pass `message` on."""

    size: int

    @property
    def message(self) -> str:
        return (
            f"the task's record would be {self.size} bytes, over the limit of {self.limit} "
            f"({MAX_RECORD_SETTING})"
        )


class TaskStoreUnavailable(Exception):
    """The store's engine could not be reached in time, or failed; `message` says
    so for the caller (it names no address and no secret)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def encoded(record: Record, max_bytes: int) -> bytes | TaskRecordTooLarge:
    """The record as the JSON a store keeps, or the refusal when it is over `max_bytes`."""
    data = jsonio.dumps(record)
    if len(data) > max_bytes:
        return TaskRecordTooLarge(limit=max_bytes, size=len(data))
    return data


def record_refusal(record: Record, max_bytes: int) -> TaskRecordTooLarge | None:
    """The refusal a store would give this record, or None: for `update`, whose
    False cannot say why (check first, then store a smaller record instead)."""
    data = encoded(record, max_bytes)
    return data if isinstance(data, TaskRecordTooLarge) else None


class TaskStore(Protocol):
    async def create(
        self, owner: str, task_id: str, record: Record, ttl_ms: int
    ) -> TaskLimitReached | None:
        """File a new record that expires `ttl_ms` from now; a refusal when the
        owner is at its bound or the record is over the size bound (nothing is
        filed then)."""
        ...

    async def get(self, owner: str, task_id: str) -> Record | None:
        """The record, or None: unknown, expired, or another owner's."""
        ...

    async def update(self, owner: str, task_id: str, record: Record) -> bool:
        """Replace a live record, keeping its expiry; False when there is none,
        and when the new record is over the size bound (the live one is kept:
        `record_refusal` tells a caller beforehand)."""
        ...

    async def delete(self, owner: str, task_id: str) -> None: ...

    async def live(self, owner: str) -> list[str]:
        """The ids of the owner's live tasks, oldest first."""
        ...

    async def close(self) -> None: ...


class MemoryTaskStore:
    """Records in this process: an owner's expired ones are dropped on its every
    access, and everyone's by a sweep (`start`) whether or not its owner comes
    back, so a result nobody polls holds memory no longer than its TTL."""

    def __init__(
        self,
        max_per_owner: int,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_per_owner = max_per_owner
        self.max_record_bytes = max_record_bytes
        self._clock = clock
        # owner -> task id -> (deadline on the monotonic clock, record)
        self._owners: dict[str, dict[str, tuple[float, Record]]] = {}
        # (deadline, owner, task id) of every record filed, soonest first; an
        # entry whose record is gone or was filed again is skipped by the sweep.
        self._expiries: list[tuple[float, str, str]] = []
        self._records = 0
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def records(self) -> int:
        """Records held, expired or not."""
        return self._records

    def start(self) -> None:
        """Sweep expired records every SWEEP_EVERY_S until `close`."""
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            expired = 0
            while True:
                swept, more = self.sweep()
                expired += swept
                if not more:
                    break
                await asyncio.sleep(0)  # bounded work per turn of the loop
            if expired:
                log.info("task_records_expired", records=expired, left=self.records)

    def sweep(self, limit: int = SWEEP_MAX) -> tuple[int, bool]:
        """Drop records past their deadline, looking at `limit` expiries at most:
        how many were dropped, and whether more may be due."""
        now = self._clock()
        dropped = 0
        for _ in range(limit):
            if not self._expiries or self._expiries[0][0] > now:
                return dropped, False
            deadline, owner, task_id = heapq.heappop(self._expiries)
            tasks = self._owners.get(owner)
            entry = tasks.get(task_id) if tasks is not None else None
            if tasks is None or entry is None or entry[0] != deadline:
                continue  # deleted, or filed again with a deadline of its own
            del tasks[task_id]
            self._records -= 1
            if not tasks:
                del self._owners[owner]
            dropped += 1
        return dropped, bool(self._expiries) and self._expiries[0][0] <= now

    def _live(self, owner: str) -> dict[str, tuple[float, Record]]:
        tasks = self._owners.get(owner)
        if tasks is None:
            return {}
        now = self._clock()
        for task_id in [t for t, (deadline, _) in tasks.items() if deadline <= now]:
            del tasks[task_id]
            self._records -= 1
        if not tasks:
            del self._owners[owner]
        return tasks

    async def create(
        self, owner: str, task_id: str, record: Record, ttl_ms: int
    ) -> TaskLimitReached | None:
        too_large = record_refusal(record, self.max_record_bytes)
        if too_large is not None:
            return too_large
        tasks = self._live(owner)
        if len(tasks) >= self.max_per_owner:
            return TaskLimitReached(self.max_per_owner)
        deadline = self._clock() + ttl_ms / 1000
        if task_id not in tasks:
            self._records += 1
        self._owners.setdefault(owner, tasks)[task_id] = (deadline, record)
        heapq.heappush(self._expiries, (deadline, owner, task_id))
        if len(self._expiries) > 2 * self.records + 64:
            # Records deleted before their deadline leave entries behind: never
            # more than as many again as there are records.
            self._expiries = [
                (due, o, t) for o, ts in self._owners.items() for t, (due, _) in ts.items()
            ]
            heapq.heapify(self._expiries)
        return None

    async def get(self, owner: str, task_id: str) -> Record | None:
        entry = self._live(owner).get(task_id)
        return None if entry is None else entry[1]

    async def update(self, owner: str, task_id: str, record: Record) -> bool:
        tasks = self._live(owner)
        entry = tasks.get(task_id)
        if entry is None or record_refusal(record, self.max_record_bytes) is not None:
            return False
        tasks[task_id] = (entry[0], record)
        return True

    async def delete(self, owner: str, task_id: str) -> None:
        tasks = self._live(owner)
        if tasks.pop(task_id, None) is not None:
            self._records -= 1
            if not tasks:
                self._owners.pop(owner, None)

    async def live(self, owner: str) -> list[str]:
        return list(self._live(owner))

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        self._owners.clear()
        self._expiries.clear()
        self._records = 0
