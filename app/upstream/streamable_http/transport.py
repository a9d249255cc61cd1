"""Legacy Streamable HTTP (2025-03-26 .. 2025-11-25) toward the upstream server,
and `UpstreamClient`, the HTTP client every HTTP upstream kind shares.

The client puts its requests on two stacks (bench/README.md, "Why each HTTP
stack remains"): a session's POSTs (the hot path) on the lean HTTP/1.1 client
of app/upstream/http/h1.py, or with MCP_SHIM_UPSTREAM_HTTP_TRANSPORT=aiohttp on the
aiohttp session itself (app/upstream/http/aiohttp_client.py); the rare paths on
httpx over aiohttp (app/upstream/http/httpx_adapter.py). On h1 the one-off requests
of a plain gateway (the era probe, a session's DELETE) and its GETs go through
h1 too, and aiohttp is imported by the first request that needs it
(bench/README.md, "Third round"). Every answer is an
`app.upstream.http.interface.Answer`, read the same way whichever library read
it; each adapter's exceptions become `app.upstream.errors` errors in its own
`upstream_error`, applied by `_library_errors`, and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx
import structlog

from app import jsonio, tracing
from app.call import mark
from app.deadline import StepDeadline
from app.upstream.base import Message
from app.upstream.errors import (
    SessionExpired,
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamHttpError,
    UpstreamProtocolError,
    UpstreamUnavailable,
    too_large,
)
from app.upstream.http import h1, h1_adapter, httpx_adapter
from app.upstream.http.common import KEEPALIVE_S, BodyTooLarge
from app.upstream.http.interface import Answer, Post
from app.upstream.http.sse_decoder import EventTooLarge, SSEDecoder
from app.upstream.http.tls import upstream_context
from translators.registry import Version, get_version

if TYPE_CHECKING:
    import aiohttp

    from app.upstream.http.aiohttp_client import FreshSession

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
_ACCEPT = "application/json, text/event-stream"

log = structlog.get_logger("mcp_shim.upstream")


def _upstream_error(exc: Exception, what: str) -> UpstreamError | None:
    """The gateway's error for a library's exception, None for one left as it is:
    each adapter's own mapping, then what is no library's (a socket's error, an
    answer too large or not JSON, a header value that cannot be sent)."""
    mapped = h1_adapter.upstream_error(exc, what)
    if mapped is None and "aiohttp" in sys.modules:
        # aiohttp is imported by the first request that needs it
        # (app/upstream/http/aiohttp_client.py): before that, no exception is aiohttp's.
        from app.upstream.http.aiohttp_client import upstream_error as aiohttp_error

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


class _library_errors:  # named as the function it was: its callers are unchanged
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
    """The HTTP client toward the upstream, the one every HTTP upstream kind
    uses: a session's POSTs (`poster`, the hot path), one-off requests
    (`one_off`), GETs (`open_get`) and long-lived or passed-through requests
    (`open_stream`), each answer an `Answer` whichever stack carried it. Its users
    never ask which: h1 or aiohttp for the POSTs (MCP_SHIM_UPSTREAM_HTTP_TRANSPORT),
    h1 for the one-off requests and GETs when it is the POSTs' stack, httpx
    over aiohttp for the rest (bench/README.md, "Why each HTTP stack remains").

    On the aiohttp transport a POST goes to the aiohttp session itself, with
    the session's headers merged and its timeouts built once; httpx's per-call
    layers (`build_request`'s URL and header merging, the `httpx.Request`,
    auth, redirects, cookies, the response's stream binding, the header
    conversion back to aiohttp's, then its body's chain of generators) cost
    most of the CPU a POST cost the gateway's process (bench/upstream_post.py,
    bench/README.md)."""

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
            cookies=httpx_adapter.NoCookies(),
        )
        self._aiohttp_session = aiohttp_session
        self._fresh_session = fresh_session
        self._lean = lean
        self._streams = streams
        # MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES: h1 bounds its answers itself,
        # the other adapters theirs as they read, `HttpExchange` every SSE event.
        self.max_answer_bytes = max_answer_bytes

    @property
    def connect_timeout(self) -> float | None:
        return self.timeout.connect

    def poster(self, url: httpx.URL, headers: Mapping[str, str], timeout: httpx.Timeout) -> Post:
        """POSTs to `url` with `headers` (and a call's own extra ones), answers streamed."""
        merged = {**self.headers, **headers}  # what build_request would merge, once
        if self._lean is not None:
            return h1_adapter.poster(self._lean, url, merged, timeout)
        from app.upstream.http.aiohttp_client import aiohttp_poster

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
        if self._lean is None:
            return await self.open_stream(method.decode(), url, headers, content, timeouts)
        merged = {**self.headers, **headers}
        return await h1_adapter.poster(self._lean, url, merged, timeouts, method)(content, {})

    async def open_get(
        self, url: httpx.URL, headers: Mapping[str, str], timeouts: httpx.Timeout
    ) -> Answer:
        """A GET (a session's stream, the OAuth metadata), on h1 in a pool of its
        own when h1 is the POSTs' stack (a stream holds its connection as long as
        anyone listens, and must never take a slot of the POSTs' pool), else on
        httpx. With h1 a gateway in front of a legacy upstream never imports
        aiohttp, whatever its clients do (bench/README.md, "Third round")."""
        if self._streams is None:
            return await self.open_stream("GET", url, headers, None, timeouts)
        return await h1_adapter.get(self._streams, url, {**self.headers, **headers}, timeouts)

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
            method, url, content=content, headers=headers, timeout=timeouts
        )
        response = await self.send(request, stream=True)
        return httpx_adapter.HttpxAnswer(response, self.max_answer_bytes)

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


