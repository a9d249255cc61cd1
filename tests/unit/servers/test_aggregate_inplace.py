"""The aggregate's endpoint answering in the caller's task
(app/servers/aggregate/inplace.py): the same status, headers and bytes as
its ASGI app (endpoint.py), the same refusals, the member's stream closed by
`aclose`, the answer's size bounded."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.servers.aggregate.inplace import answer_in_place
from app.upstream.errors import UpstreamAnswerTooLarge, UpstreamUnavailable
from tests.unit.servers.test_aggregate_aggregator import Answers, Link, req, tools
from tests.unit.servers.test_aggregate_endpoint import Caller, endpoint

HEADERS = {"mcp-protocol-version": "2026-07-28"}
LIMIT = 1 << 20


def _progress_then_result(message: dict[str, Any]) -> Answers:
    return Answers(
        [
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}},
            {"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}},
        ]
    )


@pytest.mark.parametrize(
    ("body", "script"),
    [
        (json.dumps(req("tools/list")).encode(), tools("x")),
        (json.dumps(req("tools/call", {"name": "a__slow"})).encode(), _progress_then_result),
        (b"{not json", tools("x")),
        (b"[]", tools("x")),
        (json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled"}).encode(), tools()),
        (b"x" * (1 << 17), tools("x")),
        (json.dumps(req("tools/call", {"name": "zz__x"})).encode(), tools("x")),
    ],
)
async def test_same_answer_as_the_endpoints_app(body: bytes, script: Any) -> None:
    caller = Caller(body)
    await caller.call(endpoint({"a": Link(script)}))
    answer = await answer_in_place(endpoint({"a": Link(script)}), body, HEADERS, LIMIT)
    assert answer is not None
    got = await answer.aread()
    await answer.aclose()
    assert answer.status_code == caller.status and answer.is_closed
    sent = [(k.decode(), v.decode()) for k, v in caller.sent[0]["headers"]]
    assert list(answer.headers.items()) == sent
    assert got == caller.body_bytes


async def test_listen_is_left_to_the_endpoints_app() -> None:
    body = json.dumps(req("subscriptions/listen", {"notifications": {}})).encode()
    assert await answer_in_place(endpoint({"a": Link(tools())}), body, HEADERS, LIMIT) is None


async def test_aclose_closes_the_members_stream() -> None:
    hung = Answers(
        [{"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}], hang=True
    )
    body = json.dumps(req("tools/call", {"name": "a__slow"})).encode()
    answer = await answer_in_place(endpoint({"a": Link(lambda m: hung)}), body, HEADERS, LIMIT)
    assert answer is not None and answer.headers["content-type"] == "text/event-stream"
    chunks = answer.aiter_bytes()
    assert b"notifications/progress" in await anext(chunks)
    await answer.aclose()
    assert hung.closed and answer.is_closed


async def test_answer_over_the_limit() -> None:
    body = json.dumps(req("tools/list")).encode()
    answer = await answer_in_place(endpoint({"a": Link(tools("x"))}), body, HEADERS, 10)
    assert answer is not None
    with pytest.raises(UpstreamAnswerTooLarge):
        await answer.aread()
    await answer.aclose()


async def test_a_failing_route_is_unavailable() -> None:
    def broken(message: dict[str, Any]) -> Answers:
        raise RuntimeError("boom")

    body = json.dumps(req("tools/call", {"name": "a__x"})).encode()
    with pytest.raises(UpstreamUnavailable, match="the route failed: RuntimeError"):
        await answer_in_place(endpoint({"a": Link(broken)}), body, HEADERS, LIMIT)
