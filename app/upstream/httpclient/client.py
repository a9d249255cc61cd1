"""The HTTP client toward the upstream, the one every HTTP upstream kind uses
(`UpstreamClient`, made by `build_client`), and `library_errors`, where each
adapter's `upstream_error` turns its library's exceptions into the gateway's.

The client puts its requests on two stacks (bench/upstream_post.py measures
each): a session's POSTs (the hot path) on the project's own HTTP/1.1 client
of app/upstream/httpclient/h1.py, or with MCP_SHIM_UPSTREAM_HTTP_TRANSPORT=aiohttp on
the aiohttp session itself (app/upstream/httpclient/aiohttp_client.py); the rare
paths on httpx over aiohttp (app/upstream/httpclient/httpx_adapter.py). On h1 the
one-off requests of a plain gateway (the era probe, a session's DELETE) and its
GETs go through h1 too, and aiohttp is imported by the first request that needs
it (bench/memory.py: aiohttp is about 6 MB of idle RSS). Every answer is an
`app.upstream.httpclient.interface.Answer`, read the same way whichever library read it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from app import jsonio
from app.upstream.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamUnavailable,
    too_large,
)
from app.upstream.httpclient import h1, h1_adapter, httpx_adapter
from app.upstream.httpclient.common import KEEPALIVE_S, BodyTooLarge
from app.upstream.httpclient.interface import Answer, Post
from app.upstream.httpclient.sse_decoder import EventTooLarge
from app.upstream.httpclient.tls import upstream_context

if TYPE_CHECKING:
    import aiohttp

    from app.upstream.httpclient.aiohttp_client import FreshSession


def _upstream_error(exc: Exception, what: str) -> UpstreamError | None:
    """The gateway's error for a library's exception, None for one left as it is:
    each adapter's own mapping, then what is no library's (a socket's error, an
    answer too large or not JSON, a header value that cannot be sent)."""
    mapped = h1_adapter.upstream_error(exc, what)
    if mapped is None and "aiohttp" in sys.modules:
        # aiohttp is imported by the first request that needs it
        # (app/upstream/httpclient/aiohttp_client.py): before that, no exception is aiohttp's.
        from app.upstream.httpclient.aiohttp_client import upstream_error as aiohttp_error

        mapped = aiohttp_error(exc, what)
    if mapped is None:
        mapped = httpx_adapter.upstream_error(exc, what)
    if mapped is not None:
        return mapped
    if isinstance(exc, OSError):
        return UpstreamUnavailable(f"upstream unreachable during {what}: {type(exc).__name__}")
    if isinstance(exc, EventTooLarge | BodyTooLarge):
        return too_large(exc.limit, what)
    if isinstance(exc, jsonio.JSONDecodeError | UnicodeDecodeError):
        return UpstreamProtocolError(f"upstream sent malformed data during {what}")
    if isinstance(exc, UnicodeEncodeError):
        return UpstreamError(f"a header value for {what} is not printable ASCII")
    return None


class library_errors:
    """Where library exceptions become the gateway's own (`_upstream_error`). A
    class rather than a generator's context manager: entered on every call, twice."""

    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not isinstance(exc, Exception) or isinstance(exc, UpstreamError):
            return
        mapped = _upstream_error(exc, self._what)
        if mapped is None:
            return
        if isinstance(exc, UnicodeEncodeError):
            # httpx encodes header values as ASCII, and its exception holds the
            # whole value (a credential, possibly): dropped, never chained into a log.
            raise mapped from None
        raise mapped from exc


