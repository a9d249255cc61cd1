"""How a shared stream's exchange is read (app/upstream/sessions/routing.py, stdio and
HTTP+SSE): one reader, messages in the order they came, and an end that
stays an end, whichever way the read ended (the response, a stop, an error,
the reader's cancellation). Its timeout: tests/unit/test_exchange_silence.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.upstream.errors import UpstreamUnavailable
from app.upstream.sessions.routing import Router

# A bound of the tests' own: a read that never ends fails, not hangs.
NEVER_S = 5.0


async def _nothing(message: dict[str, Any]) -> None:
    return None


def _router() -> Router:
    return Router("the test server", initialized=lambda: True, respond=_nothing)


def _call(rid: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {}}


def _note(n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": n}}


def _answer(rid: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": {"content": []}}


async def _read_all(exchange: Any) -> list[dict[str, Any]]:
    async with asyncio.timeout(NEVER_S):
        return [message async for message in exchange]


async def test_messages_come_in_order_and_the_response_ends_the_read() -> None:
    router = _router()
    exchange = router.open(_call(1), 30.0)
    exchange.put(_note(1))
    exchange.put(_note(2))
    router.dispatch(_answer(1))
    exchange.put(_note(3))  # after the response: not this request's
    assert await _read_all(exchange) == [_note(1), _note(2), _answer(1)]
    # Ended stays ended.
    assert await _read_all(exchange) == []
    await exchange.aclose()


async def test_a_waiting_reader_is_woken_by_the_next_message() -> None:
    router = _router()
    exchange = router.open(_call(1), None)

    async def server() -> None:
        for n in range(3):
            await asyncio.sleep(0.01)
            exchange.put(_note(n))
        await asyncio.sleep(0.01)
        router.dispatch(_answer(1))

    speaking = asyncio.create_task(server())
    assert await _read_all(exchange) == [_note(0), _note(1), _note(2), _answer(1)]
    await speaking
    await exchange.aclose()


async def test_a_stop_ends_the_read_without_a_response() -> None:
    exchange = _router().open(_call(1), 30.0)
    exchange.put(_note(1))
    exchange.stop()
    assert await _read_all(exchange) == [_note(1)]
    assert await _read_all(exchange) == []
    await exchange.aclose()


async def test_an_end_raises_its_error_once() -> None:
    exchange = _router().open(_call(1), 30.0)
    exchange.end(UpstreamUnavailable("the server went away"))
    with pytest.raises(UpstreamUnavailable, match="went away"):
        await _read_all(exchange)
    assert await _read_all(exchange) == []
    await exchange.aclose()


async def test_a_cancelled_reader_ends_the_read_and_its_timer() -> None:
    router = _router()
    exchange = router.open(_call(1), 30.0)
    reading = asyncio.create_task(_read_all(exchange))
    await asyncio.sleep(0.01)
    assert exchange._timer is not None  # armed while the reader waits
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert exchange._timer is None
    # What comes after the cancellation is nobody's to read.
    router.dispatch(_answer(1))
    assert await _read_all(exchange) == []
    await exchange.aclose()


async def test_a_closed_exchange_is_forgotten_by_its_router() -> None:
    router = _router()
    exchange = router.open(_call(7), 30.0)
    assert router.pending
    await exchange.aclose()
    assert not router.pending
    # Its answer, should it come, is nobody's: dispatch says so.
    assert router.dispatch(_answer(7)) is False
