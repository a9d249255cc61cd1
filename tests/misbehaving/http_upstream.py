"""A misbehaving HTTP/1.1 MCP upstream, raw asyncio sockets, misbehaviour on demand.

Just enough legacy Streamable HTTP (2025-06-18) for the gateway to open a
session and call tools: `initialize` (with an `Mcp-Session-Id`),
notifications and responses (202), `tools/list`, `tools/call`, `ping`,
`DELETE`. What goes wrong is chosen per call by the tool's name:

- `echo` {text}: a plain answer (nothing wrong);
- `result` {bytes, sse, gzip}: a text result of `bytes` characters, as JSON
  or as one SSE event, gzip-encoded if asked (a gzip bomb: `bytes` of one
  character inflate a thousandfold), written in 1 MiB pieces;
- `stray` {text}: the answer and, in the same write, the head and first
  bytes of a second response (which would answer the next request: it
  carries that request's id);
- `stray_later` {text}: the answer; the next request that arrives on the
  same connection first gets a whole stray response (its id, the text
  "STRAY <text>"), then its own answer;
- and for every connection, `notify_204_body` (set on the server): a
  notification is answered 204 with a body, a whole stray response.

Usable in-process (`async with MisbehavingUpstream() as upstream:
upstream.url`) and as a process (`python -m tests.misbehaving.http_upstream
--port N`, prints its URL). It records each request's `Authorization` per
connection (`connections`), so a test can say which credentials a
connection carried.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import zlib
from collections.abc import Iterator
from types import TracebackType
from typing import Any

PIECE = 1024 * 1024
TOOLS = ["echo", "result", "stray", "stray_later"]


def _json_head(length: int, extra: str = "") -> bytes:
    return (
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        f"content-length: {length}\r\n{extra}\r\n"
    ).encode()


def _whole(message: dict[str, Any], extra: str = "") -> bytes:
    body = json.dumps(message).encode()
    return _json_head(len(body), extra) + body


def _text_result(request_id: Any, text: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"content": [{"type": "text", "text": text}], "isError": False},
    }


class MisbehavingUpstream:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # A whole response sent as the body of a 204 to a notification.
        self.notify_204_body: bytes | None = None
        # The Authorization of each request, per connection, in order.
        self.connections: list[list[str | None]] = []

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://{self._host}:{port}/mcp"

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def __aenter__(self) -> MisbehavingUpstream:
        await self.start()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        seen: list[str | None] = []
        self.connections.append(seen)
        pending_stray: str | None = None
        try:
            while True:
                method, headers, body = await _read_request(reader)
                seen.append(headers.get("authorization"))
                message = json.loads(body) if body else None
                if pending_stray is not None and isinstance(message, dict):
                    # The stray answer goes first: to the client it is the
                    # answer of this request, whoever sent it.
                    writer.write(_whole(_text_result(message.get("id"), pending_stray)))
                    pending_stray = None
                pending_stray = await self._answer(method, message, writer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _answer(self, method: str, message: Any, writer: asyncio.StreamWriter) -> str | None:
        """Writes the answer; returns the text of a stray answer for the next request."""
        if method == "DELETE":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            return None
        if method != "POST" or not isinstance(message, dict):
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            return None
        if "id" not in message or "method" not in message:
            if self.notify_204_body is not None:
                stray = self.notify_204_body
                head = f"HTTP/1.1 204 No Content\r\ncontent-length: {len(stray)}\r\n\r\n"
                writer.write(head.encode() + stray)
            else:
                writer.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
            return None
        request_id, name = message["id"], message["method"]
        params = message.get("params") or {}
        if name == "initialize":
            result = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "misbehaving", "version": "0"},
            }
            answer = {"jsonrpc": "2.0", "id": request_id, "result": result}
            writer.write(_whole(answer, "mcp-session-id: misbehaving-1\r\n"))
        elif name == "tools/list":
            tools = [{"name": t, "inputSchema": {"type": "object"}} for t in TOOLS]
            writer.write(_whole({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}}))
        elif name == "tools/call":
            return await self._call(request_id, params, writer)
        elif name == "ping":
            writer.write(_whole({"jsonrpc": "2.0", "id": request_id, "result": {}}))
        else:
            error = {"code": -32601, "message": f"no method {name}"}
            writer.write(_whole({"jsonrpc": "2.0", "id": request_id, "error": error}))
        return None

    async def _call(
        self, request_id: Any, params: dict[str, Any], writer: asyncio.StreamWriter
    ) -> str | None:
        tool = params.get("name")
        args = params.get("arguments") or {}
        text = str(args.get("text", "ok"))
        if tool == "result":
            await _write_large(writer, request_id, int(args["bytes"]), args)
            return None
        answer = _whole(_text_result(request_id, text))
        if tool == "stray":
            # A second response's head and the start of its body, in the same
            # write: id 1 is the first id a fresh pooled session uses.
            stray = json.dumps(_text_result(1, f"STRAY {text}")).encode()
            writer.write(answer + _json_head(len(stray)) + stray[: len(stray) // 2])
            return None
        writer.write(answer)
        return f"STRAY {text}" if tool == "stray_later" else None


async def _write_large(
    writer: asyncio.StreamWriter, request_id: Any, size: int, args: dict[str, Any]
) -> None:
    """A result of `size` characters, in pieces: the upstream holds at most one."""
    prefix = json.dumps(_text_result(request_id, "")).encode()
    cut = prefix.index(b'"text": ""') + len(b'"text": "')
    start, end = prefix[:cut], prefix[cut:]
    sse = bool(args.get("sse"))
    if sse:
        start, end = b"event: message\ndata: " + start, end + b"\n\n"
    compress = bool(args.get("gzip"))
    kind = "text/event-stream" if sse else "application/json"
    head = f"HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\n"
    if compress:
        # Chunked: the compressed length is not known before the end.
        writer.write(f"{head}content-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n".encode())
        packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        for piece in _pieces(start, size, end):
            out = packer.compress(piece)
            if out:
                writer.write(b"%x\r\n%s\r\n" % (len(out), out))
                await writer.drain()
        out = packer.flush()
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(out), out))
        return
    writer.write(f"{head}content-length: {len(start) + size + len(end)}\r\n\r\n".encode())
    for piece in _pieces(start, size, end):
        writer.write(piece)
        await writer.drain()


def _pieces(start: bytes, size: int, end: bytes) -> Iterator[bytes]:
    yield start
    left = size
    block = b"x" * PIECE
    while left > 0:
        n = min(left, PIECE)
        yield block[:n]
        left -= n
    yield end


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method = lines[0].split(" ", 1)[0]
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    return method, headers, await reader.readexactly(length)


async def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    upstream = MisbehavingUpstream(args.host, args.port)
    print(await upstream.start(), flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await upstream.stop()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main())
