"""app/handoff.py: what one worker hands another. The request rebuilt reads
back as it came; the inbox serves a handed socket with the request first, and
closes (never serves) what is malformed or waited too long. Over real socket
pairs; tests/integration/test_workers_stdio.py hands real client connections
between real workers."""

from __future__ import annotations

import array
import asyncio
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httptools

from app import handoff
from app.handoff import Handoff, request_bytes


class Parsed:
    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.done = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.done = True


def test_the_rebuilt_request_reads_back_as_it_came() -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"t":"\xc3\xa9"}}'
    headers = [("host", "127.0.0.1:9"), ("mcp-session-id", "abc"), ("mcp-shim-hop", "1")]
    parsed = Parsed()
    parser = httptools.HttpRequestParser(parsed)
    parser.feed_data(request_bytes("POST", "/mcp?x=1", headers, body))
    assert parsed.done
    assert parser.get_method() == b"POST"
    assert (b"content-length", str(len(body)).encode()) in parsed.headers
    assert (b"mcp-session-id", b"abc") in parsed.headers
    assert parsed.body == body


class Recorder(asyncio.Protocol):
    def __init__(self, seen: list[bytes], made: asyncio.Event) -> None:
        self._seen = seen
        self._made = made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._made.set()

    def data_received(self, data: bytes) -> None:
        self._seen.append(data)


@contextmanager
def inbox() -> Iterator[tuple[Handoff, socket.socket]]:
    """A worker's Handoff on one end of a pair; the other end is its sibling's outbox."""
    mine, sibling = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    box = Handoff(mine.detach(), {})
    try:
        yield box, sibling
    finally:
        box.close()
        sibling.close()


def hand(outbox: socket.socket, client: socket.socket, request: bytes, sent_at: float) -> None:
    stamp = int(sent_at * 1e6).to_bytes(8, "big")
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [client.fileno()]))]
    outbox.sendmsg([stamp, request], rights)
    client.close()  # the receiver's descriptor is the socket's only one now


async def _eventually(check: object, what: str) -> None:
    for _ in range(200):
        if callable(check) and check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(what)


async def test_a_handed_socket_is_served_with_its_request_first() -> None:
    seen: list[bytes] = []
    made = asyncio.Event()
    with inbox() as (box, outbox):
        box.start(lambda: Recorder(seen, made))
        ours, theirs = socket.socketpair()
        try:
            hand(outbox, ours, b"GET / HTTP/1.1\r\n\r\n", time.time())
            await asyncio.wait_for(made.wait(), 5)
            theirs.sendall(b"next")  # the client's next bytes reach the new owner
            await _eventually(lambda: b"".join(seen) == b"GET / HTTP/1.1\r\n\r\nnext", "order")
        finally:
            theirs.close()


async def test_malformed_and_stale_handovers_are_closed_not_served() -> None:
    seen: list[bytes] = []
    made = asyncio.Event()
    with inbox() as (box, outbox):
        box.start(lambda: Recorder(seen, made))
        outbox.send(b"no descriptor with it")
        ours, theirs = socket.socketpair()
        try:
            hand(outbox, ours, b"GET / HTTP/1.1\r\n\r\n", time.time() - handoff.STALE_S - 1)
            theirs.setblocking(False)
            ended = asyncio.get_running_loop().sock_recv(theirs, 10)
            # Closed: its client sees the connection end.
            assert await asyncio.wait_for(ended, 5) == b""
        finally:
            theirs.close()
        await asyncio.sleep(0.05)
        assert not made.is_set() and seen == []
