"""A recording HTTP proxy for one MCP endpoint, run in-process on a loopback port.

Put between two peers (a client and the gateway, or the gateway and the
legacy fixture) it forwards every request unchanged, streams every answer
back as it arrives (SSE included, so progress and cancellation behave as
without it), and records both sides: the request's method, headers and JSON
body; the answer's status, headers and the JSON-RPC messages it carried (the
JSON body, or each SSE event's data). Tests read `records` to see exactly
what crossed the wire, and validate it against the spec's schemas.

It runs aiohttp on its own event loop in a daemon thread, so synchronous
tests can use it while they block on their own HTTP calls.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from tests.procs import free_port
from tests.waiting import until_sync

# Hop-by-hop and framing headers: set by each HTTP connection, never forwarded.
_HOP = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "content-length",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
    }
)


@dataclass
class Record:
    """One HTTP exchange that crossed the proxy."""

    serial: int
    http_method: str
    headers: dict[str, str]  # request headers, lower-cased names
    body: Any  # parsed JSON request body, or None
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)  # JSON-RPC messages answered
    done: bool = False
    # How the answer ended: "complete", "client_gone" (the requester closed it),
    # "upstream_error" (the answering side failed or went away), "dropped" (the
    # proxy closed the connection instead of forwarding: `drop`).
    ending: str | None = None
    # Requests the same client connection carried before this one (0: a new one).
    served_before: int = 0

    @property
    def content_type(self) -> str:
        return self.response_headers.get("content-type", "").split(";")[0].strip()

    @property
    def method(self) -> str | None:
        """JSON-RPC method of the request body (None for responses and bodiless requests)."""
        if isinstance(self.body, dict):
            method = self.body.get("method")
            return method if isinstance(method, str) else None
        return None

    @property
    def session_id(self) -> str | None:
        return self.headers.get("mcp-session-id")


class _SseParser:
    def __init__(self, sink: Callable[[dict[str, Any]], None]) -> None:
        self._buffer = ""
        self._sink = sink
        self._decoder = codecs.getincrementaldecoder("utf-8")()

    def feed(self, chunk: bytes) -> None:
        self._buffer += self._decoder.decode(chunk).replace("\r\n", "\n")
        while "\n\n" in self._buffer:
            event, self._buffer = self._buffer.split("\n\n", 1)
            lines = event.split("\n")
            kind = next((line[6:].strip() for line in lines if line.startswith("event:")), "")
            if kind not in ("", "message"):
                continue  # an HTTP+SSE `endpoint` event: not a JSON-RPC message
            data = [line[5:].lstrip() for line in lines if line.startswith("data:")]
            if data and any(data):
                parsed = json.loads("\n".join(data))
                for message in parsed if isinstance(parsed, list) else [parsed]:
                    self._sink(message)


class RecordingProxy:
    """`every_path`: forward any path and query to the same on the upstream's origin
    (an HTTP+SSE server: GET /sse, then POSTs to the endpoint its stream names,
    which resolves against the proxy's origin); `url` is then the proxy's address
    of `upstream_url`. Otherwise only /mcp, to `upstream_url` itself.

    `drop`, if set, is asked about each request once its body is read: when it
    says so the proxy closes the client's connection without a byte of answer
    and forwards nothing (what a server closing an idle keep-alive connection
    does to a request that arrives on it at that moment).

    `whole`, if set, is asked the same: when it says so the proxy reads the
    upstream's whole answer before it sends a byte of it, then sends it in one
    piece with its Content-Length, so the end of the answer reaches the client
    with its first message (no wait between an SSE stream's last event and its
    end that the client could time out on)."""

    def __init__(
        self,
        upstream_url: str,
        extra_response_headers: Callable[[Record], dict[str, str]] | None = None,
        *,
        every_path: bool = False,
        drop: Callable[[Record], bool] | None = None,
        whole: Callable[[Record], bool] | None = None,
    ) -> None:
        self.upstream_url = upstream_url
        self.drop = drop
        self.whole = whole
        self._served: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        # Headers added to an answer (a Set-Cookie, say), chosen per exchange:
        # what an upstream (or a balancer in front of it) might add.
        self._extra_response_headers = extra_response_headers
        self.port = free_port()
        self._every_path = every_path
        parts = urlsplit(upstream_url)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        path = parts.path if every_path else "/mcp"
        self.url = f"http://127.0.0.1:{self.port}{path}"
        self.records: list[Record] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None

    # -- life cycle ---------------------------------------------------------

    def start(self) -> RecordingProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _start(self) -> None:
        self._client = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}" if self._every_path else "/mcp", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._client is not None:
            await self._client.close()

    # -- reading what was recorded -------------------------------------------

    def snapshot(self) -> list[Record]:
        with self._lock:
            return list(self.records)

    def mark(self) -> int:
        """A position in the record list: `since(mark)` gives what came after it."""
        with self._lock:
            return len(self.records)

    def since(self, mark: int) -> list[Record]:
        with self._lock:
            return self.records[mark:]

    def wait_for(
        self, predicate: Callable[[Record], bool], since: int = 0, timeout: float = 10.0
    ) -> Record:

        def seen() -> Record | None:
            return next((r for r in self.since(since) if predicate(r)), None)

        return until_sync(seen, timeout_s=timeout, what="the proxy to see a matching exchange")

    # -- forwarding ----------------------------------------------------------

    async def _whole(
        self, upstream: aiohttp.ClientResponse, record: Record, headers: dict[str, str]
    ) -> web.Response:
        try:
            body = await upstream.read()
        except aiohttp.ClientError:
            record.ending = "upstream_error"
            raise
        if record.content_type == "text/event-stream":
            _SseParser(record.messages.append).feed(body)
        elif body:
            with contextlib.suppress(ValueError):
                value = json.loads(body)
                record.messages.extend(value if isinstance(value, list) else [value])
        record.ending = "complete"
        return web.Response(status=upstream.status, headers=headers, body=body)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        with self._lock:
            record = Record(
                serial=len(self.records),
                http_method=request.method,
                headers={k.lower(): v for k, v in request.headers.items()},
                body=parsed,
                served_before=self._served.get(request.transport, 0),
            )
            self.records.append(record)
        self._served[request.transport] = record.served_before + 1
        if self.drop is not None and self.drop(record):
            record.ending, record.done = "dropped", True
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=503)  # never written: the connection is closed
        forward = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        assert self._client is not None
        try:
            target = self._origin + request.path_qs if self._every_path else self.upstream_url
            upstream = await self._client.request(
                request.method, target, headers=forward, data=raw or None
            )
        except aiohttp.ClientError:
            record.status, record.ending, record.done = 502, "upstream_error", True
            return web.Response(status=502, text="recording proxy: upstream unreachable")
        try:
            record.status = upstream.status
            record.response_headers = {k.lower(): v for k, v in upstream.headers.items()}
            headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
            if self._extra_response_headers is not None:
                headers.update(self._extra_response_headers(record))
            if self.whole is not None and self.whole(record):
                return await self._whole(upstream, record, headers)
            response = web.StreamResponse(status=upstream.status, headers=headers)
            await response.prepare(request)
            sse = record.content_type == "text/event-stream"
            parser = _SseParser(record.messages.append)
            body = bytearray()
            try:
                async for chunk in upstream.content.iter_any():
                    if sse:
                        parser.feed(chunk)
                    else:
                        body += chunk
                    await response.write(chunk)
            except (ConnectionResetError, asyncio.CancelledError):
                record.ending = "client_gone"
                raise
            except aiohttp.ClientError:
                record.ending = "upstream_error"
                raise
            if body:
                with contextlib.suppress(ValueError):
                    value = json.loads(body)
                    record.messages.extend(value if isinstance(value, list) else [value])
            record.ending = "complete"
            await response.write_eof()
            return response
        finally:
            record.done = True
            if record.ending == "complete":
                upstream.release()
            else:
                upstream.close()  # tell the answering side its reader went away
