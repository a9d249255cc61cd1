"""Where a message from a stdio server goes (StdioSession._dispatch in
app/upstream/stdio/session.py).

stdout carries nothing but the message, so the session decides by the message:
a response by id, progress by token, a server request or a log line to the one
call in flight, everything else to the listen stream. The session here runs on
a real pipe (`cat`, which only keeps the process alive and takes what is
written); the messages are handed to the dispatcher as if read from stdout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.fronts.legacy.calls import _Cancel
from app.upstream.stdio.session import StdioExchange, StdioSession
from tests.unit.stdio_spawn import spawned
from tests.waiting import until


@pytest.fixture
async def session() -> AsyncIterator[StdioSession]:
    transport, stdio = await spawned(["cat"], grace_s=0.5)
    stdio.initialized = True
    yield stdio
    await transport.aclose()


def _request(rid: Any, method: str, token: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"_meta": {"progressToken": token}} if token is not None else {}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def _queued(exchange: StdioExchange) -> list[Any]:
    items = []
    while not exchange.queue.empty():
        items.append(exchange.queue.get_nowait())
    return items


ASK = {"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage", "params": {}}
LOG = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}
CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


async def test_responses_by_id_and_progress_by_token(session: StdioSession) -> None:
    one = await session.request(_request(1, "tools/call", token=1))
    two = await session.request(_request("1", "tools/call", token=2))
    session._dispatch({"jsonrpc": "2.0", "id": "1", "result": {"n": 2}})
    session._dispatch(
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1}}
    )
    session._dispatch({"jsonrpc": "2.0", "id": 1, "result": {"n": 1}})
    assert [m.get("result") or m["method"] for m in _queued(one)] == [
        "notifications/progress",
        {"n": 1},
    ]
    assert [m["result"] for m in _queued(two)] == [{"n": 2}]


async def test_a_server_request_goes_to_the_one_call_in_flight(session: StdioSession) -> None:
    listen = await session.listen()
    call = await session.request(_request(1, "tools/call"))
    session._dispatch(ASK)
    session._dispatch(LOG)
    session._dispatch(CHANGED)
    assert _queued(call) == [ASK, LOG]
    assert _queued(listen) == [CHANGED]


async def test_with_two_calls_in_flight_nobody_can_tell(session: StdioSession) -> None:
    listen = await session.listen()
    first = await session.request(_request(1, "tools/call"))
    second = await session.request(_request(2, "prompts/get"))
    session._dispatch(ASK)
    session._dispatch(LOG)
    assert _queued(first) == [] and _queued(second) == []
    assert _queued(listen) == [ASK, LOG]


async def test_the_gateways_own_requests_never_take_a_server_request(
    session: StdioSession,
) -> None:
    """The pool's tools/list (Mcp-Param-* annotations) and the hub's
    resources/subscribe read nothing but their answer: a request handed to
    them would never be answered."""
    listen = await session.listen()
    listing = await session.request(_request("shim-1", "tools/list"))
    session._dispatch(ASK)
    assert _queued(listing) == []
    assert _queued(listen) == [ASK]


async def test_nothing_before_initialized_belongs_to_a_call(session: StdioSession) -> None:
    session.initialized = False
    listen = await session.listen()
    call = await session.request(_request(1, "tools/call"))
    session._dispatch(ASK)
    assert _queued(call) == [] and _queued(listen) == [ASK]


async def test_a_cancelled_call_ends_without_a_response(session: StdioSession) -> None:
    """notifications/cancelled written for a call: the server will not answer it
    (2025-11-25 basic/utilities/cancellation), so its exchange ends there, and the
    call after it is the one in flight that a server request belongs to."""
    cancelled = await session.request(_request("slow-1", "tools/call", token=5))
    await session.notify(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "slow-1"}}
    )
    assert [m async for m in cancelled] == []
    # A late response or progress of it reaches nobody.
    session._dispatch({"jsonrpc": "2.0", "id": "slow-1", "result": {}})
    session._dispatch(
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 5}}
    )
    assert _queued(cancelled) == []
    call = await session.request(_request(2, "tools/call"))
    session._dispatch(ASK)
    assert _queued(call) == [ASK]


async def test_a_cancellation_of_nothing_in_flight_changes_nothing(session: StdioSession) -> None:
    call = await session.request(_request(1, "tools/call"))
    for params in ({"requestId": 2}, {"requestId": "1"}, {}):
        await session.notify(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        )
    await session.notify(
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"requestId": 1}}
    )
    session._dispatch({"jsonrpc": "2.0", "id": 1, "result": {"ok": True}})
    assert [m["result"] for m in _queued(call)] == [{"ok": True}]


@pytest.fixture
async def quiet_session() -> AsyncIterator[StdioSession]:
    """A session whose server reads and says nothing: only what the test
    dispatches reaches the exchanges (cat would echo each request back)."""
    transport, stdio = await spawned(["sh", "-c", "exec cat >/dev/null"], grace_s=0.5)
    stdio.initialized = True
    yield stdio
    await transport.aclose()


async def test_a_call_cancelled_elsewhere_ends_its_read(quiet_session: StdioSession) -> None:
    """A legacy call reads its stdio exchange in its own task (app/fronts/legacy/
    calls.py): a cancellation that did not go upstream from here (a guest copy's,
    served through the owner) stops the exchange, so the read ends at once, and
    what the exchange holds after the stop is never read."""
    call = await quiet_session.request(_request(1, "tools/call"))
    cancel = _Cancel()
    cancel.on_set = call.stop
    read: list[Any] = []

    async def reader() -> None:
        async for message in call:
            read.append(message)

    task = asyncio.ensure_future(reader())
    quiet_session._dispatch(LOG)
    await until(lambda: read == [LOG], what="the log line read")
    cancel.set()
    cancel.set()  # a second cancellation stops nothing more
    quiet_session._dispatch({"jsonrpc": "2.0", "id": 1, "result": {}})
    await asyncio.wait_for(task, 5)
    assert read == [LOG]
    assert cancel.is_set()
    await call.aclose()
