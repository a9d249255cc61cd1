"""A small answer written whole by the protocol (ConnectionLink.write_whole,
app/connection/link.py) is byte for byte what uvicorn's own `send` writes for
the same `http.response.start` and `http.response.body`, and leaves uvicorn's
request cycle in the same state; whenever `send` would act on something
(framing headers, a refused header, a paused or closed connection, a response
under way), nothing is written and the answer goes through `send`.

The cycles are uvicorn's own (`RequestResponseCycle`), on a transport that
keeps what is written to it."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from app.connection.link import ConnectionLink
from tests.unit.test_connection_link import Transport  # keeps what is written to it

SERVER_HEADERS = [(b"date", b"Wed, 02 Dec 2026 19:00:00 GMT"), (b"server", b"uvicorn")]
EXTRA = ((b"x-request-id", b"abc-123"),)


class _Responses:
    """Counts the cycle's `on_response` calls: the protocol's turn after an answer."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


class _Flow:
    def __init__(self, paused: bool = False) -> None:
        self.write_paused = paused


def _cycle(
    *, method: str = "POST", keep_alive: bool = True, paused: bool = False
) -> tuple[RequestResponseCycle, Transport]:
    written = Transport()
    scope: Any = {"type": "http", "method": method, "http_version": "1.1"}
    cycle = RequestResponseCycle(
        scope=scope,
        transport=written,  # type: ignore[arg-type]
        flow=_Flow(paused),  # type: ignore[arg-type]
        logger=logging.getLogger("test"),
        access_logger=logging.getLogger("test.access"),
        access_log=False,
        default_headers=list(SERVER_HEADERS),
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=_Responses(),
    )
    return cycle, written


def _armed(cycle: RequestResponseCycle) -> ConnectionLink:
    link = ConnectionLink(cycle.flow, cycle)
    link.answer_headers = EXTRA
    return link


ANSWERS = [
    pytest.param(200, [(b"content-type", b"application/json")], b'{"jsonrpc":"2.0"}', id="200"),
    pytest.param(
        200,
        [(b"content-type", b"application/json"), (b"Mcp-Session-Id", b"s-1")],
        b'{"jsonrpc":"2.0","id":1,"result":{}}',
        id="session-header-in-capitals",
    ),
    pytest.param(202, [], b"", id="202-empty"),
    pytest.param(
        401,
        [(b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="x"')],
        b'{"error":{}}',
        id="401-challenge",
    ),
    pytest.param(502, [(b"content-type", b"application/json")], b"x" * 70_000, id="502-large"),
]


@pytest.mark.parametrize(("status", "headers", "body"), ANSWERS)
async def test_a_whole_answer_is_what_uvicorns_send_writes(
    status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    whole, whole_written = _cycle()
    assert _armed(whole).write_whole(status, list(headers), body)

    sent, sent_written = _cycle()
    length = (b"content-length", str(len(body)).encode())
    start = {"type": "http.response.start", "status": status}
    await sent.send({**start, "headers": [*headers, *EXTRA, length]})  # type: ignore[typeddict-item]
    await sent.send({"type": "http.response.body", "body": body})

    assert bytes(whole_written.written) == bytes(sent_written.written)
    for cycle in (whole, sent):
        assert cycle.response_started and cycle.response_complete
        assert cycle.on_response.count == 1  # type: ignore[attr-defined]
        assert cycle.message_event.is_set()
        assert not cycle.chunked_encoding and not cycle.waiting_for_100_continue
    assert not whole_written.closing


def _not_armed(cycle: RequestResponseCycle) -> ConnectionLink:
    return ConnectionLink(cycle.flow, cycle)


def _started(cycle: RequestResponseCycle) -> ConnectionLink:
    cycle.response_started = True
    return _armed(cycle)


def _gone(cycle: RequestResponseCycle) -> ConnectionLink:
    cycle.disconnected = True
    return _armed(cycle)


@pytest.mark.parametrize(
    ("make", "cycle_options", "headers"),
    [
        pytest.param(_not_armed, {}, [], id="not-armed"),
        pytest.param(_started, {}, [], id="response-begun"),
        pytest.param(_gone, {}, [], id="client-gone"),
        pytest.param(_armed, {"paused": True}, [], id="transport-paused"),
        pytest.param(_armed, {"keep_alive": False}, [], id="connection-to-close"),
        pytest.param(_armed, {"method": "HEAD"}, [], id="head"),
        pytest.param(_armed, {}, [(b"Content-Length", b"3")], id="framing-header"),
        pytest.param(_armed, {}, [(b"connection", b"close")], id="connection-header"),
        pytest.param(_armed, {}, [(b"x-a", b"1\r\nset-cookie: a=b")], id="value-injection"),
        pytest.param(_armed, {}, [(b"x a", b"1")], id="bad-name"),
    ],
)
async def test_nothing_is_written_when_send_must_act(
    make: Any, cycle_options: dict[str, Any], headers: list[tuple[bytes, bytes]]
) -> None:
    cycle, written = _cycle(**cycle_options)
    link = make(cycle)
    began = cycle.response_started
    assert not link.write_whole(200, headers, b"{}")
    assert written.written == b""
    assert cycle.response_started == began and not cycle.response_complete
    assert not cycle.message_event.is_set()
    assert cycle.on_response.count == 0  # type: ignore[attr-defined]


async def test_a_header_uvicorn_refuses_is_refused_by_send_after_the_fallback() -> None:
    cycle, written = _cycle()
    bad = [(b"x-a", b"1\r\nset-cookie: a=b")]
    assert not _armed(cycle).write_whole(200, bad, b"{}")
    with pytest.raises(RuntimeError, match="Invalid HTTP header value"):
        start = {"type": "http.response.start", "status": 200, "headers": bad}
        await cycle.send(start)  # type: ignore[arg-type]
    assert written.written == b""


async def test_the_link_does_not_keep_its_cycle_alive() -> None:
    cycle, _ = _cycle()
    link = _armed(cycle)
    del cycle
    gc.collect()
    assert not link.write_whole(200, [], b"{}")  # its cycle is gone: nothing to write on
