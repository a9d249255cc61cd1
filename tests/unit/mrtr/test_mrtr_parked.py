"""The registry of parked exchanges (app/mrtr/parked.py): checkout, TTL, bound."""

from __future__ import annotations

import asyncio

import pytest

from app.mrtr.parked import ParkedRegistry, RegistryFull
from tests.waiting import until


def registry(max_parked: int = 10) -> tuple[ParkedRegistry[str], list[str]]:
    expired: list[str] = []
    return ParkedRegistry(max_parked=max_parked, on_expire=expired.append), expired


async def test_take_checks_out_once() -> None:
    parked, _ = registry()
    parked.park("a", "exchange-a", 10, new=True)
    assert parked.peek("a") == "exchange-a"
    taken = parked.take("a")
    assert taken is not None and taken[0] == "exchange-a" and 9 < taken[1] <= 10
    assert parked.take("a") is None  # a second retry with the same state finds nothing
    assert parked.peek("a") is None and len(parked) == 0


async def test_expiry_removes_and_hands_over() -> None:
    parked, expired = registry()
    parked.park("a", "exchange-a", 0.05, new=True)
    parked.park("b", "exchange-b", 5, new=True)
    await until(lambda: expired, what="a's TTL to end")
    assert expired == ["exchange-a"]
    assert parked.peek("a") is None and parked.peek("b") == "exchange-b"


async def test_taken_exchanges_do_not_expire() -> None:
    parked, expired = registry()
    parked.park("a", "exchange-a", 0.05, new=True)
    assert parked.take("a") is not None
    # Past the TTL on the loop's clock (timers run in order of their time):
    # the deadline passing is the behaviour under test.
    await asyncio.sleep(0.06)  # the behaviour under test
    assert expired == []


async def test_parking_again_resets_the_deadline() -> None:
    parked, expired = registry()
    parked.park("a", "round-1", 0.05, new=True)
    parked.park("a", "round-2", 5, new=False)
    await asyncio.sleep(0.06)  # the behaviour under test: past the first deadline
    assert expired == [] and parked.peek("a") == "round-2"


async def test_bound_applies_to_new_exchanges_only() -> None:
    parked, _ = registry(max_parked=2)
    parked.park("a", "a", 10, new=True)
    parked.park("b", "b", 10, new=True)
    assert not parked.has_room()
    with pytest.raises(RegistryFull):
        parked.park("c", "c", 10, new=True)
    taken = parked.take("a")
    assert taken is not None
    parked.park("b2", "b2", 10, new=True)  # a's slot was freed by the checkout
    parked.park("a", "a", 10, new=False)  # its next round is never turned away
    assert len(parked) == 3


async def test_drain_cancels_every_timer() -> None:
    parked, expired = registry()
    parked.park("a", "a", 0.05, new=True)
    parked.park("b", "b", 0.05, new=True)
    assert sorted(parked.drain()) == ["a", "b"]
    await asyncio.sleep(0.06)  # the behaviour under test: past both deadlines
    assert expired == [] and len(parked) == 0
