"""Parked exchanges out of the collector's full passes (app/mrtr/shelter.py).

1,000 parked calls put some 306,000 long-lived objects in the collector's
oldest generation; every full pass walked them all (364 ms per pass, up to
1.7 s while calls parked: bench/parked.py --gc)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from app.mrtr.parked import ParkedRegistry
from app.mrtr.shelter import Shelter
from tests.waiting import until


class Calls:
    def __init__(self) -> None:
        self.log: list[str] = []

    def shelter(self, **kwargs: Any) -> Shelter:
        def collect(generation: int) -> int:
            self.log.append(f"collect{generation}")
            return 0

        return Shelter(
            freeze=lambda: self.log.append("freeze"),
            unfreeze=lambda: self.log.append("unfreeze"),
            collect=collect,
            **kwargs,
        )


def test_freezes_each_time_the_parked_calls_grew_by_a_quarter() -> None:
    calls = Calls()
    shelter = calls.shelter(min_parked=4)
    for count in range(1, 21):
        shelter.parked(count)
    # 4 (the minimum), then 5 = 4 x 1.25, 7 >= 6.25, 9 >= 8.75, 12 >= 11.25, 15, 19:
    # a handful of freezes for 20 parks, none below the minimum.
    assert calls.log == ["freeze"] * 7
    assert shelter.frozen_at == 19


def test_unfreezes_once_drained() -> None:
    calls = Calls()
    shelter = calls.shelter(min_parked=4)
    shelter.parked(100)
    calls.log.clear()
    for count in range(99, 0, -1):
        shelter.left(count)
    assert calls.log == []  # still parked: their state stays out of sight
    shelter.left(0)
    # One full pass over what was frozen frees what the ended calls left in
    # cycles; then the start-up heap is frozen again.
    assert calls.log == ["unfreeze", "collect2", "freeze"]
    assert shelter.frozen_at == 0
    calls.log.clear()
    shelter.left(0)
    shelter.parked(3)  # under the minimum: nothing frozen, nothing to undo
    shelter.left(0)
    assert calls.log == []


async def test_registry_tells_the_shelter() -> None:
    calls = Calls()
    registry: ParkedRegistry[str] = ParkedRegistry(
        max_parked=100, on_expire=lambda _: None, shelter=calls.shelter(min_parked=8)
    )
    for i in range(8):
        registry.park(str(i), "x", 10, new=True)
    assert calls.log == ["freeze"]
    for i in range(8):
        assert registry.take(str(i)) is not None
    assert calls.log == ["freeze", "unfreeze", "collect2", "freeze"]
    calls.log.clear()
    for i in range(8):
        registry.park(f"short{i}", "x", 0.01, new=True)
    await until(lambda: len(registry) == 0, what="the 8 short ones to expire")  # expiries leave too
    assert calls.log == ["freeze", "unfreeze", "collect2", "freeze"]


class Held:
    """Stands for a parked call's state: tracked objects, some in a cycle."""

    def __init__(self) -> None:
        self.parts = [[i] for i in range(300)]
        self.me = self


@pytest.fixture
def restore_gc() -> Any:
    yield
    gc.unfreeze()  # what this test froze goes back to the collector
    gc.collect()


async def test_parked_state_leaves_full_passes_and_its_cycles_are_freed(restore_gc: Any) -> None:
    gc.collect()
    gc.freeze()  # as the gateway does after start-up
    baseline = len(gc.get_objects(2))
    registry: ParkedRegistry[Held] = ParkedRegistry(
        max_parked=1000, on_expire=lambda _: None, shelter=Shelter()
    )
    for i in range(400):
        registry.park(str(i), Held(), 60, new=True)
    gc.collect(1)  # what is still young is promoted, as a full pass would find it
    # 400 x 301 tracked objects parked: a full pass does not walk them (without
    # the shelter the oldest generation holds them all: 120,403 objects).
    assert len(gc.get_objects(2)) - baseline < 400 * 301 // 4
    frozen = gc.get_freeze_count()
    for i in range(400):
        registry.take(str(i))
    # Drained: what the calls left in cycles (each Held refers to itself) was freed
    # by the one pass after the unfreeze, not kept frozen.
    assert gc.get_freeze_count() < frozen - 400 * 301 // 2
    assert not [o for o in gc.get_objects() if isinstance(o, Held)]
