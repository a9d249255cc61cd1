"""The aggregate's ASGI endpoint (app/servers/aggregate/endpoint.py): JSON or
SSE by the member's answer, refusals, and the caller's disconnect cancelling
the call and closing the member's stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

from app.servers.aggregate.endpoint import Endpoint
from tests.unit.test_aggregate_aggregator import Answers, Link, aggregator, req, tools


class Caller:
    """One request to the endpoint, as an ASGI server would make it."""

    def __init__(self, body: bytes, method: str = "POST") -> None:
        self.body = body
        self.method = method
        self.sent: list[MutableMapping[str, Any]] = []
        self.gone = asyncio.Event()
        self._first = True

    async def receive(self) -> dict[str, Any]:
        if self._first:
            self._first = False
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, event: MutableMapping[str, Any]) -> None:
        self.sent.append(event)

    async def call(self, endpoint: Endpoint) -> None:
        scope = {
            "type": "http",
            "method": self.method,
            "headers": [(b"mcp-protocol-version", b"2026-07-28")],
        }
        await endpoint(scope, self.receive, self.send)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def content_type(self) -> bytes:
        return dict(self.sent[0]["headers"]).get(b"content-type", b"")

    @property
    def body_bytes(self) -> bytes:
        return b"".join(e.get("body", b"") for e in self.sent[1:])


def endpoint(links: dict[str, Link]) -> Endpoint:
    return Endpoint(aggregator(links, []), max_body_bytes=1 << 16)


async def test_json_list() -> None:
    caller = Caller(json.dumps(req("tools/list")).encode())
    await caller.call(endpoint({"a": Link(tools("x"))}))
    assert caller.status == 200 and caller.content_type == b"application/json"
    assert json.loads(caller.body_bytes)["result"]["tools"] == [{"name": "a__x"}]


async def test_streamed_answer_is_sse() -> None:
    def script(message: dict[str, Any]) -> Any:
        return Answers(
            [
                {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}},
                {"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}},
            ]
        )

    caller = Caller(json.dumps(req("tools/call", {"name": "a__slow"})).encode())
    await caller.call(endpoint({"a": Link(script)}))
    assert caller.content_type == b"text/event-stream"
    events = [
        json.loads(line[5:]) for line in caller.body_bytes.split(b"\n") if line.startswith(b"data:")
    ]
    assert [e.get("method", "result") for e in events] == ["notifications/progress", "result"]
    assert caller.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_disconnect_cancels_the_call_and_closes_the_members_stream() -> None:
    hung = Answers(
        [{"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}], hang=True
    )
    caller = Caller(json.dumps(req("tools/call", {"name": "a__slow"})).encode())
    task = asyncio.create_task(caller.call(endpoint({"a": Link(lambda m: hung)})))
    await asyncio.sleep(0.05)
    assert not task.done()
    caller.gone.set()
    await asyncio.wait_for(task, 2)
    assert hung.closed


async def test_refusals() -> None:
    bad = Caller(b"{not json")
    await bad.call(endpoint({}))
    assert bad.status == 400 and json.loads(bad.body_bytes)["error"]["code"] == -32700
    batch = Caller(b"[]")
    await batch.call(endpoint({}))
    assert batch.status == 400 and json.loads(batch.body_bytes)["error"]["code"] == -32600
    get = Caller(b"", method="GET")
    await get.call(endpoint({}))
    assert get.status == 405
    note = Caller(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled"}).encode())
    await note.call(endpoint({}))
    assert note.status == 202
    big = Caller(b"x" * (1 << 17))
    await big.call(endpoint({}))
    assert big.status == 413
