"""Legacy Streamable HTTP (2025-03-26 .. 2025-11-25) toward the upstream server.

httpx is the API of the rare paths; its transport is aiohttp's (httpx-aiohttp),
chosen by measurement: bench/README.md. A session's POSTs (the hot path) go to
the lean HTTP/1.1 client of app/upstream/h1.py (`H1Answer`), or with
MCP_SHIM_UPSTREAM_HTTP_TRANSPORT=aiohttp to the aiohttp session itself
(`AiohttpAnswer`, app/upstream/aiohttp_client.py). On h1 the one-off requests
of a plain gateway (the era probe, a session's DELETE: `UpstreamClient.lean`)
go through h1 too, and aiohttp is imported by the first request that needs
it (bench/README.md, "Third round"). Every httpx/aiohttp/h1 exception is
turned into an `app.upstream.errors` error in `_library_errors`, and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import httpx
import structlog

from app import jsonio, tracing
from app.call import mark
from app.deadline import StepDeadline
from app.upstream import h1
from app.upstream.base import Message
from app.upstream.errors import (
    SessionExpired,
    UpstreamAnswerTooLarge,
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamHttpError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.http_common import KEEPALIVE_S, printable_ascii
from app.upstream.pool import credential_hash
from app.upstream.sse_decoder import EventTooLarge, SSEDecoder
from app.upstream.tls import upstream_context
from translators.registry import Version, get_version

if TYPE_CHECKING:
    import aiohttp

    from app.upstream.aiohttp_client import AiohttpAnswer, FreshSession

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
_ACCEPT = "application/json, text/event-stream"

log = structlog.get_logger("mcp_shim.upstream")


def _aiohttp_loaded() -> bool:
    # aiohttp is imported by the first request that needs it
    # (app/upstream/aiohttp_client.py): before that, no exception is aiohttp's.
    return "aiohttp" in sys.modules


def _really_timed_out(exc: httpx.TimeoutException) -> bool:
    """httpx-aiohttp 0.2.0 maps every aiohttp.ClientConnectionError (a refused
    connection, a server that hung up) to httpx.ConnectTimeout; only its cause
    tells a timeout from an upstream that is gone."""
    if not _aiohttp_loaded():
        return True
    import aiohttp

    cause = exc.__cause__
    return not isinstance(cause, aiohttp.ClientConnectionError) or isinstance(
        cause, aiohttp.ServerTimeoutError
    )


def _aiohttp_error(exc: Exception, what: str) -> UpstreamError | None:
    """`_upstream_error` for aiohttp's exceptions (the hot path on the aiohttp
    transport: UpstreamClient.poster, AiohttpAnswer), None for another's."""
    if not _aiohttp_loaded():
        return None
    import aiohttp

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


def too_large(limit: int, what: str) -> UpstreamAnswerTooLarge:
    """An answer over MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES (every transport's), logged."""
    log.warning(
        "upstream_answer_too_large", limit=limit, setting="MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES"
    )
    return UpstreamAnswerTooLarge(
        f"the upstream answer to {what} exceeded {limit} bytes (MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES)"
    )


def _upstream_error(exc: Exception, what: str) -> UpstreamError | None:
    """The gateway's error for a library's exception, None for one left as it is."""
    if isinstance(exc, h1.H1Error):
        # The hot path (UpstreamClient.poster on app/upstream/h1.py): the same
        # errors and messages as aiohttp's below.
        if isinstance(exc, h1.H1Timeout):
            return UpstreamTimeout(f"upstream timed out during {what}")
        if isinstance(exc, h1.AnswerTooLarge):
            return too_large(exc.limit, what)
        if isinstance(exc, h1.MalformedAnswer):
            return UpstreamProtocolError(f"upstream sent a malformed HTTP answer during {what}")
        return UpstreamUnavailable(f"upstream unreachable during {what}: {type(exc).__name__}")
    aiohttp_error = _aiohttp_error(exc, what)
    if aiohttp_error is not None:
        return aiohttp_error
    if isinstance(exc, httpx.TimeoutException):
        if not _really_timed_out(exc):
            return UpstreamUnavailable(
                f"upstream unreachable during {what}: {type(exc.__cause__).__name__}"
            )
        return UpstreamTimeout(f"upstream timed out during {what}")
    if isinstance(exc, httpx.TransportError | OSError):
        return UpstreamUnavailable(f"upstream unreachable during {what}: {type(exc).__name__}")
    if isinstance(exc, EventTooLarge):
        return too_large(exc.limit, what)
    if isinstance(exc, jsonio.JSONDecodeError | UnicodeDecodeError):
        return UpstreamProtocolError(f"upstream sent malformed data during {what}")
    if isinstance(exc, UnicodeEncodeError):
        return UpstreamError(f"a header value for {what} is not printable ASCII")
    return None


