"""The task store contract (app/tasks/store.py), run over both stores: the
in-memory one and the Redis one on a real redis-server (Debian's, installed by
scripts/setup_peers.sh; started here on a free loopback port with a temporary
directory; without it the Redis cases fail, they never skip). Then what only a
shared store has: two replicas' stores holding one bound, a record outliving
the store object, and the server going away and coming back.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import redis.asyncio
from structlog.testing import capture_logs

from app.cluster.sealing import Sealer
from app.tasks.redis_store import OWNER_TAG_LABEL, RedisTaskStore
from app.tasks.store import (
    MemoryTaskStore,
    TaskLimitReached,
    TaskRecordTooLarge,
    TaskStore,
    TaskStoreUnavailable,
    record_refusal,
)
from tests import procs

MaxBytes = 4096
MakeStore = Callable[..., TaskStore]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory, logs_dir: Path) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("redis")
    with procs.redis_server(procs.free_port(), workdir, logs_dir / "redis.log") as url:
        yield url


# The replicas' shared MCP_SHIM_STATE_KEY, as the owner tag's subkeys (current first).
TAG_KEYS = Sealer([b"k" * 32]).subkeys(OWNER_TAG_LABEL)


def _redis_store(
    url: str, prefix: str, max_per_owner: int, tag_keys: list[bytes] = TAG_KEYS, **kw: float
) -> RedisTaskStore:
    return RedisTaskStore(
        url,
        tag_keys=tag_keys,
        max_per_owner=max_per_owner,
        max_record_bytes=MaxBytes,
        prefix=prefix,
        **kw,
    )


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.peers)])
async def make_store(request: pytest.FixtureRequest) -> AsyncIterator[MakeStore]:
    """Stores of one kind; each test's Redis keys under a prefix of its own."""
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    made: list[TaskStore] = []

    def make(max_per_owner: int = 2) -> TaskStore:
        store: TaskStore
        if request.param == "memory":
            store = MemoryTaskStore(max_per_owner, max_record_bytes=MaxBytes)
        else:
            store = _redis_store(request.getfixturevalue("redis_url"), prefix, max_per_owner)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()


