"""How a session's POST reads what the upstream answers, byte for byte: the
messages of a JSON body or an SSE stream, and the gateway's own error for
every way an answer can break (the connection lost mid-answer, a timeout, a
malformed chunk, a body that is not JSON, headers too long).

The HTTP peer is a few lines of asyncio that reads one request and writes a
scripted answer: an HTTP-level behaviour, no MCP involved (the real servers
are in tests/integration). Each case runs on both stacks of the hot path
(h1's answer and aiohttp's response, read directly): the errors and their
messages are the same, and the same as when the hot path read through httpx.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import inspect
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from app.upstream.errors import (
    SessionExpired,
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamHttpError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.httpclient.client import UpstreamClient, build_client
from app.upstream.streamable_http.transport import StreamableHttpSession
from tests.unit.http_peer import LoopbackPeer, read_request
from translators.registry import get_version

CALL = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "t"}}
ANSWER = b'{"jsonrpc":"2.0","id":3,"result":{"content":[]}}'
NOTE = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}'


def _json(body: bytes, *extra: bytes) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"content-type: application/json", *extra]
    head.append(b"content-length: %d" % len(body))
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _chunked(*chunks: bytes, end: bool = True, extra: tuple[bytes, ...] = ()) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"content-type: text/event-stream", *extra]
    head.append(b"transfer-encoding: chunked")
    out = b"\r\n".join(head) + b"\r\n\r\n"
    for chunk in chunks:
        out += b"%x\r\n%s\r\n" % (len(chunk), chunk)
    return out + (b"0\r\n\r\n" if end else b"")


class ScriptedServer(LoopbackPeer):
    """Reads one request per connection, writes `answer`, then closes the
    connection unless `hold` (then it stays silent until the client leaves)."""

    def __init__(self, answer: bytes, hold: bool, keep_alive: bool = False) -> None:
        self.answer = answer
        self.hold = hold
        self.keep_alive = keep_alive  # answer every request of the connection
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await read_request(reader)
                writer.write(self.answer)
                await writer.drain()
                if not self.keep_alive:
                    break
            if self.hold:
                await reader.read()  # until the client closes
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@pytest.fixture(params=["h1", "aiohttp"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[UpstreamClient]:
    upstream = build_client(connect_timeout_s=5.0, max_connections=8, transport=request.param)
    try:
        yield upstream
    finally:
        await upstream.aclose()


async def _call(client: UpstreamClient, answer: bytes, hold: bool = False) -> list[Any]:
    """The messages of the answer to CALL, read as Gateway._forward reads them."""
    peer = ScriptedServer(answer, hold)
    peer.server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
    try:
        session = StreamableHttpSession(client, peer.url, {}, "s-1", get_version("2025-11-25"), 0.5)
        exchange = await session.request(CALL)
        messages: list[Any] = []
        try:
            async for message in exchange:
                messages.append(message)
        finally:
            await exchange.aclose(drain=True)
        return messages
    finally:
        peer.server.close()


GZIP = b"content-encoding: gzip"


@pytest.mark.parametrize(
    ("answer", "messages"),
    [
        (_json(ANSWER), [ANSWER]),
        (_json(b"[" + NOTE + b"," + ANSWER + b"]"), [NOTE, ANSWER]),
        (_json(b""), []),
        (_chunked(b"event: message\r\ndata: " + ANSWER + b"\r\n\r\n"), [ANSWER]),
        # one event across chunks, a priming event, a comment, CR line ends
        (
            _chunked(b"id: 1\r\ndata:\r\n\r\n: hi\n", b"data: " + NOTE[:9], NOTE[9:] + b"\r\r"),
            [NOTE],
        ),
        # what the upstream compressed (the gateway offers gzip) comes decompressed
        (_json(gzip.compress(ANSWER), GZIP), [ANSWER]),
        (_chunked(gzip.compress(b"data: " + ANSWER + b"\n\n"), extra=(GZIP,)), [ANSWER]),
    ],
    ids=["json", "batch", "empty", "sse", "sse-split", "json-gzip", "sse-gzip"],
)
async def test_messages_of_an_answer(
    client: UpstreamClient, answer: bytes, messages: list[bytes]
) -> None:
    assert await _call(client, answer) == [orjson.loads(m) for m in messages]


@pytest.mark.parametrize(
    ("answer", "generator"),
    [(_json(ANSWER), False), (_chunked(b"data: " + ANSWER + b"\n\n"), True)],
    ids=["json", "sse"],
)
async def test_a_json_answer_is_read_without_an_async_generator(
    client: UpstreamClient, answer: bytes, generator: bool
) -> None:
    # Each async generator costs the loop's first-iteration hook and a close of
    # its own; most calls' answers are JSON (bench/asyncio_costs.py).
    peer = ScriptedServer(answer, hold=False)
    peer.server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
    try:
        session = StreamableHttpSession(client, peer.url, {}, "s-1", get_version("2025-11-25"), 5.0)
        exchange = await session.request(CALL)
        try:
            assert inspect.isasyncgen(aiter(exchange)) is generator
            assert [m async for m in exchange] == [orjson.loads(ANSWER)]
        finally:
            await exchange.aclose(drain=True)
    finally:
        peer.server.close()


@pytest.mark.parametrize(
    "answer",
    [_json(ANSWER), _chunked(b"id: 1\ndata:\n\n", b"data: " + ANSWER + b"\n\n")],
    ids=["json", "sse"],
)
async def test_answered_calls_leave_no_cyclic_garbage(
    client: UpstreamClient, answer: bytes
) -> None:
    # What a call leaves in reference cycles survives into the collector's
    # older generations (bench/profile.py --gc): none, on a
    # keep-alive connection as in production.
    peer = ScriptedServer(answer, hold=False, keep_alive=True)
    peer.server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
    try:
        session = StreamableHttpSession(client, peer.url, {}, "s-1", get_version("2025-11-25"), 5.0)

        async def one() -> None:
            exchange = await session.request(CALL)
            async for message in exchange:
                if message.get("id") == 3:
                    break
            await exchange.aclose(drain=True)

        await one()  # the connection is open and pooled from here on
        gc.collect()
        gc.disable()
        try:
            for _ in range(40):
                await one()
            left = gc.collect()
        finally:
            gc.enable()
    finally:
        peer.server.close()
    assert left == 0, f"{left} objects of 40 calls were only freed by the cycle collector"


async def test_the_sse_answer_keeps_the_last_event_id(client: UpstreamClient) -> None:
    peer = ScriptedServer(
        _chunked(b"id: p-1\ndata:\n\n", b"id: p-2\ndata: " + ANSWER + b"\n\nid: p-3\n\n"),
        hold=False,
    )
    peer.server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
    try:
        session = StreamableHttpSession(client, peer.url, {}, "s-1", get_version("2025-11-25"), 0.5)
        exchange = await session.request(CALL)
        seen = []
        async for _ in exchange:
            seen.append(exchange.last_event_id)
        await exchange.aclose()
    finally:
        peer.server.close()
    # Each message with its own event's id; a priming event after it moves the id on.
    assert seen == ["p-2"]
    assert exchange.last_event_id == "p-3"


CUT_JSON = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"
BAD_CHUNK = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
BAD_CHUNK += b"transfer-encoding: chunked\r\n\r\nzz\r\ndata: x\r\n"
LONG_HEADER = b"HTTP/1.1 200 OK\r\nx-long: " + b"a" * 200_000 + b"\r\ncontent-length: 0\r\n\r\n"
# How the messages name the request: its method, quoted as a client's value.
WHAT = "'tools/call'"


@pytest.mark.parametrize(
    ("answer", "hold", "error", "message"),
    [
        # the connection lost in the middle of a JSON body, of an SSE stream
        (CUT_JSON, False, UpstreamUnavailable, f"upstream unreachable during {WHAT}: "),
        (
            _chunked(b"data: " + NOTE + b"\n\n", b"data: {", end=False),
            False,
            UpstreamUnavailable,
            f"upstream unreachable during {WHAT}: ",
        ),
        # no answer, no body, a stream that stops: the request's timeout (0.5 s)
        (b"", True, UpstreamTimeout, f"upstream timed out during {WHAT}"),
        (CUT_JSON, True, UpstreamTimeout, f"upstream timed out during {WHAT}"),
        (_chunked(b"data: " + NOTE + b"\n\n", end=False), True, UpstreamTimeout, None),
        # what is not JSON, not an object, not UTF-8
        (_json(b"not json"), False, UpstreamProtocolError, f"malformed data during {WHAT}"),
        (_json(b"42"), False, UpstreamProtocolError, f"answered {WHAT} with a non-object"),
        (_json(b'"\xff"'), False, UpstreamProtocolError, f"malformed data during {WHAT}"),
        (_chunked(b"data: nope\n\n"), False, UpstreamProtocolError, "malformed data"),
        # HTTP answers that are not an MCP answer
        (
            b"HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer x\r\ncontent-length: 0\r\n\r\n",
            False,
            UpstreamAuthChallenge,
            f"upstream answered {WHAT} with HTTP 401",
        ),
        (
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            False,
            SessionExpired,
            "upstream no longer knows the session",
        ),
        (
            b"HTTP/1.1 500 Oops\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nno",
            False,
            UpstreamHttpError,
            f"upstream answered {WHAT} with HTTP 500",
        ),
    ],
    ids=[
        "json-cut",
        "sse-cut",
        "no-head",
        "json-stalls",
        "sse-stalls",
        "not-json",
        "scalar",
        "not-utf8",
        "sse-not-json",
        "401",
        "404",
        "500",
    ],
)
async def test_a_broken_answer_is_the_gateways_error(
    client: UpstreamClient,
    answer: bytes,
    hold: bool,
    error: type[UpstreamError],
    message: str | None,
) -> None:
    with pytest.raises(error) as raised:
        await _call(client, answer, hold)
    if message is not None:
        assert message in raised.value.message
    if isinstance(raised.value, UpstreamAuthChallenge):
        assert raised.value.www_authenticate == "Bearer x"


async def test_every_challenge_of_a_401_is_relayed(client: UpstreamClient) -> None:
    # RFC 9110 section 11.6.1: a server may send a WWW-Authenticate field per scheme.
    head = b"HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer x\r\n"
    head += b'www-authenticate: Basic realm="y"\r\ncontent-length: 0\r\n\r\n'
    with pytest.raises(UpstreamAuthChallenge) as raised:
        await _call(client, head)
    assert raised.value.www_authenticate == 'Bearer x, Basic realm="y"'


@pytest.mark.parametrize(
    "answer", [BAD_CHUNK, LONG_HEADER, b"NOT HTTP\r\n\r\n"], ids=["chunk", "header", "status"]
)
async def test_a_malformed_http_answer_is_the_gateways_error(
    client: UpstreamClient, answer: bytes
) -> None:
    # Not aiohttp's ClientResponseError, which escaped the mapping before.
    with pytest.raises(UpstreamError) as raised:
        await _call(client, answer)
    assert isinstance(raised.value, UpstreamProtocolError)
    assert raised.value.message == f"upstream sent a malformed HTTP answer during {WHAT}"


async def test_the_drain_of_an_answered_stream_left_open_is_bounded(
    client: UpstreamClient,
) -> None:
    # The answer came, the server keeps the stream open and silent: closing
    # the exchange reads on for at most _DRAIN_S, then gives up quietly, and
    # leaves no cancel behind on the caller's task.
    from app.upstream.streamable_http import transport as streamable_http

    answer = _chunked(b"data: " + ANSWER + b"\n\n", end=False)
    peer = ScriptedServer(answer, hold=True)
    peer.server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
    loop = asyncio.get_running_loop()
    try:
        session = StreamableHttpSession(client, peer.url, {}, "s-1", get_version("2025-11-25"), 30)
        exchange = await session.request(CALL)
        assert [m async for m in _first(exchange)] == [orjson.loads(ANSWER)]
        started = loop.time()
        await exchange.aclose(drain=True)
        waited = loop.time() - started
        assert streamable_http._DRAIN_S * 0.8 <= waited < streamable_http._DRAIN_S + 2
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await asyncio.sleep(0)
    finally:
        peer.server.close()


async def _first(exchange: Any) -> AsyncIterator[Any]:
    async for message in exchange:
        yield message
        return
