"""Parked exchanges kept out of the garbage collector's full passes.

A parked call holds about 310 objects the collector tracks (its two upstream
SSE streams with their aiohttp and httpx layers, its tasks, its lane), all of
them long-lived: 1,000 parked calls put some 306,000 objects in the oldest
generation, and every full pass walks all of them, stopping the event loop
for every call in flight (364 ms per pass measured with 1,000 parked, load 6;
passes up to 1.7 s while the calls were parking: bench/parked.py --gc).
CPython runs a full pass each time the objects promoted
since the last one exceed a quarter of the oldest generation, so while calls
park these passes come one after another, each longer than the last.

``gc.freeze()`` moves every tracked object out of the collector's sight (in
CPython a constant-time list splice); the gateway already does it once after
start-up (app/serving/server.py). The shelter does it again each time the number of
parked calls has grown by a quarter (from `min_parked` on), so full passes
only walk what is not parked. Once no call is parked any more it undoes it:
``gc.unfreeze()``, one full pass, ``gc.freeze()`` again (the start-up heap).
That pass frees what the ended calls left in reference cycles (about 40
objects each, measured) and whatever else was garbage at a freeze; until
then they stay frozen, bounded by what was alive at the freezes (a dozen
freezes take the count from 64 to 1,000). Undoing it earlier, each time a
quarter had drained, cost more than it saved: that pass walks the start-up
heap and every call still parked (bench/parked.py --gc --shelter-ab).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import structlog

log = structlog.get_logger("mcp_shim.mrtr")


class Shelter:
    def __init__(
        self,
        *,
        min_parked: int = 64,
        growth: float = 1.25,
        freeze: Callable[[], None] = gc.freeze,
        unfreeze: Callable[[], None] = gc.unfreeze,
        collect: Callable[[int], int] = gc.collect,
    ) -> None:
        self._min = min_parked
        self._growth = growth
        self._freeze = freeze
        self._unfreeze = unfreeze
        self._collect = collect
        # Parked calls at the last freeze; 0: none of them frozen.
        self.frozen_at = 0

    def parked(self, count: int) -> None:
        """An exchange was parked; `count` are parked now."""
        if count >= self._min and count >= self.frozen_at * self._growth:
            self._freeze()
            self.frozen_at = count

    def left(self, count: int) -> None:
        """An exchange left the registry (retried, expired); `count` are parked now."""
        if self.frozen_at and count == 0:
            # What the ended calls (and whatever else was alive at a freeze) left
            # in cycles is freed by this one pass; then the start-up heap goes out
            # of sight again, as app/serving/server.py left it.
            self._unfreeze()
            freed = self._collect(2)
            self._freeze()
            log.info("mrtr_heap_unfrozen", frozen_at=self.frozen_at, freed=freed)
            self.frozen_at = 0