class _library_errors:  # named as the function it was: its callers are unchanged
    """The one place where library exceptions become the gateway's own. A class
    rather than a generator's context manager: entered on every call, twice."""

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


class _NoCookies(http.cookiejar.CookieJar):
    """A cookie jar that keeps nothing. The client is shared by every caller and
    upstream session: a jar would send a `Set-Cookie` meant for one caller's
    session with every other caller's requests. An upstream's cookies are its
    answer to one caller; the gateway holds no credentials of its own."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        return None


class Post(Protocol):
    """POSTs one message's bytes, with a call's own extra headers. `resend`: the
    message may be sent a second time (`resendable`) if a reused connection
    fails before any answer."""

    def __call__(
        self, content: bytes, extra: Mapping[str, str], resend: bool = False
    ) -> Awaitable[Answer]: ...


def resendable(message: Message) -> bool:
    """A message that is not a request: a response to a server request, or a
    notification. Such a POST can be sent again when it may not have arrived:
    the server matches a response to the request of the same id (2025-11-25
    basic/index, "Responses": a response MUST include the same ID as its
    request), and a response or notification that arrives after the request
    it refers to is over is ignored (basic/utilities/cancellation, "Timing
    Considerations": both parties MUST handle these races gracefully; "Error
    Handling": unknown request IDs SHOULD be ignored). A request (tools/call)
    is never sent twice: it may have started the tool (exactly once)."""
    return "method" not in message or "id" not in message


class UpstreamClient(httpx.AsyncClient):
    """httpx's client (the API of the rare paths: GET streams, DELETE, metadata,
    the modern pass-through), and `poster`, the hot path: a session's POSTs.

    On the aiohttp transport a POST goes to the aiohttp session itself, with
    the session's headers merged and its timeouts built once; the answer is
    aiohttp's response (`AiohttpAnswer`), read by `HttpExchange` without
    httpx: one `read()` for JSON, aiohttp's chunks through `SSEDecoder` for a
    stream. httpx's per-call layers (`build_request`'s URL and header merging,
    the `httpx.Request`, auth, redirects, cookies, the response's stream
    binding, the header conversion back to aiohttp's, then its body's chain
    of generators) cost most of the CPU a POST cost the gateway's process
    (bench/upstream_post.py, bench/README.md)."""

    def __init__(
        self,
        *,
        transport: httpx.AsyncBaseTransport,
        connect_timeout_s: float,
        aiohttp_session: Callable[[], aiohttp.ClientSession] | None = None,
        fresh_session: FreshSession | None = None,
        lean: h1.H1Client | None = None,
        streams: h1.H1Client | None = None,
        max_answer_bytes: int = h1.DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        super().__init__(
            transport=transport,
            timeout=httpx.Timeout(connect_timeout_s, read=None),
            trust_env=False,
            cookies=_NoCookies(),
        )
        self._aiohttp_session = aiohttp_session
        self._fresh_session = fresh_session
        self._lean = lean
        self._streams = streams
        # MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES: h1 bounds its answers itself,
        # `HttpExchange` those of the other transports and every SSE event.
        self.max_answer_bytes = max_answer_bytes

    def poster(self, url: httpx.URL, headers: Mapping[str, str], timeout: httpx.Timeout) -> Post:
        """POSTs to `url` with `headers` (and a call's own extra ones), answers streamed."""
        merged = {**self.headers, **headers}  # what build_request would merge, once
        if self._lean is not None:
            return _h1_poster(self._lean, url, merged, timeout)
        if self._aiohttp_session is None:
            return _httpx_poster(self, url, merged, timeout)
        from app.upstream.aiohttp_client import aiohttp_poster

        fresh = self._fresh_session
        assert fresh is not None  # built with the aiohttp session (build_client)
        return aiohttp_poster(self._aiohttp_session, fresh, url, merged, timeout)

    async def send_lean(
        self,
        method: bytes,
        url: httpx.URL,
        headers: Mapping[str, str],
        content: bytes,
        timeouts: httpx.Timeout,
    ) -> Answer | None:
        """A one-off request of a plain gateway (the era probe, a session's
        DELETE) on h1, the session POSTs' client, headers merged as httpx
        merges them; None without h1 (then httpx's client sends it). On h1 a
        gateway in front of a legacy upstream then never uses httpx's
        transport, whose aiohttp is imported by its first request."""
        if self._lean is None:
            return None
        merged = {**self.headers, **headers}
        return await _h1_poster(self._lean, url, merged, timeouts, method)(content, {})

    async def h1_get(
        self, url: httpx.URL, headers: Mapping[str, str], timeouts: httpx.Timeout
    ) -> Answer | None:
        """A GET (a session's stream, the OAuth metadata) on h1, in a pool of
        its own (`_streams`: a stream holds its connection as long as anyone
        listens, and must never take a slot of the POSTs' pool, as it did not
        when it went to aiohttp's); None without h1 (then httpx's client sends
        it). With it a gateway in front of a legacy upstream never imports
        aiohttp, whatever its clients do (bench/README.md, "Third round")."""
        if self._streams is None:
            return None
        merged = {**self.headers, **headers}
        fields = {k: v for k, v in merged.items() if k.lower() not in _FRAMING}
        if not all(_token(k) and printable_ascii(v) for k, v in fields.items()):
            raise UnicodeEncodeError("ascii", "", 0, 0, "header value")
        # No body, no Content-Length (RFC 9110 section 8.6: not for a GET
        # without content), as aiohttp sent it.
        head = b"GET %s HTTP/1.1\r\nhost: %s\r\n%s\r\n" % (
            url.raw_path,
            url.netloc,
            "".join(f"{k}: {v}\r\n" for k, v in fields.items()).encode(),
        )
        streams = self._streams
        return await streams.request(
            streams.origin(url.scheme, url.host, url.port, _credential(fields)),
            head,
            connect_timeout=timeouts.connect,
            read_timeout=timeouts.read,
            pool_timeout=timeouts.pool,
        )

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            if self._fresh_session is not None:
                await self._fresh_session.close()
            if self._lean is not None:
                await self._lean.aclose()
            if self._streams is not None:
                await self._streams.aclose()


# Set by the request itself (h1 writes the body's length); httpx's client
# headers never carry them, a caller's are not forwarded as they are.
_FRAMING = frozenset(("host", "content-length", "transfer-encoding"))


def _h1_poster(
    client: h1.H1Client,
    url: httpx.URL,
    merged: dict[str, str],
    timeout: httpx.Timeout,
    method: bytes = b"POST",
) -> Post:
    """The hot path on app/upstream/h1.py: the request's head built once per
    session (the call's extra headers, the trace context, appended), one write
    of head and body per POST. `method`: another for a one-off (`send_lean`)."""
    fields = {k: v for k, v in merged.items() if k.lower() not in _FRAMING}
    # Connections are the credential's own (app/upstream/h1.py says why); a
    # call's extra headers never carry Authorization (tracing.outgoing_headers).
    origin = client.origin(url.scheme, url.host, url.port, _credential(fields))
    # httpx refuses what is not ASCII, aiohttp a CR or LF: refused here as
    # httpx did (UnicodeEncodeError, turned into our error in `_library_errors`).
    unsendable = not all(_token(k) and printable_ascii(v) for k, v in fields.items())
    names = frozenset(k.lower() for k in fields)
    start = b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method, url.raw_path, url.netloc)
    lines = "" if unsendable else "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    head = start + lines.encode()
    connect, read, pool = timeout.connect, timeout.read, timeout.pool

    def head_with(extra: Mapping[str, str]) -> bytes:
        if not all(_token(k) and printable_ascii(v) for k, v in extra.items()):
            raise UnicodeEncodeError("ascii", "", 0, 0, "header value")
        if names.isdisjoint(k.lower() for k in extra):
            return head + "".join(f"{k}: {v}\r\n" for k, v in extra.items()).encode()
        # A call's field replaces the session's of the same name, in any case.
        replaced = {k.lower() for k in extra}
        both = {k: v for k, v in fields.items() if k.lower() not in replaced} | dict(extra)
        return start + "".join(f"{k}: {v}\r\n" for k, v in both.items()).encode()

    async def post(content: bytes, extra: Mapping[str, str], resend: bool = False) -> h1.H1Answer:
        # h1's exceptions go up as they are: `_library_errors` around the call maps them.
        if unsendable:
            raise UnicodeEncodeError("ascii", "", 0, 0, "header value")
        payload = b"%scontent-length: %d\r\n\r\n%s" % (
            head_with(extra) if extra else head,
            len(content),
            content,
        )
        try:
            return await client.request(
                origin,
                payload,
                connect_timeout=connect,
                read_timeout=read,
                pool_timeout=pool,
                whole=True,
            )
        except h1.StaleConnection as exc:
            # `_stale`'s rule: a reused connection that failed before any answer.
            if not resend:
                raise
            log.info("upstream_post_resent", error=type(exc).__name__)
        return await client.request(
            origin,
            payload,
            connect_timeout=connect,
            read_timeout=read,
            pool_timeout=pool,
            fresh=True,
            whole=True,
        )

    return post


