"""The link from an answer to its connection (app/connection/link.py
`ConnectionLink`), driven through the gateway's real HTTP protocol with a
stand-in transport: a client that goes away calls the answer back, and the
link keeps no request alive (each request's scope and cycle are freed by
reference counting, not left to the cycle collector, whose passes were the
p99: bench/profile.py --gc)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from app.connection.link import LINK, ConnectionLink
from app.serving.http_protocol import ConnectionLimits, protocol_class


class Transport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5000) if name in ("sockname", "peername") else default

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


REQUEST = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2\r\n\r\n{}"


def _protocol(app: Any) -> Any:
    config = Config(app=app, log_level="warning")
    config.load()
    limits = ConnectionLimits(max_connections=10, read_timeout_s=5.0, write_timeout_s=5.0)
    cls = protocol_class(limits)
    return cls(config=config, server_state=ServerState(), app_state={})


async def test_a_client_that_goes_away_calls_the_answer_back() -> None:
    seen: list[ConnectionLink] = []
    lost = asyncio.Event()
    finished = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        link = scope["extensions"][LINK]
        seen.append(link)
        task = asyncio.current_task()
        assert task is not None

        def gone() -> None:
            lost.set()
            task.cancel()

        link.on_lost(gone)
        try:
            await asyncio.Event().wait()
        finally:
            finished.set()

    protocol = _protocol(app)
    protocol.connection_made(Transport())
    protocol.data_received(REQUEST)
    await asyncio.sleep(0.05)
    assert len(seen) == 1 and not seen[0].lost
    protocol.connection_lost(None)
    assert lost.is_set() and seen[0].lost
    await asyncio.wait_for(finished.wait(), 2.0)


async def test_an_answered_request_is_freed_without_the_cycle_collector() -> None:
    class Marker:
        pass

    scopes: list[weakref.ref[Marker]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert isinstance(scope["extensions"][LINK], ConnectionLink)
        # Lives as long as the scope does (a dict cannot be referenced weakly).
        scope["marker"] = marker = Marker()
        scopes.append(weakref.ref(marker))
        del marker
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    protocol = _protocol(app)
    transport = Transport()
    protocol.connection_made(transport)
    gc.collect()
    gc.disable()
    try:
        protocol.data_received(REQUEST)
        await asyncio.sleep(0.05)
        protocol.data_received(REQUEST)  # the next request replaces the first's cycle
        await asyncio.sleep(0.05)
        assert transport.written.count(b"HTTP/1.1 200") == 2
        assert scopes[0]() is None, "the first request's scope was kept alive by a reference cycle"
    finally:
        gc.enable()
        protocol.connection_lost(None)


async def test_the_link_says_when_the_whole_body_has_come() -> None:
    # `read_body` (app/routes/edge.py) times its reads only while the body can still
    # be on its way; the link is how it knows.
    seen: list[tuple[bool, bool]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        link = scope["extensions"][LINK]
        before = link.body_complete
        while (await receive()).get("more_body"):
            pass
        seen.append((before, link.body_complete))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    protocol = _protocol(app)
    protocol.connection_made(Transport())
    protocol.data_received(REQUEST)  # head and body in one read
    await asyncio.sleep(0.05)
    head, body = REQUEST[:-2], REQUEST[-2:]
    protocol.data_received(head)  # the body after the application started
    await asyncio.sleep(0.05)
    protocol.data_received(body)
    await asyncio.sleep(0.05)
    protocol.connection_lost(None)
    assert seen == [(True, True), (False, True)]
