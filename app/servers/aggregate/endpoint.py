"""The aggregate's own HTTP endpoint: one 2026-07-28 MCP server.

It serves `POST` at `PATH` on the gateway's own listener; the top-level `/mcp`
gateway graph, whose upstream it is (called in process: loopback.py), sits
in front of it and serves every client era, as for any modern server. Each request answered
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
from app.call import Message
from app.rejections import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, Rejection
from app.servers.aggregate.aggregator import Aggregator, Streamed, Whole
from app.servers.aggregate.listen import listen
from app.servers.aggregate.members import is_final

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


def sse_event(message: Message) -> bytes:
    return b"event: message\ndata: " + jsonio.dumps(message) + b"\n\n"


async def _sse(send: Send, first: Message | None, rest: AsyncIterator[Message]) -> None:
    """Stream `first` then `rest` until the last message (a response)."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
        }
    )
    try:
        if first is not None:
            await send({"type": "http.response.body", "body": sse_event(first), "more_body": True})
        async for message in rest:
            await send(
                {"type": "http.response.body", "body": sse_event(message), "more_body": True}
            )
            if is_final(message):
                break
    finally:
        closer = getattr(rest, "aclose", None)
        if closer is not None:
            with contextlib.suppress(Exception):
                await closer()
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _until_gone(receive: Receive, work: Awaitable[None]) -> None:
    """`work` until it ends or the caller disconnects, which cancels it (its
    clean-up closes the members' streams: 2026-07-28 streamable-http
    "Cancellation", a closed stream cancels the call)."""

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    working = asyncio.ensure_future(work)
    watching = asyncio.ensure_future(gone())
    try:
        await asyncio.wait((working, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (working, watching):
            task.cancel()
        await asyncio.gather(working, watching, return_exceptions=True)
    if working.done() and not working.cancelled():
        working.result()  # its exception, if it ended with one


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


def request_of(body: bytes | None, limit: int) -> Message | Rejection:
    """The one JSON-RPC message of a POST's body (None: not received or over
    `limit`), or the endpoint's refusal of it."""
    if body is None or len(body) > limit:
        return Rejection(INVALID_REQUEST, "request body too large or not received", status=413)
    try:
        message = jsonio.loads(body)
    except jsonio.JSONDecodeError:
        return Rejection(PARSE_ERROR, "the body is not JSON")
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return Rejection(INVALID_REQUEST, "the body is not one JSON-RPC request")
    return message


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
        message = request_of(await _body(receive, self.max_body_bytes), self.max_body_bytes)
        if isinstance(message, Rejection):
            await _json(send, message.http_status, message.to_message())
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if "id" not in message:  # a notification: nothing of it reaches a member
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await _until_gone(receive, self._answer(message, headers, send))

    async def _answer(self, message: Message, headers: dict[str, str], send: Send) -> None:
        if message["method"] == "subscriptions/listen":
            await _sse(send, None, listen(self.aggregator, message, headers))
            return
        answered = await self.aggregator.answer(message, headers)
        if isinstance(answered, Whole):
            await _json(send, answered.status, answered.message)
            return
        await self._stream(answered, send)

    async def _stream(self, answered: Streamed, send: Send) -> None:
        try:
            first = await anext(answered.messages, None)
            if first is None:  # `_renamed` always ends with a response: not expected
                refused = Rejection(INTERNAL_ERROR, "the server's answer ended empty", status=502)
                await _json(send, refused.http_status, refused.to_message())
                return
            if is_final(first):
                await _json(send, 200, first)
                return
            await _sse(send, first, answered.messages)
        finally:
            await answered.aclose()