def _credential(fields: Mapping[str, str]) -> str:
    """The h1 pool's credential key: the same hash the session pool keys by."""
    for name, value in fields.items():
        if name.lower() == "authorization":
            return credential_hash(value)
    return credential_hash(None)


def _token(name: str) -> bool:
    # RFC 9110 section 5.6.2: a field name is a token.
    return bool(name) and name.isascii() and all(c in _TCHAR for c in name)


_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


# An answer as its readers see it: h1's (or aiohttp's) on the hot path, httpx's
# on the rare paths (the modern pass-through, long-lived modern requests, HTTP+SSE streams).
Answer: TypeAlias = "httpx.Response | AiohttpAnswer | h1.H1Answer"


def _httpx_poster(
    client: httpx.AsyncClient, url: httpx.URL, headers: dict[str, str], timeout: httpx.Timeout
) -> Post:
    """httpx's own way (its transport, or a plain client): `build_request` and `send`.
    Never resent: httpcore does not say whether a connection was reused (it does
    check that a pooled connection is still open before reusing it)."""

    async def post(
        content: bytes, extra: Mapping[str, str], resend: bool = False
    ) -> httpx.Response:
        request = client.build_request(
            "POST",
            url,
            content=content,
            headers={**headers, **extra} if extra else headers,
            timeout=timeout,
        )
        return await client.send(request, stream=True)

    return post


