"""The timeout of a shared stream's exchange (app/upstream/sessions/routing.py, stdio and
HTTP+SSE): each wait of the reader for the server's next message is bounded,
not the exchange as a whole, and a reader busy with a message is never timed
out for it. One timer per exchange does this; it is gone once the exchange is
closed."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from typing import Any

import pytest

from app.upstream.errors import UpstreamTimeout
from app.upstream.sessions.routing import Router

TIMEOUT_S = 0.2
# A bound of the test's own: a timeout that never fires fails, not hangs.
NEVER_S = TIMEOUT_S * 20


async def _nothing(message: dict[str, Any]) -> None:
    return None


def _router() -> Router:
    return Router("the test server", initialized=lambda: True, respond=_nothing)


def _call(rid: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"_meta": {}}}


def _progress(step: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": step}}


def _answer(rid: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": {"content": []}}


async def test_a_silent_server_times_out_after_the_timeout() -> None:
    exchange = _router().open(_call(1), TIMEOUT_S)
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout, match=r"the test server sent nothing for 'tools/call'"):
        async with asyncio.timeout(NEVER_S):
            async for _ in exchange:
                pass
    took = time.monotonic() - started
    assert TIMEOUT_S * 0.9 <= took < TIMEOUT_S + 0.5, took
    await exchange.aclose()


async def test_messages_closer_than_the_timeout_keep_a_long_exchange_going() -> None:
    """Six progress notifications 0.1 s apart, then the answer: 0.7 s in all,
    more than three timeouts, and never a wait of one."""
    router = _router()
    exchange = router.open(_call(1), TIMEOUT_S)

    async def server() -> None:
        for step in range(6):
            await asyncio.sleep(TIMEOUT_S / 2)
            exchange.put(_progress(step))
        await asyncio.sleep(TIMEOUT_S / 2)
        router.dispatch(_answer(1))

    speaking = asyncio.create_task(server())
    got = [message async for message in exchange]
    await speaking
    assert [m.get("params", {}).get("progress") for m in got[:-1]] == list(range(6))
    assert got[-1] == _answer(1)
    await exchange.aclose()


async def test_a_reader_busy_with_a_message_is_not_timed_out_for_it() -> None:
    """The reader waits for the first message (half a timeout), then is busy
    with it for 2.5 timeouts (as when its client reads slowly); the answer
    comes 2.25 timeouts after the first message, while the reader is still
    busy. What counts is how long the reader waited: half a timeout, then
    none."""
    router = _router()
    exchange = router.open(_call(1), TIMEOUT_S)
    loop = asyncio.get_running_loop()
    loop.call_later(TIMEOUT_S * 0.5, exchange.put, _progress(0))
    loop.call_later(TIMEOUT_S * 2.75, router.dispatch, _answer(1))
    got = []
    async with asyncio.timeout(NEVER_S):
        async for message in exchange:
            got.append(message)
            if len(got) == 1:
                await asyncio.sleep(TIMEOUT_S * 2.5)
    assert got == [_progress(0), _answer(1)]
    await exchange.aclose()


async def test_a_wait_begun_late_is_timed_from_its_own_start() -> None:
    """Busy for 2.5 timeouts after the first message, then waiting for a
    message that never comes: the timeout falls one timeout after the wait
    began, not at the exchange's first timer."""
    exchange = _router().open(_call(1), TIMEOUT_S)
    exchange.put(_progress(0))
    messages = aiter(exchange)
    assert await anext(messages) == _progress(0)
    await asyncio.sleep(TIMEOUT_S * 2.5)
    waited_from = time.monotonic()
    with pytest.raises(UpstreamTimeout):
        await asyncio.wait_for(anext(messages), NEVER_S)
    waited = time.monotonic() - waited_from
    assert TIMEOUT_S * 0.9 <= waited < TIMEOUT_S + 0.5, waited
    await exchange.aclose()


async def test_a_closed_exchange_leaves_no_timer_holding_it() -> None:
    """Closed before its answer came: its timer is cancelled, so nothing keeps
    the exchange (and what it holds) alive for the rest of the timeout."""
    router = _router()
    exchange = router.open(_call(1), 60.0)
    exchange.put(_progress(0))
    messages = aiter(exchange)
    assert await anext(messages) == _progress(0)
    await exchange.aclose()
    gone = weakref.ref(exchange)
    del exchange, messages
    gc.collect()
    assert gone() is None
    assert router.pending == {}
