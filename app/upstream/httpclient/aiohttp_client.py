"""aiohttp toward the upstream: httpx's transport for the rare paths (GET streams,
metadata, the modern pass-through, over httpx-aiohttp), and the session POSTs
with MCP_SHIM_UPSTREAM_HTTP_TRANSPORT=aiohttp (`aiohttp_poster`).

Imported by the first request that needs it, not at start-up: with the
default h1 transport a plain gateway's start-up, its calls and its sessions'
ends (the era probe, the session POSTs, DELETE) all go through
app/upstream/httpclient/h1.py, and aiohttp with its dependencies (yarl, attrs,
aiohappyeyeballs, aiosignal, propcache, httpx-aiohttp) is about 6 MB of
idle RSS (bench/memory.py; docs/performance.md). Importing this module imports
aiohttp the gateway's way: its import-time CA contexts deferred
(app/upstream/httpclient/tls.py; frozenlist pure, app/upstream/__init__.py). An adapter
of the answer interface (app/upstream/httpclient/interface.py): `AiohttpAnswer`; its
exceptions become the gateway's in `upstream_error`, and nowhere else.
"""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import httpx
import structlog
from aiohttp.tracing import Trace
from httpx_aiohttp import AiohttpTransport
from multidict import CIMultiDictProxy

from app.upstream.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.httpclient import tls
from app.upstream.httpclient.common import BodyTooLarge, printable_ascii
from app.upstream.httpclient.interface import Post
from app.upstream.sessions.pool import credential_hash

tls.defer_aiohttp_defaults()

log = structlog.get_logger("mcp_shim.upstream")


class _Attempt:
    """One resendable POST's first attempt: whether it rode on a pooled connection."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


_ATTEMPT: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar(
    "mcp_shim_upstream_attempt", default=None
)


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, telling a resendable POST whether the connection it
    got had served a request before (a pooled keep-alive connection): only such
    a connection can have been closed by the server just as it was reused."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._served: weakref.WeakSet[Any] = weakref.WeakSet()

    async def connect(
        self,
        req: aiohttp.ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 - aiohttp's signature
    ) -> aiohttp.connector.Connection:
        connection = await super().connect(req, traces, timeout)
        protocol = connection.protocol
        attempt = _ATTEMPT.get()
        if attempt is not None:
            attempt.reused = protocol in self._served
        self._served.add(protocol)
        return connection


class _PerCredential(aiohttp.ClientRequest):
    """A request whose pooled connection is its credential's own, as on h1
    (app/upstream/httpclient/h1.py says why): the connector pools by `connection_key`,
    here with the credential in `proxy_headers_hash`, a field aiohttp uses
    only as part of that key (None without a proxy, which the gateway never
    uses: trust_env is off). `limit_per_host` then bounds one credential."""

    @property
    def connection_key(self) -> aiohttp.client_reqrep.ConnectionKey:
        key = super().connection_key
        credential = credential_hash(self.headers.get("Authorization"))
        digest = 0 if credential == "-" else int(credential[:16], 16)
        return key._replace(proxy_headers_hash=hash((key.proxy_headers_hash, digest)))


def _stale(exc: BaseException, attempt: _Attempt) -> bool:
    """The connection failed before any answer, and it was a reused one (RFC 9112
    section 9.3.1, "Retrying Requests": a client MAY retry then, on a new
    connection, a request it knows to be idempotent). A refused or timed-out
    connection, or a fresh one that failed, is the upstream's real state."""
    return (
        attempt.reused
        and isinstance(exc, aiohttp.ClientOSError | aiohttp.ServerDisconnectedError)
        and not isinstance(exc, aiohttp.ClientConnectorError)
    )


def upstream_error(exc: Exception, what: str) -> UpstreamError | None:
    """The gateway's error for one of aiohttp's exceptions, None for another's."""
    if not isinstance(exc, aiohttp.ClientError):
        return None
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return UpstreamTimeout(f"upstream timed out during {what}")
    if isinstance(exc, aiohttp.ClientConnectionError):
        return UpstreamUnavailable(f"upstream unreachable during {what}: {type(exc).__name__}")
    # Errors that are not a broken connection (aiohttp.ClientConnectionError,
    # named by its own class) get the name httpx-aiohttp gave them, the name the
    # messages carried when the hot path's answers came through httpx.
    names: tuple[tuple[type[BaseException], str], ...] = (
        (aiohttp.ClientPayloadError, "ReadError"),
        (aiohttp.ClientHttpProxyError, "ProxyError"),
        (aiohttp.InvalidUrlClientError, "UnsupportedProtocol"),
        (aiohttp.NonHttpUrlClientError, "UnsupportedProtocol"),
    )
    for kind, name in names:
        if isinstance(exc, kind):
            return UpstreamUnavailable(f"upstream unreachable during {what}: {name}")
    # What is left is aiohttp's parser refusing the answer (ClientResponseError:
    # a bad status line, a bad chunk size, headers over 8 KiB).
    return UpstreamProtocolError(f"upstream sent a malformed HTTP answer during {what}")


