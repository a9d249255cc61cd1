"""Per-call upstream objects are freed by reference counting, not left to the
cyclic garbage collector: bench/profile.py --gc measured
that what every call left in reference cycles made the collector's passes
the gateway's longest pauses (its p99)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest

from app.upstream.httpclient.aiohttp_client import AiohttpAnswer
from app.upstream.httpclient.client import build_client
from app.upstream.httpclient.h1 import H1Answer
from app.upstream.streamable_http.transport import (
    HttpExchange,
    StreamableHttpSession,
    StreamableHttpTransport,
)

pytestmark = pytest.mark.peers


@contextmanager
def _no_cycle_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture(params=["h1", "aiohttp"])
async def session(
    legacy_url: str, request: pytest.FixtureRequest
) -> AsyncIterator[StreamableHttpSession]:
    # Both hot paths: app/upstream/httpclient/h1.py (the default) and aiohttp's.
    client = build_client(connect_timeout_s=5.0, max_connections=4, transport=request.param)
    transport = StreamableHttpTransport(client, legacy_url, request_timeout_s=30.0)
    init = {
        "jsonrpc": "2.0",
        "id": "init",
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "lifetime-test", "version": "1"},
        },
    }
    opened, _ = await transport.open_session(init, {})
    try:
        yield opened
    finally:
        await opened.close()
        await transport.aclose()


async def _answered_call(session: StreamableHttpSession, n: int) -> HttpExchange:
    """A tools/call read up to its answer and closed, as Gateway._forward does."""
    exchange = await session.request(
        {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        }
    )
    async for message in exchange:
        if message.get("id") == n:
            assert message["result"]["content"][0]["text"] == "hi"
            break
    await exchange.aclose(drain=True)
    return exchange


async def test_an_answered_exchange_is_freed_without_the_cycle_collector(
    session: StreamableHttpSession,
) -> None:
    await _answered_call(session, 1)  # the connection is open and reused from here on
    with _no_cycle_collector():
        exchange = await _answered_call(session, 2)
        answer = exchange._response
        # The hot path reads aiohttp's response or h1's answer, never httpx's.
        assert isinstance(answer, AiohttpAnswer | H1Answer)
        refs = [weakref.ref(answer)]
        if isinstance(answer, AiohttpAnswer):
            refs.append(weakref.ref(answer._response))
        del exchange, answer
        # Whatever holds the answer (httpx bound each streamed response to its
        # stream and the stream back to it) must not outlive the call.
        assert [ref() for ref in refs] == [None] * len(refs)


async def test_answered_calls_leave_no_cyclic_garbage(session: StreamableHttpSession) -> None:
    await _answered_call(session, 1)
    with _no_cycle_collector():
        for n in range(2, 62):
            await _answered_call(session, n)
        left = gc.collect()
    # Before the fix: about 54 objects per call, over 3,000 here.
    assert left < 20, f"{left} objects of 60 calls were only freed by the cycle collector"