def build_client(
    *,
    connect_timeout_s: float,
    max_connections: int,
    transport: str = "h1",
    keepalive_s: float = KEEPALIVE_S,
    max_answer_bytes: int = h1.DEFAULT_MAX_ANSWER_BYTES,
) -> UpstreamClient:
    """`transport`: h1 (the session POSTs on app/upstream/h1.py, the rest on httpx
    over aiohttp) or aiohttp (the session POSTs on aiohttp too). Never httpx's
    own transport (httpcore): it pools connections by origin, so one
    credential's request could ride on another's connection and read a stray
    byte left after its answer as its own (bench/README.md, "Why each HTTP
    stack remains")."""
    if transport not in ("aiohttp", "h1"):
        raise ValueError(f"unknown upstream HTTP transport {transport!r}: h1 or aiohttp")
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=keepalive_s,
    )
    # CA certificates read on the first TLS handshake (app/upstream/tls.py);
    # one context for h1 and aiohttp.
    verify = upstream_context()
    if transport == "h1":
        return UpstreamClient(
            transport=_OnFirstRequest(
                lambda: _aiohttp_transport(limits, max_connections, keepalive_s, verify)
            ),
            connect_timeout_s=connect_timeout_s,
            max_answer_bytes=max_answer_bytes,
            lean=h1.H1Client(
                max_connections=max_connections,
                keepalive_s=keepalive_s,
                ssl_context=verify,
                max_answer_bytes=max_answer_bytes,
            ),
            # GETs (streams, metadata): the bound the aiohttp pool gave them
            # (app/cli.py counts two pools).
            streams=h1.H1Client(
                max_connections=max_connections,
                keepalive_s=keepalive_s,
                ssl_context=verify,
                max_answer_bytes=max_answer_bytes,
            ),
        )
    from app.upstream import aiohttp_client

    aiohttp_transport, session = aiohttp_client.transport(
        limits, max_connections, keepalive_s, verify
    )
    return UpstreamClient(
        transport=aiohttp_transport,
        connect_timeout_s=connect_timeout_s,
        aiohttp_session=session,
        max_answer_bytes=max_answer_bytes,
        fresh_session=aiohttp_client.FreshSession(max_connections, verify),
    )


