"""The hot path's own HTTP/1.1 client (app/upstream/httpclient/h1.py) at the wire's edge:
what it writes, which connections it reuses, closes and bounds, its timeouts.

The HTTP peer is a few lines of asyncio scripted byte by byte (an HTTP-level
behaviour, no MCP involved; the real servers are in tests/integration). What
every transport must read the same way is in tests/unit/test_upstream_answers.py.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import jsonio
from app.upstream.errors import UpstreamError, UpstreamProtocolError, UpstreamTimeout
from app.upstream.httpclient import h1, h1_errors
from app.upstream.httpclient.client import UpstreamClient, build_client
from app.upstream.streamable_http.transport import StreamableHttpSession
from tests.unit.http_peer import LoopbackPeer, read_request
from translators.registry import get_version

CALL = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "t"}}
ANSWER = b'{"jsonrpc":"2.0","id":3,"result":{"content":[]}}'
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(ANSWER),
    ANSWER,
)
Writer = asyncio.StreamWriter
Script = Callable[[int, bytes, Writer], Awaitable[bool]]


class Peer(LoopbackPeer):
    """Runs `script(request number on the connection, request bytes, writer)` for
    each request; the script returns False to close the connection."""

    path = "/mcp?x=1"  # a query string the client must keep

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[tuple[int, bytes]] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        self.connections += 1
        connection, served = self.connections, 0
        try:
            while True:
                head, body = await read_request(reader)
                request = head + body
                served += 1
                self.requests.append((connection, request))
                if not await self.script(served, request, writer):
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Script], Awaitable[Peer]]]:
    peers: list[Peer] = []

    async def start(script: Script) -> Peer:
        peer = Peer(script)
        peer.server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
        peers.append(peer)
        return peer

    yield start
    for peer in peers:
        assert peer.server is not None
        peer.server.close()


async def _answer(served: int, request: bytes, writer: Writer) -> bool:
    writer.write(OK)
    return True


def _client(max_connections: int = 4, keepalive_s: float = 4.0) -> UpstreamClient:
    return build_client(
        connect_timeout_s=2.0, max_connections=max_connections, keepalive_s=keepalive_s
    )


def _lean(client: UpstreamClient) -> h1.H1Client:
    assert client._h1 is not None
    return client._h1


async def _call(client: UpstreamClient, url: str, timeout_s: float = 5.0, **headers: str) -> Any:
    session = StreamableHttpSession(
        client, url, headers, "s-1", get_version("2025-11-25"), timeout_s
    )
    exchange = await session.request(CALL)
    try:
        return [message async for message in exchange]
    finally:
        await exchange.aclose(drain=True)


async def test_the_request_is_one_write_with_host_length_and_the_sessions_headers(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    peer = await serve(_answer)
    async with _client() as client:
        await _call(client, peer.url, authorization="Bearer t")
    request = peer.requests[0][1]
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /mcp?x=1 HTTP/1.1"
    fields = [line.partition(b": ")[::2] for line in lines[1:]]
    named = {k.lower(): v for k, v in fields}
    assert len(named) == len(fields), "a header sent twice"
    port = peer.url.split(":")[2].split("/")[0]
    assert named[b"host"] == b"127.0.0.1:" + port.encode()
    assert named[b"content-length"] == str(len(body)).encode()
    assert named[b"authorization"] == b"Bearer t"
    assert named[b"mcp-session-id"] == b"s-1"
    assert named[b"accept-encoding"] == b"gzip, deflate"  # decoded: test_upstream_answers


async def test_a_keep_alive_connection_serves_call_after_call(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    peer = await serve(_answer)
    async with _client() as client:
        for _ in range(3):
            await _call(client, peer.url)
        assert _lean(client).open_connections == 1
    assert [c for c, _ in peer.requests] == [1, 1, 1]


async def test_connection_close_and_http_1_0_are_not_reused(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    async def closing(served: int, request: bytes, writer: Writer) -> bool:
        if served == 1:
            writer.write(OK.replace(b"200 OK\r\n", b"200 OK\r\nconnection: close\r\n", 1))
        else:
            writer.write(OK.replace(b"HTTP/1.1", b"HTTP/1.0", 1))
        return True  # the server would keep it: the client must not

    peer = await serve(closing)
    async with _client() as client:
        await _call(client, peer.url)
        await _call(client, peer.url)
        await _call(client, peer.url)
        assert _lean(client).open_connections == 0
    assert [c for c, _ in peer.requests] == [1, 2, 3]


async def test_a_body_read_until_the_connection_closes(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    async def unframed(served: int, request: bytes, writer: Writer) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n" + ANSWER)
        return False

    peer = await serve(unframed)
    async with _client() as client:
        assert await _call(client, peer.url) == [
            {"jsonrpc": "2.0", "id": 3, "result": {"content": []}}
        ]
        assert _lean(client).open_connections == 0


async def test_deflate_and_an_interim_answer(serve: Callable[[Script], Awaitable[Peer]]) -> None:
    async def deflated(served: int, request: bytes, writer: Writer) -> bool:
        body = zlib.compress(ANSWER)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
        writer.write(
            b"content-encoding: deflate\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        return True

    peer = await serve(deflated)
    async with _client() as client:
        assert await _call(client, peer.url) == [
            {"jsonrpc": "2.0", "id": 3, "result": {"content": []}}
        ]


async def test_a_header_line_over_8_kib_is_refused(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    async def long_line(served: int, request: bytes, writer: Writer) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nx-long: " + b"a" * 9000 + b"\r\ncontent-length: 0\r\n\r\n"
        )
        return True

    peer = await serve(long_line)
    async with _client() as client:
        with pytest.raises(UpstreamProtocolError, match="malformed HTTP answer"):
            await _call(client, peer.url)
        assert _lean(client).open_connections == 0


async def test_a_value_with_a_line_break_is_never_sent(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    peer = await serve(_answer)
    async with _client() as client:
        with pytest.raises(UpstreamError, match="not printable ASCII"):
            await _call(client, peer.url, authorization="x\r\nx-injected: 1")
    assert peer.requests == []


async def test_the_read_timeout_runs_between_reads_not_over_the_answer(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    # aiohttp's sock_read: a stream that sends an event every 0.2 s lives past
    # the 0.5 s request timeout; one that stops for 0.5 s times out.
    async def slow(served: int, request: bytes, writer: Writer) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n")
        for _ in range(6):
            await asyncio.sleep(0.2)
            event = b": tick\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        event = b"data: " + ANSWER + b"\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
        return True

    peer = await serve(slow)
    async with _client() as client:
        started = time.monotonic()
        assert len(await _call(client, peer.url, timeout_s=0.5)) == 1
        assert time.monotonic() - started > 1.0
        with pytest.raises(UpstreamTimeout):
            await _call(client, peer.url, timeout_s=0.15)
        assert _lean(client).open_connections == 0


async def test_the_pool_is_bounded_and_a_wait_for_it_times_out(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    release = asyncio.Event()

    async def held(served: int, request: bytes, writer: Writer) -> bool:
        await release.wait()
        writer.write(OK)
        return True

    peer = await serve(held)
    async with _client(max_connections=1) as client:
        first = asyncio.create_task(_call(client, peer.url, timeout_s=5.0))
        await asyncio.sleep(0.05)
        # The one connection is busy: the second call waits for it (pool
        # timeout: the request timeout, as aiohttp's ClientTimeout(connect=pool)).
        with pytest.raises(UpstreamTimeout):
            await _call(client, peer.url, timeout_s=0.3)
        assert peer.connections == 1
        release.set()
        assert len(await first) == 1
        second = asyncio.create_task(_call(client, peer.url, timeout_s=2.0))
        third = asyncio.create_task(_call(client, peer.url, timeout_s=2.0))
        assert len(await second) == len(await third) == 1
        assert _lean(client).open_connections == 1


async def test_idle_connections_expire_and_closed_ones_are_not_reused(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    async def close_after(served: int, request: bytes, writer: Writer) -> bool:
        writer.write(OK)
        return served < 2  # the server closes the connection after its second answer

    peer = await serve(close_after)
    async with _client(keepalive_s=0.3) as client:
        lean = _lean(client)
        await _call(client, peer.url)
        await asyncio.sleep(0.6)  # past the keep-alive time: swept
        assert lean.open_connections == 0
        await _call(client, peer.url)
        await _call(client, peer.url)  # the server closes this one after answering
        await asyncio.sleep(0.05)
        await _call(client, peer.url)  # a request: it would not be resent
    assert [c for c, _ in peer.requests] == [1, 2, 2, 3]


async def test_a_call_given_up_early_closes_its_connection(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    async def endless(served: int, request: bytes, writer: Writer) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(10)
        return True

    peer = await serve(endless)
    async with _client() as client:
        task = asyncio.create_task(_call(client, peer.url))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _lean(client).open_connections == 0


async def test_closing_the_client_closes_every_pooled_connection(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    peer = await serve(_answer)
    client = _client(max_connections=8)  # one credential may hold half of them
    await asyncio.gather(*(_call(client, peer.url) for _ in range(3)))
    lean = _lean(client)
    assert lean.open_connections == 3
    await client.aclose()
    assert lean.open_connections == 0


async def test_a_refused_connection_is_the_gateways_error() -> None:
    async with _client() as client:
        with pytest.raises(UpstreamError, match="unreachable during 'tools/call': ConnectFailed"):
            await _call(client, "http://127.0.0.1:9/mcp")
        assert _lean(client).open_connections == 0


async def test_a_call_header_of_the_same_name_replaces_the_sessions(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    # `{**merged, **extra}`, as the aiohttp and httpx posters merge them: one field.
    peer = await serve(_answer)
    async with _client() as client:
        post = client.poster(httpx.URL(peer.url), {"traceparent": "old"}, httpx.Timeout(2.0))
        answer = await post(b"{}", {"TraceParent": "new", "tracestate": "a=1"})
        await answer.aclose()
    head = peer.requests[0][1].partition(b"\r\n\r\n")[0].lower()
    assert head.count(b"traceparent:") == 1
    assert b"traceparent: new\r\n" in head and b"tracestate: a=1\r\n" in head


def _self_signed() -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


async def test_https_goes_through_tls_with_the_clients_context(tmp_path: Path) -> None:
    cert, key = _self_signed()
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    trusting = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
    peer = Peer(_answer)
    peer.server = await asyncio.start_server(peer.handle, "127.0.0.1", 0, ssl=server_side)
    port = peer.server.sockets[0].getsockname()[1]
    lean = h1.H1Client(max_connections=2, keepalive_s=4.0, ssl_context=trusting)
    try:
        # The certificate names localhost: the name is checked, not only the chain.
        origin = lean.origin("https", "localhost", port)
        for _ in range(2):
            answer = await lean.request(
                origin,
                b"POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\n\r\n",
                connect_timeout=2.0,
                read_timeout=2.0,
                pool_timeout=2.0,
            )
            assert await answer.aread() == ANSWER
        assert peer.connections == 1  # kept alive over TLS too
        untrusting = h1.H1Client(
            max_connections=1, keepalive_s=1.0, ssl_context=ssl.create_default_context()
        )
        with pytest.raises(h1_errors.ConnectFailed):  # a context that does not trust it
            await untrusting.request(
                untrusting.origin("https", "localhost", port),
                b"POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\n\r\n",
                connect_timeout=2.0,
                read_timeout=2.0,
                pool_timeout=2.0,
            )
    finally:
        await lean.aclose()
        peer.server.close()


async def test_a_sessions_delete_get_stream_and_a_modern_request_go_through_h1_not_httpx(
    serve: Callable[[Script], Awaitable[Peer]],
) -> None:
    # A plain gateway's one-off requests (a session's DELETE, the era probe's
    # server/discover) on the h1 pool, its GET stream on h1's second pool:
    # httpx's transport over aiohttp is never made, so aiohttp is never
    # imported (bench/memory.py: about 6 MB of idle RSS).
    from app.upstream.httpclient.httpx_adapter import OnFirstRequest
    from app.upstream.modern.upstream import ModernHttpUpstream

    peer = await serve(_answer)
    async with _client() as client:
        session = StreamableHttpSession(
            client, peer.url, {"authorization": "Bearer t"}, "s-1", get_version("2025-11-25"), 5.0
        )
        stream = await session.listen("e-1")
        assert [m async for m in stream] == [jsonio.loads(ANSWER)]
        await stream.aclose()
        await session.close()
        modern = ModernHttpUpstream(client, peer.url, request_timeout_s=5.0)
        # The session's credential: connections are per credential.
        headers = {"mcp-method": "tools/call", "authorization": "Bearer t"}
        exchange = await modern.request(CALL, headers)
        assert [m async for m in exchange] == [jsonio.loads(ANSWER)]
        await exchange.aclose()
        transport = client._transport
        assert isinstance(transport, OnFirstRequest)
        assert transport._made is None
        assert _lean(client).open_connections == 1  # one keep-alive connection served both
        # The stream's pool is not the POSTs' (a held stream takes none of their slots).
        assert client._streams is not None and client._streams.open_connections == 1
    get, delete, post = (request for _, request in peer.requests)
    start, got = _head(get)
    assert start == b"GET /mcp?x=1 HTTP/1.1"
    assert got[b"accept"] == b"text/event-stream"
    assert got[b"last-event-id"] == b"e-1"
    assert got[b"mcp-session-id"] == b"s-1"
    assert b"content-length" not in got and b"content-type" not in got
    assert get.endswith(b"\r\n\r\n")
    start, named = _head(delete)
    assert start == b"DELETE /mcp?x=1 HTTP/1.1"
    # What httpx over aiohttp sent: the session's headers, aiohttp's empty body.
    assert named[b"mcp-session-id"] == b"s-1"
    assert named[b"authorization"] == b"Bearer t"
    assert named[b"mcp-protocol-version"] == b"2025-11-25"
    assert named[b"content-length"] == b"0"
    assert post.startswith(b"POST /mcp?x=1 HTTP/1.1\r\n")
    assert b"\r\nmcp-method: tools/call\r\n" in post
    assert post.endswith(b"\r\n\r\n" + jsonio.dumps(CALL))


def _head(request: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    """A request's start line and its header fields, names in lower case."""
    lines = request.partition(b"\r\n\r\n")[0].split(b"\r\n")
    return lines[0], {k.lower(): v for k, v in (line.partition(b": ")[::2] for line in lines[1:])}
