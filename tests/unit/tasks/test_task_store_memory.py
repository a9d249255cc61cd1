"""The in-memory task store: owners kept apart, the per-owner bound, expiry."""

from __future__ import annotations

import asyncio

import pytest

from app.tasks import store as store_module
from app.tasks.store import MemoryTaskStore, TaskLimitReached


def test_owners_are_kept_apart_and_bounded() -> None:
    async def run() -> None:
        store = MemoryTaskStore(max_per_owner=2)
        assert await store.create("a", "t1", {"n": 1}, 60_000) is None
        assert await store.create("a", "t2", {"n": 2}, 60_000) is None
        assert await store.create("a", "t3", {"n": 3}, 60_000) == TaskLimitReached(2)
        assert await store.create("b", "t1", {"n": 9}, 60_000) is None
        assert await store.get("a", "t1") == {"n": 1}
        assert await store.get("b", "t2") is None
        assert await store.live("a") == ["t1", "t2"]
        assert await store.update("a", "t1", {"n": 5})
        assert not await store.update("b", "t2", {"n": 5})
        assert await store.get("a", "t1") == {"n": 5}
        await store.delete("a", "t1")
        assert await store.live("a") == ["t2"]

    asyncio.run(run())


def test_records_expire_at_their_ttl() -> None:
    async def run() -> None:
        now = [100.0]
        store = MemoryTaskStore(max_per_owner=1, clock=lambda: now[0])
        assert await store.create("a", "t1", {}, 1000) is None
        now[0] += 0.999
        assert await store.get("a", "t1") == {}
        now[0] += 0.002  # past its TTL
        assert await store.get("a", "t1") is None
        # The expired record no longer counts against the bound.
        assert await store.create("a", "t2", {}, 60_000) is None

    asyncio.run(run())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_expired_records_are_swept_without_their_owners_coming_back() -> None:
    # Records expired only on their owner's next use: 20 owners' results never
    # polled stayed in memory past their TTL, until each owner called again.
    async def run() -> None:
        clock = Clock()
        store = MemoryTaskStore(max_per_owner=4, clock=clock)
        for i in range(20):
            assert await store.create(f"owner-{i}", "t1", {"result": "x" * 100}, 3000) is None
        assert await store.create("late", "t1", {}, 10_000) is None
        clock.now += 2.9
        assert store.sweep() == (0, False) and store.records == 21
        clock.now += 0.2
        assert store.sweep() == (20, False)
        assert store.records == 1 and list(store._owners) == ["late"]
        assert await store.get("late", "t1") == {}

    asyncio.run(run())


def test_one_sweep_does_bounded_work() -> None:
    async def run() -> None:
        clock = Clock()
        store = MemoryTaskStore(max_per_owner=10, clock=clock)
        for i in range(25):
            assert await store.create(f"owner-{i % 5}", f"t{i}", {}, 1000) is None
        clock.now += 1.0
        assert store.sweep(limit=10) == (10, True)
        assert store.sweep(limit=10) == (10, True)
        assert store.sweep(limit=10) == (5, False)
        assert store.records == 0 and not store._owners

    asyncio.run(run())


def test_deleted_or_refiled_records_are_not_swept_early_and_leave_no_backlog() -> None:
    async def run() -> None:
        clock = Clock()
        store = MemoryTaskStore(max_per_owner=2, clock=clock)
        assert await store.create("a", "t1", {"v": 1}, 1000) is None
        await store.delete("a", "t1")
        clock.now += 0.5
        # The same id filed again: its own, later deadline holds.
        assert await store.create("a", "t1", {"v": 2}, 1000) is None
        clock.now += 0.6
        assert store.sweep() == (0, False)
        assert await store.get("a", "t1") == {"v": 2}
        # Churn (created, deleted) keeps the expiry index within its bound.
        for i in range(1000):
            assert await store.create("b", f"c{i}", {}, 60_000) is None
            await store.delete("b", f"c{i}")
        assert store.records == 1 and len(store._expiries) <= 2 * store.records + 65

    asyncio.run(run())


def test_the_sweep_runs_until_the_store_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    # The loop itself: one pass per SWEEP_EVERY_S, a bounded batch per turn.
    async def run() -> None:
        clock = Clock()
        store = MemoryTaskStore(max_per_owner=10, clock=clock)
        for i in range(30):
            assert await store.create(f"o{i}", "t", {}, 1000) is None
        clock.now += 2
        passes: list[int] = []
        swept = asyncio.Event()
        real = store.sweep

        def counting(limit: int = 7) -> tuple[int, bool]:
            dropped, more = real(limit)
            passes.append(dropped)
            if not more:
                swept.set()
            return dropped, more

        monkeypatch.setattr(store, "sweep", counting)
        monkeypatch.setattr(store_module, "SWEEP_EVERY_S", 0)
        store.start()
        await asyncio.wait_for(swept.wait(), 5)
        assert passes[:5] == [7, 7, 7, 7, 2] and store.records == 0
        await store.close()
        assert store._sweeper is None

    asyncio.run(run())