class AiohttpAnswer:
    """aiohttp's response to a POST of the hot path as an `Answer`
    (app/upstream/httpclient/interface.py). Its exceptions are aiohttp's, mapped by
    `upstream_error` (through `library_errors` around the reads)."""

    __slots__ = ("__weakref__", "_limit", "_response", "headers", "status_code")

    def __init__(self, response: aiohttp.ClientResponse, limit: int) -> None:
        self._response = response
        # MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES, of the decoded body.
        self._limit = limit
        self.status_code = response.status
        self.headers: CIMultiDictProxy[str] = response.headers

    @property
    def is_closed(self) -> bool:
        # Set once the body was read to its end (the connection went back to
        # the pool then) or the response was released.
        return self._response.closed

    async def aread(self) -> bytearray:
        body = bytearray()
        async for chunk in self._response.content.iter_any():
            if len(body) + len(chunk) > self._limit:
                # Closing the unread answer closes its connection (aclose).
                raise BodyTooLarge(self._limit)
            body += chunk
        return body

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive. aiohttp's iterator, not a generator:
        an exchange closed mid-stream leaves no generator for the event loop to
        finalize later (which would keep the response alive until then)."""
        return self._response.content.iter_any()

    async def aclose(self) -> None:
        # What `async with` on the response does: the connection goes back to
        # the pool if the body was read to its end, else it is closed.
        response = self._response
        response.release()
        await response.wait_for_close()


# Connections of resends at once: out of the room of file descriptors the
# connection bounds leave (app/serving/cli.py); a resend waits for one beyond that.
_FRESH_LIMIT = 16


class FreshSession:
    """Where the second attempt of a resendable POST (`resendable`) goes: a new
    connection, closed after its one exchange, never one from the pool (which
    may hold more connections the server is closing). Rare: the aiohttp session
    is made on first use, closed with the client."""

    def __init__(self, limit: int, ssl: Any) -> None:
        self._limit = min(limit, _FRESH_LIMIT)
        self._ssl = ssl
        self._session: aiohttp.ClientSession | None = None

    def __call__(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit, force_close=True, ssl=self._ssl),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def transport(
    limits: httpx.Limits, max_connections: int, keepalive_s: float, verify: Any
) -> tuple[AiohttpTransport, Callable[[], aiohttp.ClientSession]]:
    """httpx's transport over aiohttp, and its aiohttp session (made on first
    use: aiohttp wants a running loop), shared by the transport (which closes
    it) and `aiohttp_poster`."""
    aiohttp_transport = AiohttpTransport(limits=limits, trust_env=False, verify=verify)

    def session() -> aiohttp.ClientSession:
        # As httpx-aiohttp builds it, but with no cookie jar
        # (httpx_adapter.NoCookies says why).
        if not isinstance(aiohttp_transport.client, aiohttp.ClientSession):
            aiohttp_transport.client = aiohttp.ClientSession(
                connector=_Connector(
                    limit=max_connections,
                    # One credential at most half of the pool, as on h1.
                    limit_per_host=max(1, max_connections // 2),
                    keepalive_timeout=keepalive_s,
                    ssl=aiohttp_transport.ssl_context,
                ),
                cookie_jar=aiohttp.DummyCookieJar(),
                request_class=_PerCredential,
            )
        return aiohttp_transport.client

    aiohttp_transport.client = session
    return aiohttp_transport, session


def aiohttp_poster(
    session: Callable[[], aiohttp.ClientSession],
    fresh: FreshSession,
    url: httpx.URL,
    merged: dict[str, str],
    timeout: httpx.Timeout,
    limit: int,
) -> Post:
    """The session POSTs on the aiohttp session itself, with the session's
    headers merged and its timeouts built once (`UpstreamClient.poster`)."""
    target = str(url)
    client_timeout = aiohttp.ClientTimeout(
        sock_connect=timeout.connect, sock_read=timeout.read, connect=timeout.pool
    )
    # httpx refuses what is not ASCII (UnicodeEncodeError, turned into our
    # error in `library_errors`); aiohttp would send it as UTF-8. The
    # session's headers are checked once, the same way for both.
    unsendable = not all(printable_ascii(v) for v in merged.values())

    async def send(
        via: aiohttp.ClientSession, content: bytes, headers: Any
    ) -> aiohttp.ClientResponse:
        return await via.request(
            "POST",
            target,
            data=content,
            headers=headers,
            timeout=client_timeout,
            allow_redirects=False,
            # The headers offer httpx's Accept-Encoding (gzip, deflate), and
            # httpx.Response decoded what came so: aiohttp decodes it now.
            auto_decompress=True,
        )

    async def post(content: bytes, extra: Mapping[str, str], resend: bool = False) -> AiohttpAnswer:
        # aiohttp's exceptions go up as they are: `library_errors` around
        # the call (StreamableHttpSession._post, SseSession._post) maps them.
        if unsendable:
            raise UnicodeEncodeError("ascii", "", 0, 0, "header value")
        headers = {**merged, **extra} if extra else merged
        if not resend:
            return AiohttpAnswer(await send(session(), content, headers), limit)
        attempt = _Attempt()
        token = _ATTEMPT.set(attempt)
        try:
            answer = await send(session(), content, headers)
        except aiohttp.ClientError as exc:
            if not _stale(exc, attempt):
                raise
            log.info("upstream_post_resent", error=type(exc).__name__)
        else:
            return AiohttpAnswer(answer, limit)
        finally:
            _ATTEMPT.reset(token)
        return AiohttpAnswer(await send(fresh(), content, headers), limit)

    return post
