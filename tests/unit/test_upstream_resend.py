"""The upstream POST of a message that is not a request, on a connection the server closes.

A server closes an idle keep-alive connection after its timeout (uvicorn: 5 s);
a POST the client sends on it at that moment gets no answer. The gateway's
poster (app/upstream/streamable_http/transport.py) sends a response or a notification
once more on a new connection when that happens on a reused connection, and
never a request (RFC 9112 section 9.3.1: only what is known to be idempotent
is retried). The HTTP peer here is a few lines of asyncio that answers the
first request of each connection and hangs up on the next one: an HTTP-level
behaviour, no MCP involved (the MCP-level test against the real fixture is
tests/integration/test_mrtr_reply.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.config import Settings
from app.upstream.errors import UpstreamUnavailable
from app.upstream.httpclient.client import UpstreamClient, build_client
from app.upstream.httpclient.common import KEEPALIVE_S
from app.upstream.streamable_http.transport import StreamableHttpSession, resendable
from tests.unit.http_peer import LoopbackPeer, read_request
from translators.registry import get_version

RESPONSE = {"jsonrpc": "2.0", "id": 7, "result": {"action": "cancel"}}
ERROR = {"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "x"}}
NOTIFICATION = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}
REQUEST = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "t"}}


def test_only_what_is_not_a_request_is_resendable() -> None:
    assert resendable(RESPONSE)
    assert resendable(ERROR)
    assert resendable(NOTIFICATION)
    assert not resendable(REQUEST)


class HangUpServer(LoopbackPeer):
    """Answers 202 to the first request of a connection; with `hang_up_on` set,
    closes the connection without a byte of answer on that request of it."""

    def __init__(self, hang_up_on: int) -> None:
        self.hang_up_on = hang_up_on
        self.seen: list[tuple[int, int, bytes]] = []  # (connection, its request no., body)
        self._connections = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        connection, served = self._connections, 0
        try:
            while True:
                _, body = await read_request(reader)
                served += 1
                self.seen.append((connection, served, body))
                if served == self.hang_up_on:
                    return
                writer.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@pytest.fixture(params=["h1", "aiohttp"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[UpstreamClient]:
    # h1 (app/upstream/httpclient/h1.py) is the default hot path, aiohttp the other one
    # that resends.
    upstream = build_client(connect_timeout_s=5.0, max_connections=8, transport=request.param)
    try:
        yield upstream
    finally:
        await upstream.aclose()


async def _serve(hang_up_on: int) -> HangUpServer:
    peer = HangUpServer(hang_up_on)
    peer.server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
    return peer


def _session(client: UpstreamClient, url: str) -> StreamableHttpSession:
    return StreamableHttpSession(client, url, {}, "s-1", get_version("2025-11-25"), 10.0)


@pytest.mark.parametrize("message", [RESPONSE, NOTIFICATION], ids=["response", "notification"])
async def test_lost_on_a_reused_connection_is_sent_once_more_on_a_new_one(
    client: UpstreamClient, message: dict[str, Any]
) -> None:
    peer = await _serve(hang_up_on=2)
    session = _session(client, peer.url)
    await session.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
    # The pooled connection of the first POST is reused, and hung up on.
    if "method" in message:
        await session.notify(message)
    else:
        await session.respond(message)
    bodies = [(c, n) for c, n, body in peer.seen if b'"id":7' in body or b"cancelled" in body]
    assert bodies == [(1, 2), (2, 1)], peer.seen


async def test_a_request_is_never_sent_twice(client: UpstreamClient) -> None:
    peer = await _serve(hang_up_on=2)
    session = _session(client, peer.url)
    await session.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
    with pytest.raises(UpstreamUnavailable):
        exchange = await session.request(REQUEST)
        await exchange.aclose()
    assert [n for _, n, body in peer.seen if b"tools/call" in body] == [2], peer.seen


async def test_a_new_connection_that_fails_is_not_retried(client: UpstreamClient) -> None:
    # A server that hangs up on a fresh connection is not closing an idle one:
    # its failure is the answer, not a race to paper over.
    peer = await _serve(hang_up_on=1)
    session = _session(client, peer.url)
    with pytest.raises(UpstreamUnavailable):
        await session.respond(RESPONSE)
    assert len(peer.seen) == 1, peer.seen


def test_pooled_connections_expire_before_common_servers_close_them() -> None:
    # uvicorn's and Node's keep-alive timeouts are 5 s: equal, the gateway picked
    # connections the server was closing (found with bench/parked.py).
    default = Settings.model_fields["upstream_keepalive_s"].default
    assert default == KEEPALIVE_S < 5.0
