"""The top-level `/mcp` graph's client toward its upstream, the aggregate's
endpoint: a POST to the endpoint's URL answered in the graph's own task
(inplace.py: no socket, no HTTP, no ASGI call, no task), a
`subscriptions/listen` stream by the endpoint's app called in process
(inprocess.py `call_app`); anything else (an OAuth metadata GET) on the
client the graph would have had.

The top-level graph is an ordinary gateway graph (app/wiring.py) whose
upstream is the aggregate; it reads this client's answers through the same
`Answer` interface (app/upstream/httpclient/interface.py) as an HTTP
client's. bench/aggregate.py measures the CPU per call through `/mcp`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import httpx

from app.servers.aggregate.endpoint import Endpoint
from app.servers.aggregate.inplace import answer_in_place
from app.servers.aggregate.inprocess import call_app, post_scope
from app.upstream.httpclient.client import UpstreamClient
from app.upstream.httpclient.interface import Answer, Post


class LoopbackClient:
    """An `UpstreamClient` whose POSTs to `url` the aggregate's endpoint answers in place."""

    def __init__(self, url: str, endpoint: Endpoint, inner: UpstreamClient) -> None:
        self._url = httpx.URL(url)
        self._path = self._url.path
        self._endpoint = endpoint
        self._inner = inner
        self.max_answer_bytes = inner.max_answer_bytes

    @property
    def connect_timeout(self) -> float | None:
        return self._inner.connect_timeout

    def as_client(self) -> UpstreamClient:
        """This client where an `UpstreamClient` is asked for: it answers every
        method the modern upstream and the OAuth relay call on one."""
        return cast(UpstreamClient, self)

    def _ours(self, method: str, url: httpx.URL | str) -> bool:
        return method == "POST" and httpx.URL(url) == self._url

    async def _call(self, headers: Mapping[str, str], content: bytes | None) -> Answer:
        body = content or b""
        seen = {k.lower(): v for k, v in headers.items()}
        seen["host"] = self._url.netloc.decode("latin-1")
        # Answered in this task (inplace.py); a listen stream by the endpoint's app.
        answer = await answer_in_place(self._endpoint, body, seen, self.max_answer_bytes)
        if answer is not None:
            return answer
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        raw.append((b"host", self._url.netloc))
        scope = post_scope(self._path, "", raw)
        return await call_app(self._endpoint, scope, body, self.max_answer_bytes)

    async def open_stream(
        self,
        method: str,
        url: httpx.URL | str,
        headers: Mapping[str, str],
        content: bytes | None,
        timeouts: httpx.Timeout,
    ) -> Answer:
        if self._ours(method, url):
            return await self._call(headers, content)
        return await self._inner.open_stream(method, url, headers, content, timeouts)

    async def one_off(
        self,
        method: bytes,
        url: httpx.URL,
        headers: Mapping[str, str],
        content: bytes,
        timeouts: httpx.Timeout,
    ) -> Answer:
        if self._ours(method.decode(), url):
            return await self._call(headers, content)
        return await self._inner.one_off(method, url, headers, content, timeouts)

    async def open_get(
        self, url: httpx.URL, headers: Mapping[str, str], timeouts: httpx.Timeout
    ) -> Answer:
        return await self._inner.open_get(url, headers, timeouts)

    def poster(self, url: httpx.URL, headers: Mapping[str, str], timeout: httpx.Timeout) -> Post:
        return self._inner.poster(url, headers, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()
