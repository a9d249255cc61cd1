"""The aggregate's own HTTP endpoint: one 2026-07-28 MCP server.

It serves `POST` at `PATH` on the gateway's own listener; the top-level `/mcp`
gateway graph (its upstream URL this endpoint on loopback) sits in front of it
and serves every client era, as for any modern server. Each request answered
in one JSON body, or as an SSE stream when the member's answer streams
(notifications before its result) or for `subscriptions/listen`; the caller's
disconnect closes the stream and every member's stream behind it. The
endpoint asks nothing a member's own route would not answer the same caller:
it passes the caller's `Authorization` on and adds no credential of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any, Final

import structlog

from app import jsonio
from app.rejections import INVALID_REQUEST, PARSE_ERROR, Rejection
from app.servers.aggregate.aggregator import Aggregator, Streamed, Whole
from app.servers.aggregate.listen import listen
from app.servers.aggregate.members import is_final
from app.upstream.base import Message

log = structlog.get_logger("mcp_shim.aggregate")

PATH: Final = "/aggregate/mcp"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def _json(send: Send, status: int, message: Message) -> None:
    body = jsonio.dumps(message)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _event(message: Message) -> bytes:
    return b"event: message\ndata: " + jsonio.dumps(message) + b"\n\n"


async def _sse(
    send: Send, receive: Receive, first: Message | None, rest: AsyncIterator[Message]
) -> None:
    """Stream `first` then `rest` until the last message (a response) or the
    caller's disconnect, whichever comes first."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
        }
    )

    async def pump() -> None:
        if first is not None:
            await send({"type": "http.response.body", "body": _event(first), "more_body": True})
        async for message in rest:
            await send({"type": "http.response.body", "body": _event(message), "more_body": True})
            if is_final(message):
                return

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    pumping = asyncio.create_task(pump())
    watching = asyncio.create_task(gone())
    try:
        await asyncio.wait((pumping, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pumping, watching):
            task.cancel()
        await asyncio.gather(pumping, watching, return_exceptions=True)
        closer = getattr(rest, "aclose", None)
        if closer is not None:
            with contextlib.suppress(Exception):
                await closer()
    if pumping.done() and not pumping.cancelled() and pumping.exception() is None:
        with contextlib.suppress(OSError, RuntimeError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _body(receive: Receive, limit: int) -> bytes | None:
    body = bytearray()
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            return None
        body += event.get("body", b"")
        if len(body) > limit:
            return None
        if not event.get("more_body", False):
            return bytes(body)


class Endpoint:
    """The ASGI app of `PATH`."""

    def __init__(self, aggregator: Aggregator, max_body_bytes: int) -> None:
        self.aggregator = aggregator
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await send(
                {"type": "http.response.start", "status": 405, "headers": [(b"allow", b"POST")]}
            )
            await send({"type": "http.response.body", "body": b""})
            return
        body = await _body(receive, self.max_body_bytes)
        if body is None:
            refused = Rejection(
                INVALID_REQUEST, "request body too large or not received", status=413
            )
            await _json(send, refused.http_status, refused.to_message())
            return
        try:
            message = jsonio.loads(body)
        except jsonio.JSONDecodeError:
            refused = Rejection(PARSE_ERROR, "the body is not JSON")
            await _json(send, refused.http_status, refused.to_message())
            return
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            refused = Rejection(INVALID_REQUEST, "the body is not one JSON-RPC request")
            await _json(send, refused.http_status, refused.to_message())
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if "id" not in message:  # a notification: nothing of it reaches a member
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if message["method"] == "subscriptions/listen":
            await _sse(send, receive, None, listen(self.aggregator, message, headers))
            return
        answered = await self.aggregator.answer(message, headers)
        if isinstance(answered, Whole):
            await _json(send, answered.status, answered.message)
            return
        await self._stream(answered, send, receive)

    async def _stream(self, answered: Streamed, send: Send, receive: Receive) -> None:
        try:
            first = await anext(answered.messages, None)
            if first is None:
                return
            if is_final(first):
                await _json(send, 200, first)
                return
            await _sse(send, receive, first, answered.messages)
        finally:
            await answered.aclose()
