"""The aggregator over member doubles: bounds, routing, renaming as answers
stream, pagination and the merged listen (app/servers/aggregate/aggregator.py,
listen.py). Real servers behind real named routes:
tests/integration/test_aggregate.py."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from app.call import Message
from app.cluster.sealing import Sealer
from app.servers.aggregate import sealed
from app.servers.aggregate.aggregator import Aggregator, Streamed, Whole
from app.servers.aggregate.listen import listen
from app.servers.aggregate.members import Member
from app.upstream.errors import UpstreamUnavailable
from tests.waiting import forever

Script = Callable[[Message], Any]


class Answers:
    """An exchange over a list of messages, or one that never answers."""

    last_event_id = None

    def __init__(self, messages: list[Message] | None, hang: bool = False) -> None:
        self.messages = messages or []
        self.hang = hang
        self.closed = False

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[Message]:
        for m in self.messages:
            yield m
        if self.hang:
            await asyncio.Event().wait()

    async def aclose(self, drain: bool = False) -> None:
        self.closed = True


class Link:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.seen: list[tuple[Message, Mapping[str, str]]] = []

    async def request(
        self, message: Message, headers: Mapping[str, str], *, long_lived: bool = False
    ) -> Answers:
        self.seen.append((message, dict(headers)))
        got = self.script(message)
        if isinstance(got, Exception):
            raise got
        if got == "hang":
            await forever()
        if isinstance(got, Answers):
            return got
        return Answers([{"jsonrpc": "2.0", "id": message["id"], "result": got}])


def tools(*names: str) -> Script:
    def script(message: Message) -> Any:
        if message["method"] == "tools/list":
            return {
                "resultType": "complete",
                "tools": [{"name": n} for n in names],
                "ttlMs": 5000,
                "cacheScope": "public",
            }
        if message["method"] == "server/discover":
            return {
                "capabilities": {"tools": {"listChanged": True}},
                "supportedVersions": ["2026-07-28"],
            }
        if message["method"] == "tools/call":
            return {
                "resultType": "complete",
                "content": [{"type": "text", "text": message["params"]["name"]}],
            }
        raise AssertionError(message)

    return script


def aggregator(
    links: dict[str, Link], left: list[tuple[str, str]], bound_s: float = 0.3
) -> Aggregator:
    return Aggregator(
        [Member(n, link) for n, link in links.items()],
        separator="__",
        list_timeout_s=bound_s,
        sealer=Sealer([os.urandom(32)]),
        left_out=lambda m, r: left.append((m, r)),
    )


def req(method: str, params: dict[str, Any] | None = None, rid: Any = 1) -> Message:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": method,
        "params": {"_meta": {}, **(params or {})},
    }


HEADERS = {
    "mcp-protocol-version": "2026-07-28",
    "authorization": "Bearer t",
    "cookie": "no",
    "mcp-param-x": "1",
}


async def test_list_leaves_out_hung_and_down_members_within_the_bound() -> None:
    left: list[tuple[str, str]] = []
    links = {
        "a": Link(tools("echo")),
        "hung": Link(lambda m: "hang"),
        "down": Link(lambda m: UpstreamUnavailable("refused")),
        "b": Link(tools("echo", "add")),
    }
    agg = aggregator(links, left)
    started = time.monotonic()
    answer = await agg.answer(req("tools/list"), HEADERS)
    took = time.monotonic() - started
    assert isinstance(answer, Whole)
    result = answer.message["result"]
    assert [t["name"] for t in result["tools"]] == ["a__echo", "b__echo", "b__add"]
    assert result["ttlMs"] == 0  # partial: nothing may keep it
    assert "nextCursor" not in result
    assert sorted(left) == [("down", "UpstreamUnavailable"), ("hung", "timeout")]
    assert took < 1.0
    # The member's request: its own headers, the caller's credential; no cookie.
    _, sent = links["a"].seen[0]
    assert sent["authorization"] == "Bearer t" and "cookie" not in sent
    assert sent["mcp-method"] == "tools/list"


async def test_whole_list_is_cached_by_the_smallest_ttl_and_discovered_union() -> None:
    left: list[tuple[str, str]] = []
    agg = aggregator({"a": Link(tools("x")), "b": Link(tools("y"))}, left)
    answer = await agg.answer(req("tools/list"), HEADERS)
    assert isinstance(answer, Whole)
    assert answer.message["result"]["ttlMs"] == 5000
    assert answer.message["result"]["cacheScope"] == "public"
    found = await agg.answer(req("server/discover"), HEADERS)
    assert isinstance(found, Whole)
    assert found.message["result"]["capabilities"] == {"tools": {"listChanged": True}}
    assert left == []


async def test_pages_with_the_gateways_cursor() -> None:
    agg = aggregator({"a": Link(tools("1", "2", "3")), "b": Link(tools("4", "5"))}, [])
    agg.page_items = 2
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        answer = await agg.answer(req("tools/list", {"cursor": cursor} if cursor else {}), HEADERS)
        assert isinstance(answer, Whole)
        seen += [t["name"] for t in answer.message["result"]["tools"]]
        cursor = answer.message["result"].get("nextCursor")
        if cursor is None:
            break
    assert seen == ["a__1", "a__2", "a__3", "b__4", "b__5"]
    bad = await agg.answer(
        req("prompts/list", {"cursor": sealed.seal_cursor(agg.sealer, "tools/list", 2)}), HEADERS
    )
    assert isinstance(bad, Whole) and bad.message["error"]["code"] == -32602


async def test_call_routed_by_prefix_with_its_own_mcp_name() -> None:
    links = {"a": Link(tools("echo")), "b": Link(tools("echo"))}
    agg = aggregator(links, [])
    answer = await agg.answer(
        req("tools/call", {"name": "b__echo", "arguments": {}}), {**HEADERS, "mcp-name": "b__echo"}
    )
    assert isinstance(answer, Streamed)
    got = [m async for m in answer.messages]
    assert got[-1]["result"]["content"][0]["text"] == "echo"
    assert links["a"].seen == []
    message, sent = links["b"].seen[0]
    assert message["params"]["name"] == "echo" and sent["mcp-name"] == "echo"
    assert sent["mcp-param-x"] == "1"


async def test_input_required_retry_reaches_the_member_that_asked() -> None:
    def asks(message: Message) -> Any:
        if message["params"].get("requestState") == "inner":
            return {"resultType": "complete", "content": []}
        return Answers(
            [
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": 1, "progress": 1},
                },
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "result": {
                        "resultType": "input_required",
                        "inputRequests": {},
                        "requestState": "inner",
                    },
                },
            ]
        )

    links = {"a": Link(tools()), "b": Link(asks)}
    agg = aggregator(links, [])
    first = await agg.answer(req("tools/call", {"name": "b__ask"}), HEADERS)
    assert isinstance(first, Streamed)
    got = [m async for m in first.messages]
    assert got[0]["method"] == "notifications/progress"
    state = got[1]["result"]["requestState"]
    assert state != "inner"
    retry = await agg.answer(
        req("tools/call", {"name": "b__ask", "requestState": state, "inputResponses": {}}), HEADERS
    )
    assert isinstance(retry, Streamed)
    assert [m async for m in retry.messages][-1]["result"] == {
        "resultType": "complete",
        "content": [],
    }
    assert links["b"].seen[-1][0]["params"]["requestState"] == "inner"


async def test_unreachable_member_answers_502() -> None:
    agg = aggregator({"a": Link(lambda m: UpstreamUnavailable("down"))}, [])
    answer = await agg.answer(req("tools/call", {"name": "a__x"}), HEADERS)
    assert isinstance(answer, Whole) and answer.status == 502
    assert "server 'a' did not answer tools/call" in answer.message["error"]["message"]


async def test_listen_merges_members_and_tells_when_one_goes() -> None:
    def member(name: str, fail: bool) -> Script:
        def script(message: Message) -> Any:
            assert message["method"] == "subscriptions/listen"
            assert message["params"]["notifications"] == {"toolsListChanged": True}
            notes = [
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/subscriptions/acknowledged",
                    "params": {"notifications": {"toolsListChanged": True}},
                },
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": "info", "data": name},
                },
            ]
            return Answers(notes, hang=not fail)

        return script

    agg = aggregator({"a": Link(member("a", False)), "b": Link(member("b", True))}, [])
    stream = listen(
        agg,
        req("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, rid="L1"),
        HEADERS,
    )
    got = []
    async with asyncio.timeout(3):
        async for message in stream:
            got.append(message)
            if len(got) == 4:
                break
    await stream.aclose()  # type: ignore[attr-defined]
    assert got[0]["method"] == "notifications/subscriptions/acknowledged"
    assert got[0]["params"]["notifications"] == {"toolsListChanged": True}
    assert all(m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L1" for m in got)
    rest = {(m["method"], m["params"].get("logger")) for m in got[1:]}
    assert rest == {
        ("notifications/message", "a"),
        ("notifications/message", "b"),
        ("notifications/tools/list_changed", None),
    }


async def test_unknown_uri_refreshes_the_lists_at_most_once_a_second() -> None:
    def resources(message: Message) -> Any:
        if message["method"] == "resources/list":
            return {"resources": [{"uri": "file:///late"}]}
        if message["method"] == "resources/templates/list":
            return {"resourceTemplates": []}
        return {"contents": [{"uri": message["params"]["uri"], "text": "t"}]}

    link = Link(resources)
    agg = aggregator({"a": link}, [])
    read = await agg.answer(req("resources/read", {"uri": "file:///late"}), HEADERS)
    assert isinstance(read, Streamed)
    assert [m async for m in read.messages][-1]["result"]["contents"][0]["uri"] == "file:///late"
    lists_asked = len(link.seen)
    missing = await agg.answer(req("resources/read", {"uri": "file:///none"}), HEADERS)
    assert isinstance(missing, Whole) and missing.message["error"]["code"] == -32602
    assert len(link.seen) == lists_asked  # within the second: not listed again
