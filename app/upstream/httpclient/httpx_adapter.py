"""httpx toward the upstream, as an adapter of the one answer interface
(app/upstream/httpclient/interface.py): the API of the rare paths (the modern
pass-through, long-lived modern requests, an HTTP+SSE upstream's stream, and
without h1 the GET streams, metadata and DELETE), always over aiohttp's
transport (httpx-aiohttp), never httpx's own (it pools connections by origin,
not by credential: app/upstream/httpclient/client.py `build_client`). httpx's
exceptions become the gateway's in `upstream_error`,
and nowhere else."""

from __future__ import annotations

import http.cookiejar
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from multidict import CIMultiDict, CIMultiDictProxy

from app.upstream.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from app.upstream.httpclient.common import BodyTooLarge


class HttpxAnswer:
    """httpx's streamed response as an `Answer`: `headers` a case-insensitive
    multidict (every field of a repeated header, as h1's and aiohttp's),
    `aread` bounded, the chunk iterator closed with the answer."""

    __slots__ = ("__weakref__", "_chunks", "_limit", "_response", "headers", "status_code")

    def __init__(self, response: httpx.Response, limit: int) -> None:
        self._response = response
        self._limit = limit
        self._chunks: Any = None
        self.status_code = response.status_code
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(
            CIMultiDict(response.headers.multi_items())
        )

    @property
    def is_closed(self) -> bool:
        return self._response.is_closed

    async def aread(self) -> bytearray:
        body = bytearray()
        async for chunk in self.aiter_bytes():
            if len(body) + len(chunk) > self._limit:
                # Closing the unread answer closes its connection (aclose).
                raise BodyTooLarge(self._limit)
            body += chunk
        return body

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        # Decoded bytes: the request offered gzip and deflate (httpx's Accept-Encoding).
        if self._chunks is None:
            self._chunks = self._response.aiter_bytes()
        chunks: AsyncIterator[bytes] = self._chunks
        return chunks

    async def aclose(self) -> None:
        chunks = self._chunks
        try:
            if chunks is not None:
                # httpx's generator, closed now, not later by the event loop.
                await chunks.aclose()
            await self._response.aclose()
        finally:
            _unbind(self._response)


_CLOSED = httpx.ByteStream(b"")


def _unbind(response: httpx.Response) -> None:
    """Break the reference cycle httpx makes for every streamed response
    (`response.stream` is a BoundAsyncStream holding the response), once it is
    closed: reference counting then frees the response, its aiohttp response
    and their headers at once. Left to the cyclic garbage collector, those
    objects of every call survived into the older generations and made the
    collections that walk them the gateway's longest pauses (bench/profile.py --gc)."""
    if response.is_closed:
        response.stream = _CLOSED


class NoCookies(http.cookiejar.CookieJar):
    """A cookie jar that keeps nothing. The client is shared by every caller and
    upstream session: a jar would send a `Set-Cookie` meant for one caller's
    session with every other caller's requests. An upstream's cookies are its
    answer to one caller; the gateway holds no credentials of its own."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        return None


class OnFirstRequest(httpx.AsyncBaseTransport):
    """httpx's transport made by the first request that needs it: on h1 that is
    a modern pass-through, a long-lived modern request or an HTTP+SSE stream,
    which a plain gateway in front of a legacy upstream never sends, so it never
    imports aiohttp (about 6 MB of idle RSS, bench/memory.py)."""

    def __init__(self, make: Callable[[], httpx.AsyncBaseTransport]) -> None:
        self._make: Callable[[], httpx.AsyncBaseTransport] | None = make
        self._made: httpx.AsyncBaseTransport | None = None
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        made = self._made
        if made is None:
            if self._closed or self._make is None:
                raise httpx.ConnectError("the client is closed", request=request)
            made = self._made = self._make()
            self._make = None
        return await made.handle_async_request(request)

    async def aclose(self) -> None:
        self._closed = True
        if self._made is not None:
            await self._made.aclose()


def _really_timed_out(exc: httpx.TimeoutException) -> bool:
    """httpx-aiohttp 0.2.0 maps every aiohttp.ClientConnectionError (a refused
    connection, a server that hung up) to httpx.ConnectTimeout; only its cause
    tells a timeout from an upstream that is gone."""
    if "aiohttp" not in sys.modules:  # imported by the first request that needs it
        return True
    import aiohttp

    cause = exc.__cause__
    return not isinstance(cause, aiohttp.ClientConnectionError) or isinstance(
        cause, aiohttp.ServerTimeoutError
    )


def upstream_error(exc: Exception, what: str) -> UpstreamError | None:
    """The gateway's error for one of httpx's exceptions, None for another's."""
    if isinstance(exc, httpx.TimeoutException):
        if not _really_timed_out(exc):
            return UpstreamUnavailable(
                f"upstream unreachable during {what}: {type(exc.__cause__).__name__}"
            )
        return UpstreamTimeout(f"upstream timed out during {what}")
    if isinstance(exc, httpx.TransportError):
        return UpstreamUnavailable(f"upstream unreachable during {what}: {type(exc).__name__}")
    return None
