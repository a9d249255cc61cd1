"""The ASGI answer to one call: JSON when the answer comes first, SSE when
notifications come first and the client accepts SSE. A client that goes away
cancels the call (2026-07-28 streamable-http "Cancellation")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

from starlette.responses import Response

from app import jsonio
from app.gateway import Outgoing

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]

_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    # streamable-http "Receiving Messages": SHOULD, so proxies do not buffer.
    (b"x-accel-buffering", b"no"),
]


def sse_event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + jsonio.dumps(message) + b"\n\n"


_KEEPALIVE = b":\n\n"


def _frame(out: Outgoing) -> bytes:
    # streamable-http "Receiving Messages": a comment line keeps quiet
    # long-lived streams open through intermediaries.
    return _KEEPALIVE if out.keepalive else sse_event(out.message)


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
        on_done: Callable[[int, bool], None],
        write_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(status_code=200)
        self._events = events
        self._sse_ok = accepts_sse
        self._json_ok = accepts_json
        self._on_done = on_done
        self._write_timeout_s = write_timeout_s
        self._status = 200

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        main = asyncio.current_task()
        assert main is not None
        disconnected = asyncio.Event()

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected.set()
                    main.cancel()
                    return

        watcher = asyncio.create_task(watch())
        try:
            await self._serve(send)
        except ClientStalled:
            # Ended like a disconnect: the generator's cleanup cancels upstream work.
            disconnected.set()
        except asyncio.CancelledError:
            if not disconnected.is_set():
                raise
            main.uncancel()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await self._events.aclose()
            self._on_done(self._status, disconnected.is_set())

    async def _serve(self, send: Send) -> None:
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
                # The status is the answer's (an error's 400 or 404) whatever
                # the client accepts.
                self._status = final.status
                await self._start_sse(send, final.status)
                await send({"type": "http.response.body", "body": sse_event(final.message)})
            return
        await self._start_sse(send)
        await self._write(send, _frame(first), more=True)
        async for out in self._events:
            if out.final:
                await self._write(send, _frame(out), more=False)
                return
            await self._write(send, _frame(out), more=True)
        await send({"type": "http.response.body", "body": b""})

    async def _write(self, send: Send, body: bytes, *, more: bool) -> None:
        # A client that stops reading fills the socket buffer and would hold
        # this stream (and, for a listen, its upstream subscriptions) forever.
        try:
            async with asyncio.timeout(self._write_timeout_s):
                await send({"type": "http.response.body", "body": body, "more_body": more})
        except TimeoutError:
            raise ClientStalled from None

    async def _send_json(self, send: Send, out: Outgoing) -> None:
        body = jsonio.dumps(out.message)
        self._status = out.status
        await send(
            {
                "type": "http.response.start",
                "status": out.status,
                "headers": [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _start_sse(self, send: Send, status: int = 200) -> None:
        await send({"type": "http.response.start", "status": status, "headers": _SSE_HEADERS})
