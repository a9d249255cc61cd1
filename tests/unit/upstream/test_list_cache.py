"""ListCache (app/upstream/modern/list_cache.py): the keys and freshness rules of
2026-07-28 server/utilities/caching, on a fake clock."""

from __future__ import annotations

from typing import Any

from app.upstream.modern.list_cache import ListCache
from translators.registry import LATEST_MODERN


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def listing(method: str = "tools/list", **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def result(names: list[str], ttl: Any) -> dict[str, Any]:
    return {"resultType": "complete", "tools": [{"name": n} for n in names], "ttlMs": ttl}


def test_fresh_for_ttl_ms_then_stale() -> None:
    clock = Clock()
    cache = ListCache(clock=clock)
    key = cache.key("Bearer a", listing(), LATEST_MODERN)
    assert key is not None
    assert cache.store(key, result(["a"], 1000)) is False
    assert cache.fresh(key) == result(["a"], 1000)
    clock.now += 0.999
    assert cache.fresh(key) is not None
    # "now < t_received + ttlMs" ("Freshness Calculation").
    clock.now += 0.001
    assert cache.fresh(key) is None


def test_zero_negative_or_odd_ttl_is_never_served() -> None:
    cache = ListCache(clock=Clock())
    key = cache.key(None, listing(), LATEST_MODERN)
    assert key is not None
    for ttl in (0, -5, "600", True, None, 1.5):
        cache.store(key, result(["a"], ttl))
        assert cache.fresh(key) is None, ttl


def test_keys_split_credentials_pages_and_methods_but_not_meta() -> None:
    key = ListCache.key
    base = key("Bearer a", listing(), LATEST_MODERN)
    assert base != key("Bearer b", listing(), LATEST_MODERN)
    assert base != key(None, listing(), LATEST_MODERN)
    assert base != key("Bearer a", listing(cursor="p2"), LATEST_MODERN)
    assert base != key("Bearer a", listing("prompts/list"), LATEST_MODERN)
    assert base == key("Bearer a", listing(_meta={"progressToken": 1}), LATEST_MODERN)
    assert key("Bearer a", listing("tools/call", name="x"), LATEST_MODERN) is None
    # "Cache Key": multi round-trip retries MUST NOT be cached.
    assert key("Bearer a", listing(requestState="s"), LATEST_MODERN) is None
    assert key("Bearer a", listing(inputResponses={}), LATEST_MODERN) is None


def test_a_changed_list_is_reported_once_replaced() -> None:
    cache = ListCache(clock=Clock())
    key = cache.key(None, listing(), LATEST_MODERN)
    assert key is not None
    cache.store(key, result(["a"], 0))
    assert cache.store(key, {**result(["a"], 5), "_meta": {"x": 1}}) is False
    assert cache.store(key, result(["a", "b"], 5)) is True
    assert cache.store(key, result(["a", "b"], 5)) is False


def test_list_changed_makes_every_credential_stale_and_the_size_is_bounded() -> None:
    cache = ListCache(size=2, clock=Clock())
    tools_a = cache.key("a", listing(), LATEST_MODERN)
    tools_b = cache.key("b", listing(), LATEST_MODERN)
    prompts = cache.key("a", listing("prompts/list"), LATEST_MODERN)
    assert tools_a and tools_b and prompts
    cache.store(tools_a, result(["a"], 1000))
    cache.store(tools_b, result(["a"], 1000))
    cache.invalidate("notifications/tools/list_changed")
    assert cache.fresh(tools_a) is None and cache.fresh(tools_b) is None
    cache.store(prompts, {"resultType": "complete", "prompts": [], "ttlMs": 1000})
    assert len(cache) == 2
    cache.invalidate("notifications/tools/list_changed")
    assert cache.fresh(prompts) is not None
