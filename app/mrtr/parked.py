"""The registry of parked exchanges: by id, each with a deadline, at most a bounded number.

An exchange is *parked* between the gateway's `input_required` answer and the
client's retry. A retry looks at it with ``peek`` first (a retry refused then
leaves it parked, unchanged), then checks it out with ``take`` (so two
retries carrying the same state cannot both resume it); the bridge parks it
again for the next round, or ends it. An entry not taken before its deadline
is removed and handed to ``on_expire``, which ends the upstream call cleanly.

The bound applies to *new* exchanges: one that is already known (re-parked
for its next round) is never turned away, so a caller in the middle of an
exchange does not lose it because others arrived.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.mrtr.shelter import Shelter

T = TypeVar("T")


class RegistryFull(Exception):
    """No room for another parked exchange (MCP_SHIM_MAX_PARKED)."""


@dataclass(slots=True)
class _Entry(Generic[T]):
    item: T
    deadline: float  # event-loop time
    timer: asyncio.TimerHandle


class ParkedRegistry(Generic[T]):
    def __init__(
        self,
        *,
        max_parked: int,
        on_expire: Callable[[T], None],
        shelter: Shelter | None = None,
    ) -> None:
        self._max = max_parked
        self._on_expire = on_expire
        self._entries: dict[str, _Entry[T]] = {}
        # Told how many are parked after each change: keeps them out of full
        # garbage collections (app/mrtr/shelter.py).
        self._shelter = shelter

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def max_parked(self) -> int:
        return self._max

    def has_room(self) -> bool:
        return len(self._entries) < self._max

    def park(self, exchange_id: str, item: T, ttl_s: float, *, new: bool) -> None:
        if new and not self.has_room():
            raise RegistryFull
        self._drop_timer(exchange_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ttl_s
        timer = loop.call_at(deadline, self._expire, exchange_id)
        self._entries[exchange_id] = _Entry(item, deadline, timer)
        if self._shelter is not None:
            self._shelter.parked(len(self._entries))

    def peek(self, exchange_id: str) -> T | None:
        entry = self._entries.get(exchange_id)
        return entry.item if entry is not None else None

    def take(self, exchange_id: str) -> tuple[T, float] | None:
        """Check an exchange out: (item, seconds it had left), or None if not parked here."""
        entry = self._entries.pop(exchange_id, None)
        if entry is None:
            return None
        entry.timer.cancel()
        self._left()
        return entry.item, entry.deadline - asyncio.get_running_loop().time()

    def _drop_timer(self, exchange_id: str) -> None:
        entry = self._entries.pop(exchange_id, None)
        if entry is not None:
            entry.timer.cancel()

    def _expire(self, exchange_id: str) -> None:
        entry = self._entries.pop(exchange_id, None)
        if entry is not None:
            self._left()
            self._on_expire(entry.item)

    def _left(self) -> None:
        if self._shelter is not None:
            self._shelter.left(len(self._entries))

    def drain(self) -> list[T]:
        """Remove every entry (shutdown); the caller ends them."""
        items = []
        for entry in self._entries.values():
            entry.timer.cancel()
            items.append(entry.item)
        self._entries.clear()
        return items