def _aiohttp_transport(
    limits: httpx.Limits, max_connections: int, keepalive_s: float, verify: Any
) -> httpx.AsyncBaseTransport:
    from app.upstream import aiohttp_client

    made, _ = aiohttp_client.transport(limits, max_connections, keepalive_s, verify)
    return made


class _OnFirstRequest(httpx.AsyncBaseTransport):
    """httpx's transport made by the first request that needs it: on h1 that is
    a GET stream, the OAuth metadata or a modern pass-through, which a plain
    gateway in front of a legacy upstream never sends, so it never imports
    aiohttp (about 6 MB of idle RSS, bench/README.md "Third round")."""

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


async def _refuse_challenge(response: Answer, what: str) -> None:
    """401/403 is the upstream's authorization answer (2025-06-18 basic/authorization
    "Error Handling"), whatever its body: relayed with its challenge, never retried."""
    if response.status_code in (401, 403):
        status = response.status_code
        challenge = _joined(response, "www-authenticate")
        await response.aclose()
        raise UpstreamAuthChallenge(
            f"upstream answered {what} with HTTP {status}", status, challenge
        )


def _joined(response: Answer, name: str) -> str | None:
    """A header's value, its fields joined with ", " when it came more than once,
    as httpx's `Headers.get` gives it (an upstream may send one WWW-Authenticate
    per scheme, RFC 9110 section 11.6.1); aiohttp's `get` gives the first only."""
    if not isinstance(response, httpx.Response):  # aiohttp's or h1's multidict
        values = response.headers.getall(name, ())
        return ", ".join(values) if values else None
    value: str | None = response.headers.get(name)
    return value


def _content_type(response: Answer) -> str:
    value: str = response.headers.get("content-type", "")
    return value.partition(";")[0].strip().lower()


# How long closing an exchange may wait for the rest of an answered stream:
# a stream read to its end leaves the connection reusable, an abandoned one
# costs a new TCP connection on the next request (measured: bench/README.md).
_DRAIN_S = 0.25
# A metadata document is small; an upstream that cannot send it in this long is broken.
_METADATA_TIMEOUT_S = 10.0