async def _until(check: Callable[[], Awaitable[bool]], within_s: float = 10.0) -> float:
    """Poll until `check` holds (bounded); the monotonic time it was first seen."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if await check():
            return time.monotonic()
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {within_s} s")


# ---------------------------------------------------------------- the contract


async def test_owners_are_kept_apart(make_store: MakeStore) -> None:
    store = make_store(max_per_owner=5)
    assert await store.create("alice", "t1", {"who": "alice"}, 60_000) is None
    assert await store.create("bob", "t1", {"who": "bob"}, 60_000) is None
    assert await store.get("alice", "t1") == {"who": "alice"}
    assert await store.get("bob", "t1") == {"who": "bob"}
    assert await store.get("bob", "t2") is None
    assert await store.create("alice", "t2", {"who": "alice"}, 60_000) is None
    assert await store.get("bob", "t2") is None, "another owner's task is not found"
    assert not await store.update("bob", "t2", {"who": "bob"})
    assert await store.get("alice", "t2") == {"who": "alice"}
    assert await store.live("alice") == ["t1", "t2"]
    assert await store.live("bob") == ["t1"]
    await store.delete("bob", "t2")  # not bob's: nothing happens to alice's
    assert await store.get("alice", "t2") == {"who": "alice"}
    await store.delete("alice", "t1")
    assert await store.get("bob", "t1") == {"who": "bob"}
    assert await store.live("alice") == ["t2"]


async def test_the_bound_per_owner(make_store: MakeStore) -> None:
    store = make_store(max_per_owner=2)
    assert await store.create("a", "t1", {}, 60_000) is None
    assert await store.create("a", "t2", {}, 60_000) is None
    refusal = await store.create("a", "t3", {}, 60_000)
    assert refusal == TaskLimitReached(2) and type(refusal) is TaskLimitReached
    assert "MCP_SHIM_MAX_TASKS_PER_CREDENTIAL" in refusal.message
    assert await store.get("a", "t3") is None and await store.live("a") == ["t1", "t2"]
    assert await store.create("b", "t1", {}, 60_000) is None, "others are unaffected"
    await store.delete("a", "t1")
    assert await store.create("a", "t3", {}, 60_000) is None


async def test_records_expire_at_their_ttl_and_stop_counting(make_store: MakeStore) -> None:
    store = make_store(max_per_owner=1)
    created = time.monotonic()
    assert await store.create("a", "t1", {"n": 1}, 300) is None
    assert await store.create("a", "t2", {}, 60_000) == TaskLimitReached(1)

    async def gone() -> bool:
        return await store.get("a", "t1") is None

    seen = await _until(gone)
    assert seen - created >= 0.3
    assert await store.live("a") == []
    assert not await store.update("a", "t1", {"n": 2}), "an expired record is not revived"
    assert await store.create("a", "t2", {}, 60_000) is None


async def test_update_keeps_the_expiry(make_store: MakeStore) -> None:
    store = make_store()
    ttl_s = 1.5
    created = time.monotonic()
    assert await store.create("a", "t", {"status": "working"}, int(ttl_s * 1000)) is None
    await asyncio.sleep(1.0)
    updated = time.monotonic()
    assert await store.update("a", "t", {"status": "completed"})
    assert await store.get("a", "t") == {"status": "completed"}

    # Gone by the first TTL: a store that restarted the TTL at the update would
    # keep it until `updated + ttl_s`, so a read that has returned before then
    # and found nothing proves it did not.
    async def gone_early() -> bool:
        found = await store.get("a", "t")
        if found is None:
            assert time.monotonic() < updated + ttl_s, "the record outlived its first TTL"
        return found is None

    seen = await _until(gone_early)
    assert seen - created >= ttl_s


async def test_live_is_in_creation_order(make_store: MakeStore) -> None:
    store = make_store(max_per_owner=10)
    # TTLs in another order than creation: live() is not ordered by expiry.
    for task_id, ttl in [("t1", 60_000), ("t2", 30_000), ("t3", 90_000)]:
        assert await store.create("a", task_id, {}, ttl) is None
    assert await store.live("a") == ["t1", "t2", "t3"]
    await store.delete("a", "t2")
    assert await store.create("a", "t4", {}, 10_000) is None
    assert await store.update("a", "t1", {"touched": True})
    assert await store.live("a") == ["t1", "t3", "t4"]


async def test_a_record_over_the_size_bound_is_refused_as_a_value(make_store: MakeStore) -> None:
    store = make_store()
    big = {"result": "x" * MaxBytes}
    refusal = await store.create("a", "t", big, 60_000)
    assert isinstance(refusal, TaskRecordTooLarge)
    assert refusal.limit == MaxBytes and refusal.size > MaxBytes
    assert "MCP_SHIM_MAX_TASK_RESULT_BYTES" in refusal.message and str(MaxBytes) in refusal.message
    assert await store.get("a", "t") is None and await store.live("a") == []

    assert await store.create("a", "t", {"status": "working"}, 60_000) is None
    assert not await store.update("a", "t", big)
    assert await store.get("a", "t") == {"status": "working"}, "the live record is kept"
    assert record_refusal(big, MaxBytes) == TaskRecordTooLarge(limit=MaxBytes, size=refusal.size)
    assert record_refusal({"status": "done"}, MaxBytes) is None


async def test_close_twice(make_store: MakeStore) -> None:
    store = make_store()
    assert await store.create("a", "t", {}, 60_000) is None
    await store.close()
    await store.close()


# --------------------------------------------------------- a shared store only


@pytest.mark.peers
async def test_the_bound_holds_across_two_replicas_creating_at_once(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    bound, attempts = 10, 25
    one, two = (_redis_store(redis_url, prefix, bound) for _ in range(2))
    try:
        results = await asyncio.gather(
            *(
                store.create("shared-owner", f"{name}-{n}", {"n": n}, 60_000)
                for n in range(attempts)
                for name, store in (("one", one), ("two", two))
            )
        )
        assert sum(1 for r in results if r is None) == bound
        assert all(r is None or r == TaskLimitReached(bound) for r in results)
        assert len(await one.live("shared-owner")) == bound
        assert await one.live("shared-owner") == await two.live("shared-owner")
    finally:
        await one.close()
        await two.close()


@pytest.mark.peers
async def test_a_record_outlives_its_store_object(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    first = _redis_store(redis_url, prefix, 5)
    assert await first.create("a", "t1", {"status": "working"}, 60_000) is None
    assert await first.update("a", "t1", {"status": "completed", "result": {"n": 1}})
    await first.close()

    second = _redis_store(redis_url, prefix, 5)
    try:
        assert await second.get("a", "t1") == {"status": "completed", "result": {"n": 1}}
        assert await second.live("a") == ["t1"]
        # Another deployment on the same server (another prefix) sees none of it.
        other = _redis_store(redis_url, f"{prefix}-other", 5)
        assert await other.get("a", "t1") is None and await other.live("a") == []
        await other.close()
    finally:
        await second.close()


@pytest.mark.peers
async def test_keys_name_no_owner_and_close_releases_connections(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    raw = redis.asyncio.Redis.from_url(redis_url)
    try:
        before = (await raw.info("clients"))["connected_clients"]
        store = _redis_store(redis_url, prefix, 5)
        assert await store.create("Bearer owner-secret", "t1", {}, 60_000) is None
        await asyncio.gather(*(store.get("Bearer owner-secret", "t1") for _ in range(5)))
        keys = sorted(k.decode() for k in await raw.keys(f"{prefix}:*"))
        assert len(keys) == 2 and all(k.startswith(f"{prefix}:task:{{") for k in keys)
        assert not any("owner-secret" in k for k in keys)
        # Both of the owner's keys carry a TTL: nothing is left behind for ever.
        ttls = [await raw.pttl(k) for k in keys]
        assert all(0 < ttl <= 60_000 for ttl in ttls), ttls
        assert (await raw.info("clients"))["connected_clients"] > before
        await store.close()

        async def released() -> bool:
            return bool((await raw.info("clients"))["connected_clients"] == before)

        await _until(released)
    finally:
        await raw.aclose()


@pytest.mark.peers
async def test_owner_tags_are_keyed_with_the_state_key(redis_url: str) -> None:
    # The tag was an unsalted SHA-256 of the credential hash: whoever could read
    # the server could test guesses of a weak token against it.
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    owner = hashlib.sha256(b"Bearer weak").hexdigest()  # as credential_hash makes it
    raw = redis.asyncio.Redis.from_url(redis_url)
    replica, other_deployment = (
        _redis_store(redis_url, prefix, 5),
        _redis_store(redis_url, prefix, 5, Sealer([b"o" * 32]).subkeys(OWNER_TAG_LABEL)),
    )
    try:
        assert await replica.create(owner, "t1", {"n": 1}, 60_000) is None
        keys = {k.decode() for k in await raw.keys(f"{prefix}:*")}
        guessed = hashlib.sha256(owner.encode()).hexdigest()[:32]
        assert len(keys) == 2 and not any(guessed in k for k in keys), keys
        # Another replica with the same state key finds it; a different key does not.
        same = _redis_store(redis_url, prefix, 5)
        assert await same.get(owner, "t1") == {"n": 1} and await same.live(owner) == ["t1"]
        await same.close()
        assert await other_deployment.get(owner, "t1") is None
        assert await other_deployment.live(owner) == []
        # The state key rotated (a new one first, the old one still opening):
        # records filed before are found, updated and deleted; new ones go under
        # the new key's tag.
        rotated = Sealer([b"n" * 32, b"k" * 32]).subkeys(OWNER_TAG_LABEL)
        after = _redis_store(redis_url, prefix, 5, rotated)
        assert await after.get(owner, "t1") == {"n": 1}
        assert await after.update(owner, "t1", {"n": 2})
        assert await after.create(owner, "t2", {"n": 3}, 60_000) is None
        assert await after.live(owner) == ["t2", "t1"]
        assert await replica.get(owner, "t2") is None  # not under the old key's tag
        await after.delete(owner, "t1")
        assert await after.get(owner, "t1") is None and await after.live(owner) == ["t2"]
        await after.close()
    finally:
        await replica.close()
        await other_deployment.close()
        await raw.aclose()


@pytest.mark.peers
async def test_the_server_going_away_is_an_error_of_ours_and_it_comes_back(
    tmp_path: Path, logs_dir: Path
) -> None:
    port = procs.free_port()
    log = logs_dir / "redis-going-away.log"
    store = _redis_store(f"redis://127.0.0.1:{port}/0", "test", 5, timeout_s=1.0)
    memory = MemoryTaskStore(5)
    try:
        with procs.redis_server(port, tmp_path, log):
            assert await store.create("a", "t1", {"n": 1}, 60_000) is None
            assert await store.get("a", "t1") == {"n": 1}
        # The server has gone: every operation is our error, quickly, one line logged.
        with capture_logs() as logs:
            started = time.monotonic()
            for op in (
                store.get("a", "t1"),
                store.create("a", "t2", {}, 60_000),
                store.update("a", "t1", {}),
                store.live("a"),
                store.delete("a", "t1"),
            ):
                with pytest.raises(TaskStoreUnavailable) as caught:
                    await op
                assert "MCP_SHIM_TASK_STORE" in caught.value.message
                assert str(port) not in caught.value.message
            elapsed = time.monotonic() - started
            # The gateway's other work goes on meanwhile.
            assert await memory.create("a", "t", {}, 60_000) is None
        assert elapsed < 5 * 1.0 + 2.0
        failures = [line for line in logs if line["event"] == "task_store_unavailable"]
        assert len(failures) == 1, "rate-limited: one line for a burst"
        assert failures[0]["log_level"] == "warning" and failures[0]["op"] == "get"

        # Back on the same port (empty: it saved nothing): the same store object works.
        with procs.redis_server(port, tmp_path, log):
            assert await store.get("a", "t1") is None
            assert await store.create("a", "t3", {"n": 3}, 60_000) is None
            assert await store.get("a", "t3") == {"n": 3}
    finally:
        await store.close()


async def test_a_server_that_never_answers_is_bounded_by_the_timeout() -> None:
    # A listener that accepts and says nothing (the project's own misbehaving peer).
    held: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = _redis_store(f"redis://127.0.0.1:{port}/0", "test", 5, timeout_s=0.5)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    running = asyncio.ensure_future(ticker())
    try:
        started = time.monotonic()
        with pytest.raises(TaskStoreUnavailable) as caught:
            await store.get("a", "t1")
        waited = time.monotonic() - started
        assert 0.5 <= waited < 0.5 + 1.5
        assert "did not answer in time" in caught.value.message
        # The wait blocked nothing else: the event loop kept running other work.
        assert ticks >= 5
    finally:
        running.cancel()
        await store.close()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def test_a_missing_redis_server_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procs.shutil, "which", lambda _name: None)
    monkeypatch.setattr(procs.os, "access", lambda _path, _mode: False)
    with pytest.raises(RuntimeError, match=r"setup_peers\.sh redis"):
        procs.redis_server_binary()
