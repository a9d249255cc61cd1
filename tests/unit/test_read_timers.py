"""The read timeouts of the gateway's HTTP protocol (app/serving/http_protocol.py),
driven with a stand-in transport: a request that comes whole in one read arms
no timer (the common call: two timers armed and cancelled per call before),
and one left unfinished by a read is timed from that read, headers or body."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from app.serving.http_protocol import ConnectionLimits, protocol_class
from tests.unit.test_connection_link import REQUEST, Transport


def _protocol(read_timeout_s: float) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    config = Config(app=app, log_level="warning")
    config.load()
    limits = ConnectionLimits(
        max_connections=10, read_timeout_s=read_timeout_s, write_timeout_s=5.0
    )
    return protocol_class(limits)(config=config, server_state=ServerState(), app_state={})


async def test_a_request_in_one_read_arms_no_timer(monkeypatch: Any) -> None:
    protocol = _protocol(5.0)
    transport = Transport()
    protocol.connection_made(transport)
    assert protocol._read_timer is not None  # the first request's, from the connection
    armed: list[str] = []
    loop = asyncio.get_running_loop()
    real = loop.call_later

    def counted(delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        armed.append(getattr(callback, "__name__", repr(callback)))
        return real(delay, callback, *args)

    monkeypatch.setattr(loop, "call_later", counted)
    for _ in range(3):
        protocol.data_received(REQUEST)
        await asyncio.sleep(0.02)
    assert transport.written.count(b"HTTP/1.1 200") == 3
    assert protocol._read_timer is None
    read_timers = [name for name in armed if name.endswith("_timed_out")]
    assert read_timers == [], "a read timer was armed for a request that came whole"
    protocol.connection_lost(None)


async def test_a_later_requests_unfinished_head_gets_408() -> None:
    protocol = _protocol(0.1)
    transport = Transport()
    protocol.connection_made(transport)
    protocol.data_received(REQUEST)
    await asyncio.sleep(0.02)
    assert transport.written.count(b"HTTP/1.1 200") == 1
    protocol.data_received(REQUEST[:20])  # half a head, then nothing
    assert protocol._read_timer is not None
    await asyncio.sleep(0.3)
    assert b"HTTP/1.1 408" in transport.written
    assert transport.closing
    protocol.connection_lost(None)


async def test_a_body_left_short_is_timed_from_its_head() -> None:
    protocol = _protocol(0.1)
    transport = Transport()
    protocol.connection_made(transport)
    protocol.data_received(REQUEST[:-1])  # the head and one byte of a two-byte body
    timer = protocol._read_timer
    assert timer is not None
    protocol.data_received(b"")  # another read, still short: the same timer goes on
    assert protocol._read_timer is timer
    await asyncio.sleep(0.2)
    # It fired: the application (still reading) gets a grace to answer 408 itself.
    assert protocol._read_timer is not None and protocol._read_timer is not timer
    protocol.connection_lost(None)
