"""A member's route called in process (app/servers/aggregate/inprocess.py):
its JSON and SSE answers read as messages, its status refused as an HTTP
answer's, the caller's close a disconnect the app sees, a failing app an
upstream error. The apps here are ASGI doubles; the members' real routes are
exercised by tests/integration/test_aggregate.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import pytest

from app.connection.held import ClientHeld
from app.servers.aggregate.inprocess import InProcessLink
from app.upstream.errors import UpstreamAuthChallenge, UpstreamError, UpstreamHttpError
from tests.waiting import until

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}


def link(app: Any) -> InProcessLink:
    return InProcessLink("docs", app, "127.0.0.1:8080", 1 << 20)


async def test_json_answer_and_the_scope_it_got() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen["scope"] = scope
        seen["body"] = json.loads((await receive())["body"])
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    exchange = await link(app).request(CALL, {"mcp-name": "x", "authorization": "Bearer t"})
    got = [m async for m in exchange]
    await exchange.aclose()
    assert got == [{"jsonrpc": "2.0", "id": 1, "result": {"content": []}}]
    assert seen["body"] == CALL
    scope = seen["scope"]
    assert (scope["path"], scope["root_path"], scope["method"]) == ("/mcp", "/servers/docs", "POST")
    headers = dict(scope["headers"])
    assert headers[b"host"] == b"127.0.0.1:8080" and headers[b"authorization"] == b"Bearer t"


async def test_sse_answer_streams_and_close_is_a_disconnect() -> None:
    ended = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
        await send(
            {
                "type": "http.response.body",
                "body": b"event: message\ndata: " + json.dumps(note).encode() + b"\n\n",
                "more_body": True,
            }
        )
        assert (await receive())["type"] == "http.disconnect"
        ended.set()

    exchange = await link(app).request(CALL, {})
    first = await anext(aiter(exchange))
    assert first["method"] == "notifications/progress"
    await exchange.aclose()
    assert ended.is_set()


async def test_close_is_the_connection_lost_for_a_held_answer() -> None:
    """The app holds its answer as on the gateway's own protocol: the
    disconnect by the link's callback, no watcher task, the body complete."""
    held: dict[str, Any] = {}
    ended = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": 200, "headers": []}
        await send({**start, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b": hi\n\n", "more_body": True})
        try:
            async with ClientHeld(receive, scope) as got:
                held["link"] = got.link
                await asyncio.Event().wait()
        finally:
            held["disconnected"] = got.disconnected.is_set()
            ended.set()

    exchange = await link(app).request(CALL, {})
    await until(lambda: "link" in held, what="the app to hold its answer")
    assert held["link"] is not None and held["link"].body_complete
    await exchange.aclose()
    assert ended.is_set() and held["disconnected"] and held["link"].lost


@pytest.mark.parametrize(
    ("status", "kind", "error"),
    [(401, b"application/json", UpstreamAuthChallenge), (502, b"text/plain", UpstreamHttpError)],
)
async def test_refused_status(status: int, kind: bytes, error: type[Exception]) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", kind)]}
        )
        await send({"type": "http.response.body", "body": b"no"})

    with pytest.raises(error):
        await link(app).request(CALL, {})


async def test_failing_app_is_an_upstream_error() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    with pytest.raises(UpstreamError, match="RuntimeError"):
        await link(app).request(CALL, {})