class UpstreamClient(httpx.AsyncClient):
    """The HTTP client toward the upstream, the one every HTTP upstream kind
    uses: a session's POSTs (`poster`, the hot path), one-off requests
    (`one_off`), GETs (`open_get`) and long-lived or passed-through requests
    (`open_stream`), each answer an `Answer` whichever stack carried it. Its users
    never ask which: h1 or aiohttp for the POSTs (MCP_SHIM_UPSTREAM_HTTP_TRANSPORT),
    h1 for the one-off requests and GETs when it is the POSTs' stack, httpx
    over aiohttp for the rest (bench/upstream_post.py; docs/architecture.md).

    On the aiohttp transport a POST goes to the aiohttp session itself, with
    the session's headers merged and its timeouts built once; httpx's per-call
    layers (`build_request`'s URL and header merging, the `httpx.Request`,
    auth, redirects, cookies, the response's stream binding, the header
    conversion back to aiohttp's, then its body's chain of generators) cost
    most of the CPU a POST cost the gateway's process (bench/upstream_post.py)."""

    def __init__(
        self,
        *,
        transport: httpx.AsyncBaseTransport,
        connect_timeout_s: float,
        aiohttp_session: Callable[[], aiohttp.ClientSession] | None = None,
        fresh_session: FreshSession | None = None,
        h1_client: h1.H1Client | None = None,
        streams: h1.H1Client | None = None,
        max_answer_bytes: int = h1.DEFAULT_MAX_ANSWER_BYTES,
        fixed_headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            transport=transport,
            timeout=httpx.Timeout(connect_timeout_s, read=None),
            trust_env=False,
            cookies=httpx_adapter.NoCookies(),
        )
        self._aiohttp_session = aiohttp_session
        self._fresh_session = fresh_session
        self._h1 = h1_client
        self._streams = streams
        # MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES: h1 bounds its answers itself,
        # the other adapters theirs as they read, `HttpExchange` every SSE event.
        self.max_answer_bytes = max_answer_bytes
        # MCP_SHIM_UPSTREAM_HEADERS, on every request whichever method sends it.
        self._fixed = dict(fixed_headers or {})
        self._fixed_names = {name.lower() for name in self._fixed}

    def _with_fixed(self, headers: dict[str, str]) -> dict[str, str]:
        """`headers` with the fixed ones over them: a request's header of the
        same name (the client's Authorization, when a fixed one is set) is
        dropped, whatever its case, never sent beside the fixed one."""
        if not self._fixed:
            return headers
        kept = {k: v for k, v in headers.items() if k.lower() not in self._fixed_names}
        return {**kept, **self._fixed}

    @property
    def connect_timeout(self) -> float | None:
        return self.timeout.connect

    def poster(self, url: httpx.URL, headers: Mapping[str, str], timeout: httpx.Timeout) -> Post:
        """POSTs to `url` with `headers` (and a call's own extra ones), answers streamed."""
        merged = self._with_fixed({**self.headers, **headers})  # as build_request would, once
        if self._h1 is not None:
            return h1_adapter.poster(self._h1, url, merged, timeout)
        from app.upstream.httpclient.aiohttp_client import aiohttp_poster

        session, fresh = self._aiohttp_session, self._fresh_session
        assert session is not None and fresh is not None  # build_client makes both
        return aiohttp_poster(session, fresh, url, merged, timeout, self.max_answer_bytes)

    async def one_off(
        self,
        method: bytes,
        url: httpx.URL,
        headers: Mapping[str, str],
        content: bytes,
        timeouts: httpx.Timeout,
    ) -> Answer:
        """A one-off request of a plain gateway (the era probe, a session's
        DELETE, a modern upstream's short request): on h1, the session POSTs'
        client, headers merged as httpx merges them, when h1 is the POSTs'
        stack (a gateway in front of a legacy upstream then never uses httpx's
        transport, whose aiohttp is imported by its first request); else on httpx."""
        if self._h1 is None:
            return await self.open_stream(method.decode(), url, headers, content, timeouts)
        merged = self._with_fixed({**self.headers, **headers})
        return await h1_adapter.poster(self._h1, url, merged, timeouts, method)(content, {})

    async def open_get(
        self, url: httpx.URL, headers: Mapping[str, str], timeouts: httpx.Timeout
    ) -> Answer:
        """A GET (a session's stream, the OAuth metadata), on h1 in a pool of its
        own when h1 is the POSTs' stack (a stream holds its connection as long as
        anyone listens, and must never take a slot of the POSTs' pool), else on
        httpx. With h1 a gateway in front of a legacy upstream never imports
        aiohttp, whatever its clients do (bench/memory.py; docs/performance.md)."""
        if self._streams is None:
            return await self.open_stream("GET", url, headers, None, timeouts)
        merged = self._with_fixed({**self.headers, **headers})
        return await h1_adapter.get(self._streams, url, merged, timeouts)

    async def open_stream(
        self,
        method: str,
        url: httpx.URL | str,
        headers: Mapping[str, str],
        content: bytes | None,
        timeouts: httpx.Timeout,
    ) -> Answer:
        """A request on httpx over aiohttp, its answer streamed: the modern
        pass-through, a long-lived modern request, an HTTP+SSE upstream's stream."""
        request = self.build_request(
            method, url, content=content, headers=self._with_fixed(dict(headers)), timeout=timeouts
        )
        response = await self.send(request, stream=True)
        return httpx_adapter.HttpxAnswer(response, self.max_answer_bytes)

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            if self._fresh_session is not None:
                await self._fresh_session.close()
            if self._h1 is not None:
                await self._h1.aclose()
            if self._streams is not None:
                await self._streams.aclose()