class HttpExchange:
    """One POST's answer: a single JSON message, or the events of its SSE stream.

    A JSON answer is iterated by the exchange itself, not by an async
    generator: one call's answer is most often JSON, and each generator costs
    the event loop's first-iteration hook (a weak set's add and remove) and a
    close of its own (bench/README.md, "Fifth round")."""

    def __init__(
        self, response: Answer, what: str, limit: int = h1.DEFAULT_MAX_ANSWER_BYTES
    ) -> None:
        self._response = response
        self._what = what
        # MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES: a JSON answer's body, an SSE event.
        self._limit = limit
        # A modern server answers a session's request with 400 (upstream/era_transport.py).
        self.status = response.status_code
        self._events: AsyncGenerator[Message, None] | None = (
            self._read_events() if _content_type(response) == "text/event-stream" else None
        )
        # A JSON answer's messages not yet taken, last first; None: not read yet.
        self._left: list[Message] | None = None
        # SSE event id of the last event read: resumption (Last-Event-ID) of
        # the GET stream where the upstream supports it.
        self.last_event_id: str | None = None

    def __aiter__(self) -> AsyncIterator[Message]:
        return self if self._events is None else self._events

    async def __anext__(self) -> Message:
        left = self._left
        if left is None:
            left = self._left = await self._read_json()
        if not left:
            raise StopAsyncIteration
        return left.pop()

    async def peek(self) -> Message | None:
        """The first message of a JSON answer, still to be iterated; None for an
        SSE stream (not read ahead) or an empty body."""
        if self._events is not None:
            return None
        if self._left is None:
            self._left = await self._read_json()
        return self._left[-1] if self._left else None

    async def _read_json(self) -> list[Message]:
        with _library_errors(self._what):
            body = await self._body()
            parsed = jsonio.loads(body) if body else None
        if parsed is None:
            return []
        if not isinstance(parsed, dict | list):
            raise UpstreamProtocolError(f"upstream answered {self._what} with a non-object")
        messages = list(_messages_of(parsed))
        messages.reverse()
        return messages

    async def _body(self) -> bytes | bytearray:
        """The whole body, at most `_limit` bytes (decoded). h1 counts its
        POSTs' answers as they arrive (`whole`) and closes the connection."""
        response = self._response
        limit = self._limit
        body: bytes | bytearray
        if isinstance(response, h1.H1Answer):
            body = await response.aread()
        else:
            grown = bytearray()
            async for chunk in response.aiter_bytes():
                if len(grown) + len(chunk) > limit:
                    # Closing the unread answer closes its connection (aclose).
                    raise too_large(limit, self._what)
                grown += chunk
            body = grown
        if len(body) > limit:
            raise too_large(limit, self._what)
        return body

    async def _read_events(self) -> AsyncGenerator[Message, None]:
        response = self._response
        decoder = SSEDecoder(self._limit)
        chunks = response.aiter_bytes()
        try:
            with _library_errors(self._what):
                async for chunk in chunks:
                    for event in decoder.feed(chunk):
                        if event.id:
                            self.last_event_id = event.id
                        if not event.data or event.event != "message":
                            continue
                        for message in _messages_of(jsonio.loads(event.data)):
                            yield message
                    # 2025-11-25 priming events carry an id and no data: not
                    # dispatched, but their id is the stream's last one.
                    if decoder.last_event_id:
                        self.last_event_id = decoder.last_event_id
        finally:
            if isinstance(chunks, AsyncGenerator):  # httpx's, closed now, not later
                await chunks.aclose()

    async def aclose(self, drain: bool = False) -> None:
        """End the exchange. With `drain`, first read what is left of an answered
        stream (servers end it right after the response), so the keep-alive
        connection can serve the next request instead of being dropped."""
        if drain and not self._response.is_closed:
            # Once per call on an SSE answer: the cheap timer (app/deadline.py).
            deadline = StepDeadline(asyncio.get_running_loop().time() + _DRAIN_S)
            try:
                with contextlib.suppress(Exception), deadline:
                    async for _ in self:
                        pass
            finally:
                deadline.close()
        events = self._events
        if events is not None:
            with contextlib.suppress(Exception):
                await events.aclose()
        with contextlib.suppress(Exception):
            await self._response.aclose()
        _unbind(self._response)


_CLOSED = httpx.ByteStream(b"")


async def _close(response: Answer) -> None:
    await response.aclose()
    _unbind(response)


