"""The subscription hub against an in-memory upstream behind the transport seam.

The fake session records what the hub sends upstream (resources/subscribe and
unsubscribe, GET streams opened) and lets a test push notifications on, drop,
or expire its GET stream. The real SessionPool and SessionListener run on top.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from app.subscriptions import filters
from app.subscriptions.filters import Filter
from app.subscriptions.hub import Listener, SubscriptionHub
from app.subscriptions.mailbox import End
from app.upstream.errors import SessionExpired
from app.upstream.sessions.pool import PooledSession, SessionPool
from translators.registry import get_version

CAPS: dict[str, Any] = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
}
MODERN = get_version("2026-07-28")
LEGACY = get_version("2025-11-25")
assert MODERN is not None and LEGACY is not None
_CLOSE = object()


class FakeExchange:
    def __init__(self, messages: list[dict[str, Any]] | None = None) -> None:
        self.last_event_id: str | None = None
        self._messages = list(messages or [])
        self._queue: asyncio.Queue[Any] | None = None if messages is not None else asyncio.Queue()

    def push(self, item: Any) -> None:
        assert self._queue is not None
        self._queue.put_nowait(item)

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        if self._queue is None:
            for message in self._messages:
                yield message
            return
        while True:
            item = await self._queue.get()
            if item is _CLOSE:
                return
            yield item

    async def aclose(self, drain: bool = False) -> None:
        if self._queue is not None:
            self._queue.put_nowait(_CLOSE)


class FakeSession:
    def __init__(self, serial: int, refuse: set[str]) -> None:
        self.session_id = f"s-{serial}"
        self.calls: list[tuple[str, str]] = []
        self.responses: list[dict[str, Any]] = []
        self.streams: list[FakeExchange] = []
        self.expired = False
        self._refuse = refuse

    async def request(self, message: dict[str, Any]) -> FakeExchange:
        if self.expired:
            raise SessionExpired("gone")
        self.calls.append((message["method"], message["params"]["uri"]))
        if message["params"]["uri"] in self._refuse:
            reply: dict[str, Any] = {"code": -32002, "message": "Resource not found"}
            return FakeExchange([{"jsonrpc": "2.0", "id": message["id"], "error": reply}])
        return FakeExchange([{"jsonrpc": "2.0", "id": message["id"], "result": {}}])

    async def notify(self, message: dict[str, Any]) -> None:
        pass

    async def respond(self, message: dict[str, Any]) -> None:
        self.responses.append(message)

    async def listen(self, last_event_id: str | None = None) -> FakeExchange:
        if self.expired:
            raise SessionExpired("gone")
        exchange = FakeExchange()
        self.streams.append(exchange)
        return exchange

    async def close(self) -> None:
        pass

    # -- test controls ---------------------------------------------------------

    def push(self, message: dict[str, Any]) -> None:
        self.streams[-1].push(message)

    def drop(self) -> None:
        self.streams[-1].push(_CLOSE)

    @property
    def subscribed(self) -> list[str]:
        return [uri for method, uri in self.calls if method == "resources/subscribe"]

    @property
    def unsubscribed(self) -> list[str]:
        return [uri for method, uri in self.calls if method == "resources/unsubscribe"]


class FakeTransport:
    def __init__(self) -> None:
        self.sessions: list[FakeSession] = []
        self.refuse: set[str] = set()

    async def open_session(
        self, initialize: dict[str, Any], headers: Mapping[str, str]
    ) -> tuple[FakeSession, dict[str, Any]]:
        session = FakeSession(len(self.sessions) + 1, self.refuse)
        self.sessions.append(session)
        return session, {
            "protocolVersion": "2025-11-25",
            "capabilities": CAPS,
            "serverInfo": {"name": "fake", "version": "1"},
        }

    async def aclose(self) -> None:
        pass


class Rig:
    def __init__(self, queue_bound: int = 16) -> None:
        self.transport = FakeTransport()
        self.pool = SessionPool(self.transport, max_sessions=8, idle_s=300)
        self.hub = SubscriptionHub(
            self.pool, queue_bound=queue_bound, ready_timeout_s=1.0, call_timeout_s=2.0
        )

    async def pooled(self, authorization: str | None = None) -> PooledSession:
        assert LEGACY is not None
        key = self.pool.key_for({}, LEGACY, authorization)
        pooled = await self.pool.acquire(key, {}, authorization)
        self.pool.release(pooled)
        return pooled

    async def join(
        self, honoured: Filter, listen_id: Any = 1, authorization: str | None = None
    ) -> Listener:
        assert MODERN is not None
        pooled = await self.pooled(authorization)
        return await self.hub.join(pooled, {}, authorization, listen_id, MODERN, honoured)

    @property
    def session(self) -> FakeSession:
        return self.transport.sessions[-1]

    async def settle(self) -> None:
        """Let background upstream calls (unsubscribe, re-open) run."""
        for _ in range(5):
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        await self.hub.aclose(0.1)
        await self.pool.aclose()


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    r = Rig()
    yield r
    await r.aclose()


def change(method: str, **params: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params:
        message["params"] = params
    return message


async def received(listener: Listener, wait: float = 0.05) -> list[Any]:
    out: list[Any] = []
    while True:
        item = await listener.mailbox.get(wait)
        if item is None:
            return out
        out.append(item)
        if isinstance(item, End):
            return out


# ---------------------------------------------------------------------------


async def test_one_get_stream_and_one_subscribe_per_uri(rig: Rig) -> None:
    first = await rig.join(Filter(tools=True, uris=("file:///a", "file:///b")), 1)
    second = await rig.join(Filter(uris=("file:///a",)), 2)
    third = await rig.join(Filter(prompts=True), 3)
    session = rig.session
    assert len(rig.transport.sessions) == 1
    assert len(session.streams) == 1  # one GET stream for three listeners
    assert session.subscribed == ["file:///a", "file:///b"]
    assert first.filter.uris == ("file:///a", "file:///b")
    assert second.filter.uris == ("file:///a",)

    rig.hub.leave(first)
    await rig.settle()
    assert session.unsubscribed == ["file:///b"]  # a is still wanted by the second
    rig.hub.leave(second)
    await rig.settle()
    assert session.unsubscribed == ["file:///b", "file:///a"]
    rig.hub.leave(second)  # twice is harmless
    await rig.settle()
    assert session.unsubscribed == ["file:///b", "file:///a"]

    pooled = await rig.pooled()
    assert pooled.listener.users == 1  # the third still holds the GET stream
    rig.hub.leave(third)
    await rig.settle()
    assert pooled.listener.users == 0
    assert rig.hub.active == 0
    assert rig.hub.session_hub(pooled.key) is None


async def test_leave_then_join_again_keeps_the_upstream_subscribed(rig: Rig) -> None:
    first = await rig.join(Filter(uris=("file:///a",)), 1)
    rig.hub.leave(first)  # the unsubscribe is queued ...
    second = await rig.join(Filter(uris=("file:///a",)), 2)  # ... and a new listener wants it
    await rig.settle()
    session = rig.session
    # Either order is fine as long as the upstream ends subscribed exactly once.
    assert session.subscribed.count("file:///a") - session.unsubscribed.count("file:///a") == 1
    assert second.filter.uris == ("file:///a",)
    rig.hub.leave(second)
    await rig.settle()
    assert session.subscribed.count("file:///a") == session.unsubscribed.count("file:///a")


async def test_a_uri_the_upstream_refuses_is_left_out_of_the_ack(rig: Rig) -> None:
    rig.transport.refuse.add("file:///missing")
    listener = await rig.join(Filter(uris=("file:///missing", "file:///ok")), 1)
    assert listener.filter.uris == ("file:///ok",)
    rig.hub.leave(listener)
    await rig.settle()
    assert rig.session.unsubscribed == ["file:///ok"]  # never unsubscribes what it lacks


async def test_fan_out_honours_each_filter_and_translates_once(rig: Rig) -> None:
    tools = await rig.join(Filter(tools=True), "t")
    prompts = await rig.join(Filter(prompts=True), "p")
    uri = await rig.join(Filter(uris=("file:///a",)), "u")
    session = rig.session
    session.push(change(filters.TOOLS_LIST_CHANGED))
    session.push(change(filters.PROMPTS_LIST_CHANGED))
    session.push(change(filters.RESOURCE_UPDATED, uri="file:///a/child"))
    session.push(change(filters.RESOURCE_UPDATED, uri="file:///b"))
    session.push(change("notifications/message", level="info", data="x"))
    assert await received(tools) == [change(filters.TOOLS_LIST_CHANGED)]
    assert await received(prompts) == [change(filters.PROMPTS_LIST_CHANGED)]
    assert await received(uri) == [change(filters.RESOURCE_UPDATED, uri="file:///a/child")]


async def test_server_requests_on_the_get_stream_are_answered_not_fanned_out(rig: Rig) -> None:
    everything = await rig.join(Filter(True, True, True, ("file:///a",)), 1)
    session = rig.session
    session.push({"jsonrpc": "2.0", "id": 99, "method": "ping"})
    session.push({"jsonrpc": "2.0", "id": 100, "method": "roots/list"})
    await rig.settle()
    assert await received(everything) == []
    answered = {r["id"]: r for r in session.responses}
    assert answered[99] == {"jsonrpc": "2.0", "id": 99, "result": {}}
    assert "error" in answered[100]


async def test_a_slow_listener_overflows_alone() -> None:
    rig = Rig(queue_bound=3)
    try:
        slow = await rig.join(Filter(tools=True), "slow")
        fast = await rig.join(Filter(tools=True), "fast")
        got: list[Any] = []
        for n in range(10):
            rig.session.push(change(filters.TOOLS_LIST_CHANGED, n=n))
            await asyncio.sleep(0.005)
            got += await received(fast, 0.001)
        assert [m["params"]["n"] for m in got] == list(range(10))
        assert await received(slow) == [End.OVERFLOW]  # queue dropped, error to send
        session_hub = slow.hub
        assert session_hub is not None and session_hub.listeners == 1
        rig.hub.leave(slow)
        assert rig.hub.active == 1
    finally:
        await rig.aclose()


async def test_tools_list_changed_invalidates_cached_tool_annotations(rig: Rig) -> None:
    await rig.join(Filter(prompts=True), 1)
    pooled = await rig.pooled()
    pooled._tools = {"cached": ()}
    rig.session.push(change(filters.PROMPTS_LIST_CHANGED))
    await rig.settle()
    assert pooled._tools is not None
    rig.session.push(change(filters.TOOLS_LIST_CHANGED))
    await rig.settle()
    assert pooled._tools is None


async def test_a_dropped_get_stream_reconnects_and_keeps_delivering(rig: Rig) -> None:
    listener = await rig.join(Filter(tools=True), 1)
    session = rig.session
    session.drop()
    for _ in range(100):
        await asyncio.sleep(0.01)
        if len(session.streams) == 2:
            break
    assert len(session.streams) == 2
    session.push(change(filters.TOOLS_LIST_CHANGED))
    assert await received(listener, 0.2) == [change(filters.TOOLS_LIST_CHANGED)]


async def test_an_expired_session_is_reopened_and_resubscribed(rig: Rig) -> None:
    listener = await rig.join(Filter(tools=True, uris=("file:///a",)), 1)
    stale = rig.session
    stale.expired = True
    stale.drop()  # the upstream ends the stream; the reconnect gets 404
    for _ in range(200):
        await asyncio.sleep(0.01)
        if len(rig.transport.sessions) == 2 and rig.session.streams:
            break
    fresh = rig.session
    assert fresh is not stale
    assert fresh.subscribed == ["file:///a"]
    fresh.push(change(filters.RESOURCE_UPDATED, uri="file:///a"))
    assert await received(listener, 0.2) == [change(filters.RESOURCE_UPDATED, uri="file:///a")]
    rig.hub.leave(listener)
    await rig.settle()
    assert fresh.unsubscribed == ["file:///a"]
    assert stale.unsubscribed == []


async def test_callers_with_other_credentials_get_their_own_session(rig: Rig) -> None:
    alice = await rig.join(Filter(uris=("file:///a",)), 1, authorization="Bearer alice")
    bob = await rig.join(Filter(uris=("file:///a",)), 2, authorization="Bearer bob")
    assert len(rig.transport.sessions) == 2
    first, second = rig.transport.sessions
    assert first.subscribed == ["file:///a"] and second.subscribed == ["file:///a"]
    first.push(change(filters.RESOURCE_UPDATED, uri="file:///a"))
    assert len(await received(alice)) == 1
    assert await received(bob) == []


async def test_shutdown_drains_then_ends_every_listener(rig: Rig) -> None:
    one = await rig.join(Filter(tools=True), 1)
    two = await rig.join(Filter(tools=True), 2)
    rig.session.push(change(filters.TOOLS_LIST_CHANGED))
    await rig.settle()

    async def stream(listener: Listener) -> list[Any]:
        try:
            return await received(listener, 1.0)
        finally:
            rig.hub.leave(listener)

    readers = [asyncio.create_task(stream(one)), asyncio.create_task(stream(two))]
    await asyncio.sleep(0)
    assert await rig.hub.close_all(2.0) == 2
    for reader in readers:
        assert await reader == [change(filters.TOOLS_LIST_CHANGED), End.SHUTDOWN]
    assert rig.hub.active == 0
    late = await rig.join(Filter(tools=True), 3)
    assert late.mailbox.end is End.SHUTDOWN


async def test_change_notifications_on_a_call_stream_reach_the_listeners(rig: Rig) -> None:
    listener = await rig.join(Filter(tools=True), 1)
    pooled = await rig.pooled()
    rig.hub.observe(pooled, change(filters.TOOLS_LIST_CHANGED))
    assert await received(listener) == [change(filters.TOOLS_LIST_CHANGED)]


async def test_a_client_gone_before_its_ack_leaves_nothing_behind(rig: Rig) -> None:
    assert MODERN is not None
    pooled = await rig.pooled()
    hang = asyncio.Event()

    async def never_connects(last_event_id: str | None = None) -> FakeExchange:
        await hang.wait()
        raise AssertionError("unreachable")

    rig.transport.sessions[-1].listen = never_connects  # type: ignore[method-assign]
    join = asyncio.create_task(
        rig.hub.join(pooled, {}, None, 1, MODERN, Filter(uris=("file:///a",)))
    )
    await asyncio.sleep(0.05)  # subscribed, waiting for the GET stream
    assert rig.hub.active == 1
    join.cancel()
    with pytest.raises(asyncio.CancelledError):
        await join
    await rig.settle()
    assert rig.hub.active == 0
    assert rig.session.unsubscribed == ["file:///a"]
    assert pooled.listener.users == 0
