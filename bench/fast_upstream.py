"""A fast legacy Streamable HTTP upstream: a benchmark load target, not a test peer.

    python bench/fast_upstream.py --port 9100

Answers `initialize` (with an `Mcp-Session-Id`), `tools/list` (one tool,
`echo`) and `tools/call` in the legacy JSON form (`application/json`, no SSE),
`notifications/*` with 202, `DELETE` with 200 and `GET` with 405 (no standalone
stream). With `--sse`, a request's answer is an SSE stream instead (one
`message` event with an id, chunked, as the SDK's servers send it).
Raw asyncio on uvloop with a minimal HTTP/1.1 reader (keep-alive,
Content-Length request bodies only): about 10 us of CPU per call, so that what a
benchmark measures in front of it is the hop, not the server. The tests use
the official SDK server (tests/fixtures); nothing here is evidence of MCP
behaviour.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid
from typing import Any, cast

import orjson

_LEGACY = ("2025-03-26", "2025-06-18", "2025-11-25")
_TOOLS = {
    "tools": [
        {
            "name": "echo",
            "description": "Echo the message back",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
            },
        }
    ]
}
_SESSION = uuid.uuid4().hex
_SSE = False  # --sse


def _answer(msg: Any) -> tuple[int, bytes, bool]:
    """(status, body, carries the session header) for one JSON-RPC message."""
    if not isinstance(msg, dict) or "id" not in msg:
        return 202, b"", False  # a notification or a response
    method = msg.get("method")
    params = msg.get("params") or {}
    if method == "tools/call":
        text = str((params.get("arguments") or {}).get("text", "ping"))
        result: Any = {"content": [{"type": "text", "text": text}], "isError": False}
    elif method == "tools/list":
        result = _TOOLS
    elif method == "initialize":
        asked = params.get("protocolVersion")
        result = {
            "protocolVersion": asked if asked in _LEGACY else _LEGACY[-1],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "bench-fast-upstream", "version": "1"},
        }
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        return 200, orjson.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": error}), False
    body = orjson.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result})
    return 200, body, method == "initialize"


_REASONS = {200: b"OK", 202: b"Accepted", 400: b"Bad Request", 405: b"Method Not Allowed"}


def _response(status: int, body: bytes, session: bool = False, json: bool = True) -> bytes:
    head = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"X"))]
    if _SSE and body and json:
        head.append(b"content-type: text/event-stream")
        head.append(b"cache-control: no-cache")
        if session:
            head.append(b"mcp-session-id: " + _SESSION.encode())
        head.append(b"transfer-encoding: chunked")
        event = b"event: message\r\nid: 1\r\ndata: " + body + b"\r\n\r\n"
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event)
        return b"\r\n".join(head) + b"\r\n\r\n" + chunked
    if body and json:
        head.append(b"content-type: application/json")
    if session:
        head.append(b"mcp-session-id: " + _SESSION.encode())
    if status == 405:
        head.append(b"allow: POST, DELETE")
    head.append(b"content-length: %d" % len(body))
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class Http(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].split(b"\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self.transport.write(self._handle(head[0].split(b" ", 1)[0], body))

    def _handle(self, verb: bytes, body: bytes) -> bytes:
        if verb == b"POST":
            try:
                msg = orjson.loads(body)
            except orjson.JSONDecodeError:
                return _response(400, b"")
            return _response(*_answer(msg))
        if verb == b"DELETE":
            return _response(200, b"", json=False)
        return _response(405, b"", json=False)


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Http, host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--sse", action="store_true", help="answer requests with SSE streams")
    args = parser.parse_args()
    global _SSE
    _SSE = args.sse
    print(f"fast upstream on http://{args.host}:{args.port}/mcp pid {os.getpid()}", flush=True)
    import uvloop

    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