def _unbind(response: Answer) -> None:
    """Break the reference cycle httpx makes for every streamed response
    (`response.stream` is a BoundAsyncStream holding the response), once it is
    closed: reference counting then frees the response, its aiohttp response
    and their headers at once. Left to the cyclic garbage collector, those
    objects of every call survived into the older generations and made the
    collections that walk them the gateway's longest pauses (bench/README.md,
    "Where the time goes"). aiohttp's response makes no such cycle."""
    if isinstance(response, httpx.Response) and response.is_closed:
        response.stream = _CLOSED


def answer_limit(client: httpx.AsyncClient) -> int:
    """MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES as the client was built with it."""
    if isinstance(client, UpstreamClient):
        return client.max_answer_bytes
    return h1.DEFAULT_MAX_ANSWER_BYTES


def _messages_of(parsed: Any) -> Iterator[Message]:
    if isinstance(parsed, dict):
        yield parsed
    elif isinstance(parsed, list):
        yield from (item for item in parsed if isinstance(item, dict))


class StreamableHttpSession:
    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        headers: Mapping[str, str],
        session_id: str | None,
        version: Version,
        request_timeout_s: float,
    ) -> None:
        self._client = client
        # Parsed once: httpx would parse a str URL again on every request
        # (3.5% of the gateway's CPU in the c8 profile, bench/README.md).
        self._url = httpx.URL(url)
        self.session_id = session_id
        self.version = version
        self._timeout = httpx.Timeout(request_timeout_s, connect=client.timeout.connect)
        self._limit = answer_limit(client)
        base = {"accept": _ACCEPT, "content-type": "application/json", **headers}
        if session_id is not None:
            base[SESSION_HEADER] = session_id
        if version.features.protocol_version_header:
            base[VERSION_HEADER] = version.name
        self._headers = base
        self._send = (
            client.poster(self._url, base, self._timeout)
            if isinstance(client, UpstreamClient)
            else _httpx_poster(client, self._url, base, self._timeout)  # a plain client (tests)
        )

    async def _post(self, message: Message, what: str) -> Answer:
        content = jsonio.dumps(message)
        with _library_errors(what):
            response = await self._send(content, tracing.outgoing_headers(), resendable(message))
        mark("answer_head")
        if response.status_code == 404 and self.session_id is not None:
            await _close(response)
            raise SessionExpired("upstream no longer knows the session")
        await _refuse_challenge(response, what)
        return response

    async def request(self, message: Message) -> HttpExchange:
        what = f"{message.get('method')}"
        response = await self._post(message, what)
        if response.status_code >= 400 and _content_type(response) != "application/json":
            status = response.status_code
            await _close(response)
            raise UpstreamHttpError(f"upstream answered {what} with HTTP {status}", status)
        return HttpExchange(response, what, self._limit)

    async def _post_expect_accepted(self, message: Message, what: str) -> None:
        response = await self._post(message, what)
        try:
            if response.status_code >= 400:
                raise UpstreamHttpError(
                    f"upstream refused {what} with HTTP {response.status_code}",
                    response.status_code,
                )
        finally:
            await _close(response)

    async def notify(self, message: Message) -> None:
        await self._post_expect_accepted(message, str(message.get("method")))

    async def respond(self, message: Message) -> None:
        await self._post_expect_accepted(message, "response to a server request")

    async def listen(self, last_event_id: str | None = None) -> HttpExchange:
        headers = {k: v for k, v in self._headers.items() if k != "content-type"}
        headers["accept"] = "text/event-stream"
        if last_event_id is not None:
            headers["last-event-id"] = last_event_id
        headers.update(tracing.outgoing_headers())
        client = self._client
        timeouts = httpx.Timeout(None, connect=self._timeout.connect)
        with _library_errors("GET stream"):
            response = (
                await client.h1_get(self._url, headers, timeouts)
                if isinstance(client, UpstreamClient)
                else None
            )
            if response is None:
                request = client.build_request("GET", self._url, headers=headers, timeout=timeouts)
                response = await client.send(request, stream=True)
        if response.status_code == 404 and self.session_id is not None:
            await _close(response)
            raise SessionExpired("upstream no longer knows the session")
        await _refuse_challenge(response, "GET stream")
        if response.status_code >= 400:
            status = response.status_code
            await _close(response)
            raise UpstreamHttpError(f"upstream refused the GET stream with HTTP {status}", status)
        return HttpExchange(response, "GET stream", self._limit)

    async def close(self) -> None:
        if self.session_id is None:
            return
        client = self._client
        with contextlib.suppress(UpstreamError), _library_errors("DELETE"):
            # On h1 as the session's POSTs (`send_lean`); the same bytes as
            # httpx over aiohttp sent (aiohttp writes `content-length: 0`).
            response = (
                await client.send_lean(b"DELETE", self._url, self._headers, b"", client.timeout)
                if isinstance(client, UpstreamClient)
                else None
            )
            if response is None:
                request = client.build_request("DELETE", self._url, headers=self._headers)
                response = await client.send(request)
            await response.aread()
            await _close(response)


