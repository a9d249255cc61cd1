"""The top-level graph's client (app/servers/aggregate/loopback.py): a POST to
the aggregate's endpoint answered in place (a listen stream by its app, in
process); anything else to the client the graph would have had."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, cast

import httpx

from app.servers.aggregate.endpoint import Endpoint
from app.servers.aggregate.loopback import LoopbackClient
from app.upstream.httpclient.client import UpstreamClient
from tests.unit.servers.test_aggregate_aggregator import Link, aggregator, req, tools

URL = "http://127.0.0.1:8080/aggregate/mcp"
TIMEOUTS = httpx.Timeout(5)


class Inner:
    max_answer_bytes = 1 << 20
    connect_timeout = 3.0

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    async def open_stream(self, method: str, url: Any, *rest: Any) -> str:
        self.asked.append((method, str(url)))
        return "inner"

    async def open_get(self, url: Any, *rest: Any) -> str:
        self.asked.append(("GET", str(url)))
        return "inner"


class Listening(Endpoint):
    """The endpoint's app, its ASGI calls seen."""

    def __init__(self) -> None:
        super().__init__(aggregator({"a": Link(tools("x"))}, []), max_body_bytes=1 << 16)
        self.seen: list[MutableMapping[str, Any]] = []

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        self.seen.append(scope)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b"event: message\n\n"})


async def test_posts_to_the_endpoint_stay_in_process() -> None:
    inner = Inner()
    endpoint = Listening()
    client = LoopbackClient(URL, endpoint, cast(UpstreamClient, inner))
    assert client.as_client().connect_timeout == 3.0
    body = json.dumps(req("tools/list")).encode()
    answer = await client.open_stream("POST", httpx.URL(URL), {"MCP-Method": "x"}, body, TIMEOUTS)
    assert answer.status_code == 200
    assert json.loads(await answer.aread())["result"]["tools"] == [{"name": "a__x"}]
    await answer.aclose()
    ping = json.dumps(req("ping")).encode()
    one = await client.one_off(b"POST", httpx.URL(URL), {}, ping, TIMEOUTS)
    assert one.status_code == 200 and json.loads(await one.aread())["result"]
    await one.aclose()
    assert endpoint.seen == [] and inner.asked == []
    listen = json.dumps(req("subscriptions/listen", {"notifications": {}})).encode()
    stream = await client.open_stream("POST", httpx.URL(URL), {"MCP-Method": "x"}, listen, TIMEOUTS)
    assert await stream.aread() == b"event: message\n\n"
    await stream.aclose()
    scope = endpoint.seen[0]
    assert scope["path"] == "/aggregate/mcp" and (b"mcp-method", b"x") in scope["headers"]
    assert (b"host", b"127.0.0.1:8080") in scope["headers"]
    assert inner.asked == []
    elsewhere = "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
    assert await client.open_stream("POST", elsewhere, {}, b"", TIMEOUTS) == "inner"
    assert await client.open_get(httpx.URL(elsewhere), {}, TIMEOUTS) == "inner"
    assert inner.asked == [("POST", elsewhere), ("GET", elsewhere)]
