"""The top-level `/mcp` graph's client toward its upstream, the aggregate's
endpoint: a POST to the endpoint's URL handed to the endpoint's app in the
process (inprocess.py `call_app`), no socket and no HTTP either way; anything
else (an OAuth metadata GET) on the client the graph would have had.

The top-level graph is an ordinary gateway graph (app/wiring.py) whose
upstream is the aggregate; its pass-through POST on loopback was about a
quarter of the process's CPU per call through `/mcp` (bench/aggregate.py,
py-spy). The graph reads this client's answers through the same `Answer`
interface (app/upstream/httpclient/interface.py) as an HTTP client's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import httpx
from starlette.types import ASGIApp

from app.servers.aggregate.inprocess import call_app, post_scope
from app.upstream.httpclient.client import UpstreamClient
from app.upstream.httpclient.interface import Answer, Post


class LoopbackClient:
    """An `UpstreamClient` whose requests to `url` go to `app` in place."""

    def __init__(self, url: str, app: ASGIApp, inner: UpstreamClient) -> None:
        self._url = httpx.URL(url)
        self._path = self._url.path
        self._app = app
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
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        raw.append((b"host", self._url.netloc))
        scope = post_scope(self._path, "", raw)
        return await call_app(self._app, scope, content or b"", self.max_answer_bytes)

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
