"""The ASGI answer to one call: JSON when the answer comes first, SSE when
notifications come first and the client accepts SSE. A client that goes away
cancels the call (2026-07-28 streamable-http "Cancellation")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any

from starlette.responses import Response

from app import splice, write_coalescer
from app.call import Outgoing, mark
from app.connection.held import ClientHeld, Receive, Scope, Send
from app.connection.link import ConnectionLink

Chunk = bytes | bytearray | memoryview

_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    # streamable-http "Receiving Messages": SHOULD, so proxies do not buffer.
    (b"x-accel-buffering", b"no"),
]


def sse_event(message: dict[str, Any], event_id: str | None = None) -> bytes:
    return b"".join(sse_event_chunks(message, event_id))


def sse_event_chunks(message: dict[str, Any], event_id: str | None = None) -> list[Chunk]:
    """One event in pieces: the framing is not concatenated with a large
    message, and its large strings stay the upstream's bytes (app/splice.py;
    bench/answers.py measures the peak RSS of an answer)."""
    # An SSE line cannot hold a line break; ids come from the upstream's own SSE lines.
    head = b"event: message\ndata: "
    if event_id is not None:
        head = b"id: " + event_id.encode() + b"\n" + head
    body = splice.dumps_chunks(message)
    if len(body) == 1 and len(body[0]) <= _PIECE:
        return [head + body[0] + b"\n\n"]
    return [head, *body, b"\n\n"]


_KEEPALIVE = b":\n\n"
# uvicorn's transport high-water mark (uvicorn.protocols.http.flow_control).
_PIECE = 64 * 1024


def _frame(out: Outgoing) -> bytes | list[Chunk]:
    # streamable-http "Receiving Messages": a comment line keeps quiet
    # long-lived streams open through intermediaries.
    if out.keepalive:
        # With an id: a priming event (2025-11-25 streamable-http), where a
        # client that lost the stream resumes with Last-Event-ID.
        return (
            _KEEPALIVE if out.event_id is None else b"id: " + out.event_id.encode() + b"\ndata:\n\n"
        )
    return sse_event_chunks(out.message, out.event_id)


class ClientStalled(Exception):
    """The client read nothing for MCP_SHIM_WRITE_TIMEOUT_S while we had data for it."""


class CallAnswer(Response):
    # A Response subclass only so FastAPI hands it to the server untouched;
    # it writes its own status, headers and body in __call__.
    def __init__(
        self,
        events: AsyncGenerator[Outgoing, None],
        *,
        accepts_sse: bool,
        accepts_json: bool,
        on_done: Callable[[int, str | None], None],
        write_timeout_s: float = 30.0,
    ) -> None:
        # Response's own __init__ renders a body and headers this class never
        # sends: only the attributes a Response is expected to have.
        self.status_code = 200
        self.background = None
        self.body = b""
        self.raw_headers = []
        self._events = events
        self._sse_ok = accepts_sse
        self._json_ok = accepts_json
        self._on_done = on_done
        self._write_timeout_s = write_timeout_s
        self._status = 200
        self._started = False
        self._link: ConnectionLink | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        ending: str | None = None
        held = ClientHeld(receive, scope)
        self._link = held.link
        try:
            async with held:
                # One frame less between the task and the upstream's socket: each
                # of the call's suspensions resumes through every frame above.
                await self._answer(send)
                mark("answer_written")
            await write_coalescer.let_writes_out()
        except ClientStalled:
            # Ended like a disconnect: the generator's cleanup cancels upstream
            # work; the protocol aborts the connection (app/serving/http_protocol.py).
            ending = "client_stalled"
        except Exception:
            # uvicorn logs it and answers 500 if nothing was sent yet; the call
            # line must say so rather than the 200 we had not sent.
            ending = "internal_error"
            if not self._started:
                self._status = 500
            raise
        finally:
            await self._events.aclose()
            if ending is None and held.disconnected.is_set():
                ending = "client_disconnected"
            self._on_done(self._status, ending)

    async def _answer(self, send: Send) -> None:
        first = await anext(self._events)
        while first.keepalive and not self._sse_ok:
            first = await anext(self._events)
        if first.final or not self._sse_ok:
            final = first
            while not final.final:
                final = await anext(self._events)
            if self._json_ok:
                await self._send_json(send, final)
            else:
                # Nothing is sent yet, so the status can still be the answer's:
                # an unreachable upstream is 502 in either form, and the
                # 2026-07-28 error statuses (400 for -32020/-32021/-32022,
                # streamable-http "Backward Compatibility") are what a client
                # inspects first; not a 200 around an error event.
                self._status = final.status
                await self._start_sse(send, final.status, final.headers)
                await self._write(send, sse_event_chunks(final.message), more=False)
            return
        await self._start_sse(send)
        await self._write(send, _frame(first), more=True)
        async for out in self._events:
            if out.final:
                await self._write(send, _frame(out), more=False)
                return
            await self._write(send, _frame(out), more=True)
        await self._write(send, b"", more=False)

    async def _write(self, send: Send, body: bytes | list[Chunk], *, more: bool) -> None:
        # uvicorn's send waits for the transport to drain only before a write
        # that finds it already paused; the write itself never blocks, so one
        # large body would go whole into the transport's buffer and a client
        # that reads nothing would hold it. In pieces of the transport's
        # high-water mark, each send waits for the previous ones to drain: at
        # most about two pieces are buffered, and the timeout measures the
        # client's reading. A send that finds the transport not paused does
        # not wait (uvicorn's `RequestResponseCycle.send`): it is timed only
        # when it can wait, an asyncio.timeout per write was 2-3% of the hot
        # path (bench/profile.py).
        chunks = [body] if isinstance(body, bytes) else body
        try:
            for i, chunk in enumerate(chunks):
                last_chunk = i == len(chunks) - 1
                await self._write_chunk(send, chunk, more=more or not last_chunk)
        except TimeoutError:
            raise ClientStalled from None

    async def _write_chunk(self, send: Send, chunk: Chunk, *, more: bool) -> None:
        for start in range(0, max(len(chunk), 1), _PIECE):
            # A piece of an upstream's bytes (a memoryview: app/splice.py)
            # becomes bytes of its own, as a slice of bytes does.
            piece = bytes(chunk[start : start + _PIECE])
            last = start + _PIECE >= len(chunk)
            message: dict[str, Any] = {
                "type": "http.response.body",
                "body": piece,
                "more_body": more or not last,
            }
            if self._link is not None and not self._link.write_paused:
                # The send cannot wait: nothing to time.
                await send(message)
                continue
            async with asyncio.timeout(self._write_timeout_s):
                await send(message)

    async def _start(self, send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        message: dict[str, Any] = {
            "type": "http.response.start",
            "status": status,
            "headers": headers,
        }
        try:
            if self._link is not None and not self._link.write_paused:
                await send(message)
            else:
                async with asyncio.timeout(self._write_timeout_s):
                    await send(message)
        except TimeoutError:
            raise ClientStalled from None
        self._started = True

    async def _send_json(self, send: Send, out: Outgoing) -> None:
        # A large answer's strings stay the upstream's bytes (app/splice.py):
        # no second copy of them is made to write it (bench/answers.py).
        chunks = splice.dumps_chunks(out.message)
        self._status = out.status
        link = self._link
        if len(chunks) == 1:
            body = chunks[0]
            if len(body) <= _PIECE and link is not None and isinstance(body, bytes):
                # One write for the whole answer when the connection allows it; a
                # larger body goes in pieces, each waiting for the client to read.
                if link.write_whole(out.status, [*_JSON_HEADERS, *_encoded(out.headers)], body):
                    self._started = True
                    return
        headers = [
            *_JSON_HEADERS,
            (b"content-length", str(sum(len(c) for c in chunks)).encode()),
            *_encoded(out.headers),
        ]
        await self._start(send, out.status, headers)
        await self._write(send, chunks, more=False)

    async def _start_sse(
        self, send: Send, status: int = 200, extra: tuple[tuple[str, str], ...] = ()
    ) -> None:
        headers = [*_SSE_HEADERS, *_encoded(extra)] if extra else _SSE_HEADERS
        await self._start(send, status, headers)


def _encoded(headers: tuple[tuple[str, str], ...]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
