"""The top-level graph's client (app/servers/aggregate/loopback.py): a POST to
the aggregate's endpoint goes to its app in process; anything else to the
client the graph would have had."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, cast

import httpx

from app.servers.aggregate.loopback import LoopbackClient
from app.upstream.httpclient.client import UpstreamClient

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


async def test_posts_to_the_endpoint_stay_in_process() -> None:
    seen: list[MutableMapping[str, Any]] = []

    async def app(
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        seen.append(scope)
        body = (await receive())["body"]
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    inner = Inner()
    client = LoopbackClient(URL, app, cast(UpstreamClient, inner))
    assert client.as_client().connect_timeout == 3.0
    answer = await client.open_stream(
        "POST", httpx.URL(URL), {"mcp-method": "ping"}, b'{"x":1}', TIMEOUTS
    )
    assert answer.status_code == 200 and await answer.aread() == b'{"x":1}'
    await answer.aclose()
    scope = seen[0]
    assert scope["path"] == "/aggregate/mcp" and (b"mcp-method", b"ping") in scope["headers"]
    assert (b"host", b"127.0.0.1:8080") in scope["headers"]
    one = await client.one_off(b"POST", httpx.URL(URL), {}, b"{}", TIMEOUTS)
    assert one.status_code == 200
    await one.aclose()
    assert inner.asked == []
    elsewhere = "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
    assert await client.open_stream("POST", elsewhere, {}, b"", TIMEOUTS) == "inner"
    assert await client.open_get(httpx.URL(elsewhere), {}, TIMEOUTS) == "inner"
    assert inner.asked == [("POST", elsewhere), ("GET", elsewhere)]
