"""What the scripted HTTP/1.1 peers of the upstream-client tests share
(test_upstream_answers, test_upstream_resend, test_upstream_h1): reading one
request off a connection, and the loopback URL of the listening server."""

from __future__ import annotations

import asyncio


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request: its head, up to and with the blank line, and its body
    (Content-Length bytes; the clients under test send no other framing).
    Raises asyncio.IncompleteReadError when the client closes first."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.decode().split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return head, await reader.readexactly(length)


class LoopbackPeer:
    """A peer's `asyncio.Server`, once started, and where a client reaches it."""

    server: asyncio.Server | None = None
    path = "/mcp"

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}{self.path}"