class StreamableHttpTransport:
    def __init__(self, client: httpx.AsyncClient, url: str, *, request_timeout_s: float) -> None:
        self._client = client
        self._url = url
        self._request_timeout_s = request_timeout_s

    @property
    def client(self) -> httpx.AsyncClient:
        """The HTTP client, shared with the modern upstream seam (one pool of connections)."""
        return self._client

    async def open_session(
        self, initialize: Message, headers: Mapping[str, str]
    ) -> tuple[StreamableHttpSession, Message]:
        offered = get_version(initialize["params"]["protocolVersion"])
        assert offered is not None
        bootstrap = StreamableHttpSession(
            self._client, self._url, headers, None, offered, self._request_timeout_s
        )
        response = await bootstrap._post(initialize, "initialize")
        if response.status_code >= 400 and _content_type(response) != "application/json":
            await _close(response)
            raise UpstreamHttpError(
                f"upstream refused initialize with HTTP {response.status_code}",
                response.status_code,
            )
        session_id = _joined(response, SESSION_HEADER)
        answer: Message | None = None
        exchange = HttpExchange(response, "initialize", bootstrap._limit)
        try:
            async for message in exchange:
                if message.get("id") == initialize["id"] and (
                    "result" in message or "error" in message
                ):
                    answer = message
                    break
        finally:
            await exchange.aclose(drain=answer is not None)
        if answer is None:
            raise UpstreamProtocolError("upstream closed the initialize stream without answering")
        if "error" in answer:
            err = answer["error"]
            raise UpstreamProtocolError(
                f"upstream refused initialize: {err.get('code')} {err.get('message')}"
            )
        result: dict[str, Any] = answer["result"]
        negotiated = get_version(result.get("protocolVersion"))
        if negotiated is None or negotiated.features.per_request_meta:
            raise UpstreamProtocolError(
                f"upstream negotiated protocol version {result.get('protocolVersion')!r}, "
                "which is not a legacy version this gateway knows"
            )
        session = StreamableHttpSession(
            self._client, self._url, headers, session_id, negotiated, self._request_timeout_s
        )
        await session.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return session, result

    async def fetch_document(self, url: str, *, max_bytes: int) -> Any:
        """GET a small JSON document from the upstream's origin (its OAuth
        protected-resource metadata): the parsed JSON, or None unless 200."""
        client = self._client
        headers = {"accept": "application/json", **tracing.outgoing_headers()}
        timeouts = httpx.Timeout(_METADATA_TIMEOUT_S, connect=client.timeout.connect)
        with _library_errors("metadata GET"):
            response = (
                await client.h1_get(httpx.URL(url), headers, timeouts)
                if isinstance(client, UpstreamClient)
                else None
            )
            if response is None:
                request = client.build_request("GET", url, headers=headers, timeout=timeouts)
                response = await client.send(request, stream=True)
            try:
                if response.status_code != 200:
                    return None
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        return None
            finally:
                await response.aclose()
            try:
                return jsonio.loads(bytes(body))
            except jsonio.JSONDecodeError:
                return None

    async def aclose(self) -> None:
        await self._client.aclose()