def build_client(
    *,
    connect_timeout_s: float,
    max_connections: int,
    transport: str = "h1",
    keepalive_s: float = KEEPALIVE_S,
    max_answer_bytes: int = h1.DEFAULT_MAX_ANSWER_BYTES,
    fixed_headers: Mapping[str, str] | None = None,
) -> UpstreamClient:
    """`transport`: h1 (the session POSTs on app/upstream/httpclient/h1.py, the rest on httpx
    over aiohttp) or aiohttp (the session POSTs on aiohttp too). `fixed_headers`
    (MCP_SHIM_UPSTREAM_HEADERS) go on every request, over a request's own. Never httpx's
    own transport (httpcore): it pools connections by origin, so one
    credential's request could ride on another's connection and read a stray
    byte left after its answer as its own (tests/unit/test_upstream_answer_bounds.py)."""
    if transport not in ("aiohttp", "h1"):
        raise ValueError(f"unknown upstream HTTP transport {transport!r}: h1 or aiohttp")
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=keepalive_s,
    )
    # CA certificates read on the first TLS handshake (app/upstream/httpclient/tls.py);
    # one context for h1 and aiohttp.
    verify = upstream_context()
    if transport == "h1":
        return UpstreamClient(
            transport=httpx_adapter.OnFirstRequest(
                lambda: _aiohttp_transport(limits, max_connections, keepalive_s, verify)
            ),
            connect_timeout_s=connect_timeout_s,
            max_answer_bytes=max_answer_bytes,
            fixed_headers=fixed_headers,
            h1_client=h1.H1Client(
                max_connections=max_connections,
                keepalive_s=keepalive_s,
                ssl_context=verify,
                max_answer_bytes=max_answer_bytes,
            ),
            # GETs (streams, metadata): the bound the aiohttp pool gave them
            # (app/serving/cli.py counts two pools).
            streams=h1.H1Client(
                max_connections=max_connections,
                keepalive_s=keepalive_s,
                ssl_context=verify,
                max_answer_bytes=max_answer_bytes,
            ),
        )
    from app.upstream.httpclient import aiohttp_client

    aiohttp_transport, session = aiohttp_client.transport(
        limits, max_connections, keepalive_s, verify
    )
    return UpstreamClient(
        transport=aiohttp_transport,
        connect_timeout_s=connect_timeout_s,
        aiohttp_session=session,
        max_answer_bytes=max_answer_bytes,
        fixed_headers=fixed_headers,
        fresh_session=aiohttp_client.FreshSession(max_connections, verify),
    )


def _aiohttp_transport(
    limits: httpx.Limits, max_connections: int, keepalive_s: float, verify: Any
) -> httpx.AsyncBaseTransport:
    from app.upstream.httpclient import aiohttp_client

    made, _ = aiohttp_client.transport(limits, max_connections, keepalive_s, verify)
    return made
