"""The modern pass-through relays the upstream's answer body as it streams
(app/upstream/modern/upstream.py `ModernResponse`). The gateway's client offers
gzip and deflate upstream (httpx's Accept-Encoding) and does not relay
Content-Encoding, so what it relays must be the decoded body: the raw bytes
of a compressing upstream (an nginx with gzip on in front of the server) would
reach the client as undecodable JSON labelled application/json.

The HTTP peer is scripted (an HTTP-level behaviour, no MCP involved)."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import AsyncIterator, Callable

import orjson
import pytest

from app.upstream.httpclient.client import UpstreamClient, build_client
from app.upstream.modern.upstream import ModernHttpUpstream
from tests.unit.http_peer import LoopbackPeer, read_request

ANSWER = b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"complete"}}'
EVENT = b"event: message\ndata: " + ANSWER + b"\n\n"


def _answer(body: bytes, content_type: bytes, encoding: bytes) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"content-type: " + content_type]
    if encoding:
        head.append(b"content-encoding: " + encoding)
    head.append(b"content-length: %d" % len(body))
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class Peer(LoopbackPeer):
    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.heads: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head, _ = await read_request(reader)
            self.heads.append(head)
            writer.write(self.answer)
            await writer.drain()
        finally:
            writer.close()


@pytest.fixture
async def client() -> AsyncIterator[UpstreamClient]:
    upstream = build_client(connect_timeout_s=5.0, max_connections=8)
    try:
        yield upstream
    finally:
        await upstream.aclose()


def _deflated(body: bytes) -> bytes:
    return zlib.compress(body)


ENCODINGS: list[tuple[bytes, Callable[[bytes], bytes]]] = [
    (b"", lambda b: b),
    (b"gzip", gzip.compress),
    (b"deflate", _deflated),
]


async def _relayed(client: UpstreamClient, answer: bytes, whole: bool) -> bytes | None:
    """What the pass-through relays of `answer`: read whole, or streamed."""
    peer = Peer(answer)
    peer.server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
    try:
        upstream = ModernHttpUpstream(client, peer.url, request_timeout_s=5.0)
        response = await upstream.post(b"{}", {"content-type": "application/json"})
        try:
            assert all(name != "content-encoding" for name, _ in response.headers)
            if whole:
                return await response.read(1 << 20)
            return b"".join([chunk async for chunk in response.chunks()])
        finally:
            await response.aclose()
    finally:
        peer.server.close()


@pytest.mark.parametrize(("encoding", "encode"), ENCODINGS, ids=["identity", "gzip", "deflate"])
async def test_a_compressed_json_answer_is_relayed_decoded(
    client: UpstreamClient, encoding: bytes, encode: Callable[[bytes], bytes]
) -> None:
    body = await _relayed(client, _answer(encode(ANSWER), b"application/json", encoding), True)
    assert body is not None and orjson.loads(body) == orjson.loads(ANSWER)


@pytest.mark.parametrize(("encoding", "encode"), ENCODINGS, ids=["identity", "gzip", "deflate"])
async def test_a_compressed_event_stream_is_relayed_decoded(
    client: UpstreamClient, encoding: bytes, encode: Callable[[bytes], bytes]
) -> None:
    relayed = await _relayed(client, _answer(encode(EVENT), b"text/event-stream", encoding), False)
    assert relayed == EVENT
