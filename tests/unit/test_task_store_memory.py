"""The in-memory task store: owners kept apart, the per-owner bound, expiry."""

from __future__ import annotations

import asyncio

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
        store = MemoryTaskStore(max_per_owner=1)
        assert await store.create("a", "t1", {}, 1) is None
        await asyncio.sleep(0.01)
        assert await store.get("a", "t1") is None
        # The expired record no longer counts against the bound.
        assert await store.create("a", "t2", {}, 60_000) is None

    asyncio.run(run())