def build_client(
    *,
    connect_timeout_s: float,
    max_connections: int,
    transport: str = "h1",
    keepalive_s: float = KEEPALIVE_S,
    max_answer_bytes: int = h1.DEFAULT_MAX_ANSWER_BYTES,
) -> UpstreamClient:
    """`transport`: h1 (the session POSTs on app/upstream/http/h1.py, the rest on httpx
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
    # CA certificates read on the first TLS handshake (app/upstream/http/tls.py);
    # one context for h1 and aiohttp.
    verify = upstream_context()
    if transport == "h1":
        return UpstreamClient(
            transport=httpx_adapter.OnFirstRequest(
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
    from app.upstream.http import aiohttp_client

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
    from app.upstream.http import aiohttp_client

    made, _ = aiohttp_client.transport(limits, max_connections, keepalive_s, verify)
    return made


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
    per scheme, RFC 9110 section 11.6.1); a multidict's `get` gives the first only."""
    values = response.headers.getall(name, ())
    return ", ".join(values) if values else None


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
        """The whole body, at most `_limit` bytes (decoded): every adapter counts
        as the answer arrives and closes the connection past its bound (the
        client's); this exchange's own bound is checked on what came."""
        body = await self._response.aread()
        if len(body) > self._limit:
            raise too_large(self._limit, self._what)
        return body

    async def _read_events(self) -> AsyncGenerator[Message, None]:
        response = self._response
        decoder = SSEDecoder(self._limit)
        with _library_errors(self._what):
            async for chunk in response.aiter_bytes():
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


async def _close(response: Answer) -> None:
    await response.aclose()


def _messages_of(parsed: Any) -> Iterator[Message]:
    if isinstance(parsed, dict):
        yield parsed
    elif isinstance(parsed, list):
        yield from (item for item in parsed if isinstance(item, dict))


class StreamableHttpSession:
    def __init__(
        self,
        client: UpstreamClient,
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
        self._timeout = httpx.Timeout(request_timeout_s, connect=client.connect_timeout)
        self._limit = client.max_answer_bytes
        base = {"accept": _ACCEPT, "content-type": "application/json", **headers}
        if session_id is not None:
            base[SESSION_HEADER] = session_id
        if version.features.protocol_version_header:
            base[VERSION_HEADER] = version.name
        self._headers = base
        self._send = client.poster(self._url, base, self._timeout)

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
        timeouts = httpx.Timeout(None, connect=self._timeout.connect)
        with _library_errors("GET stream"):
            response = await self._client.open_get(self._url, headers, timeouts)
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
            # On h1 as the session's POSTs (`one_off`); the same bytes as
            # httpx over aiohttp sent (aiohttp writes `content-length: 0`).
            response = await client.one_off(
                b"DELETE", self._url, self._headers, b"", client.timeout
            )
            await response.aread()
            await _close(response)


class StreamableHttpTransport:
    def __init__(self, client: UpstreamClient, url: str, *, request_timeout_s: float) -> None:
        self._client = client
        self._url = url
        self._request_timeout_s = request_timeout_s

    @property
    def client(self) -> UpstreamClient:
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
        timeouts = httpx.Timeout(_METADATA_TIMEOUT_S, connect=client.connect_timeout)
        with _library_errors("metadata GET"):
            response = await client.open_get(httpx.URL(url), headers, timeouts)
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
