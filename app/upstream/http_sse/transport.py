"""HTTP+SSE upstreams: the 2024-11-05 transport ("HTTP with SSE"), and detecting it.

2024-11-05 basic/transports: the client opens an SSE stream with a GET; the
server's first event, `endpoint`, names the URI the client POSTs its messages
to; every message of the server (responses, requests, notifications) comes on
that one stream. Here one GET stream is one legacy session, held as long as
the session: a reader task takes each message off the stream and routes it,
as stdio does (nothing but the message says where it belongs):

- a response to the exchange of its request id;
- `notifications/progress` to the exchange whose request carried its token;
- a server request, and `notifications/message`, to the one call (`tools/call`,
  `prompts/get`, `resources/read`) in flight when there is exactly one (always
  so on an MRTR lane: a caller that may be asked gets a session of its own);
- otherwise to the session's `listen()` stream when one is open (what a
  Streamable HTTP session's GET stream carries); with none, a request gets the
  listener's `default_answer` and a notification is dropped.

When the stream ends or breaks, the calls in flight fail at once
(`UpstreamUnavailable`) and the session is gone: `request` raises
`SessionExpired`, so the pool and the lanes open a new one. Closing the
session closes the stream (the transport has no DELETE).

Detection (2025-03-26 basic/transports, "Backwards Compatibility"): a client
POSTs `initialize` to the server URL; if that fails with 400, 404 or 405 it
GETs the URL expecting an SSE stream whose first event is `endpoint`.
`DetectingTransport` does that once, then keeps to what worked.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Mapping

import httpx
import structlog

from app import jsonio, tracing
from app.call import Message
from app.quoting import quoted
from app.upstream.errors import (
    SessionExpired,
    UpstreamError,
    UpstreamHttpError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.httpclient.client import UpstreamClient, library_errors
from app.upstream.httpclient.interface import Answer
from app.upstream.httpclient.sse_decoder import Event
from app.upstream.httpclient.sse_decoder import events as sse_events
from app.upstream.sessions.routing import Exchange, Router, initialize_result
from app.upstream.streamable_http.transport import (
    StreamableHttpSession,
    StreamableHttpTransport,
    _close,
    _content_type,
    _refuse_challenge,
    resendable,
)

log = structlog.get_logger("mcp_shim.http_sse")

# POSTing initialize failed with one of these: try HTTP+SSE (2025-03-26
# basic/transports, "Backwards Compatibility").
FALLBACK_STATUSES = frozenset({400, 404, 405})


# The routing (app/upstream/sessions/routing.py) is the same as stdio's: one exchange class.
SseExchange = Exchange


class SseSession:
    """One GET stream and the endpoint it announced: one legacy session."""

    session_id: str | None = None

    def __init__(
        self,
        client: UpstreamClient,
        endpoint: httpx.URL,
        stream: Answer,
        events: AsyncIterator[Event],
        headers: Mapping[str, str],
        request_timeout_s: float,
    ) -> None:
        self._client = client
        self.endpoint = endpoint
        self._stream = stream
        self._request_timeout_s = request_timeout_s
        self._timeout = httpx.Timeout(request_timeout_s, connect=client.connect_timeout)
        self._headers = {"content-type": "application/json", **headers}
        # The hot path's POST (UpstreamClient.poster): the same resending of a
        # message that is not a request as on a Streamable HTTP session.
        self._send = client.poster(endpoint, self._headers, self._timeout)
        self._routes = Router(
            "upstream", initialized=lambda: self.initialized, respond=self.respond
        )
        self.gone: UpstreamError | None = None
        self.initialized = False
        # A fresh context: the stream outlives the request that opened it.
        self._reader = asyncio.get_running_loop().create_task(
            self._read(events), context=contextvars.Context()
        )

    # -- the seam -----------------------------------------------------------------

    async def request(self, message: Message) -> SseExchange:
        if self.gone is not None:
            raise SessionExpired("the upstream's SSE stream has ended")
        exchange = self._routes.open(message, self._request_timeout_s)
        try:
            await self._post(message, quoted(exchange.what))
        except BaseException:
            self._routes.forget(exchange)
            raise
        return exchange

    async def notify(self, message: Message) -> None:
        await self._post(message, quoted(message.get("method")))
        self._routes.cancelled(message)

    async def respond(self, message: Message) -> None:
        await self._post(message, "response to a server request")

    async def listen(self, last_event_id: str | None = None) -> SseExchange:
        if self.gone is not None:
            raise SessionExpired("the upstream's SSE stream has ended")
        return self._routes.listen()

    async def close(self) -> None:
        """The session ends with its stream (2024-11-05 has no DELETE)."""
        self._lost(SessionExpired("the session was closed"))
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader
        with contextlib.suppress(Exception):
            await _close(self._stream)

    # -- writing ------------------------------------------------------------------

    async def _post(self, message: Message, what: str) -> None:
        if self.gone is not None:
            raise SessionExpired("the upstream's SSE stream has ended")
        with (
            tracing.upstream_call(message, None, None, self.endpoint) as span,
            library_errors(what),
        ):
            response = await self._send(jsonio.dumps(message), span.headers(), resendable(message))
            span.answered(response.status_code)
        try:
            if response.status_code == 404:
                # The endpoint's session is unknown: the server forgot it.
                self._lost(SessionExpired("upstream no longer knows the session"))
                raise SessionExpired("upstream no longer knows the session")
            await _refuse_challenge(response, what)
            if response.status_code >= 400:
                raise UpstreamHttpError(
                    f"upstream refused {what} with HTTP {response.status_code}",
                    response.status_code,
                )
        finally:
            await _close(response)

    # -- reading ------------------------------------------------------------------

    async def _read(self, events: AsyncIterator[Event]) -> None:
        ended: UpstreamError = UpstreamUnavailable("the upstream's SSE stream ended")
        try:
            with library_errors("SSE stream"):
                async for event in events:
                    if event.event != "message" or not event.data:
                        continue
                    try:
                        parsed = jsonio.loads(event.data)
                    except jsonio.JSONDecodeError:
                        log.info("upstream_sse_not_json", length=len(event.data))
                        continue
                    for message in parsed if isinstance(parsed, list) else [parsed]:
                        if isinstance(message, dict):
                            self._routes.dispatch(message)
        except UpstreamError as exc:
            ended = UpstreamUnavailable(f"the upstream's SSE stream broke: {exc.message}")
        if self.gone is None:
            log.warning("upstream_sse_stream_ended", reason=ended.message)
        self._lost(ended)

    def _lost(self, error: UpstreamError) -> None:
        """Every call waiting on the stream ends with `error`; the session is gone."""
        if self.gone is None:
            self.gone = error
        self._routes.fail_all(error)


async def open_sse_session(
    client: UpstreamClient,
    url: str,
    initialize: Message,
    headers: Mapping[str, str],
    *,
    request_timeout_s: float,
    endpoint_timeout_s: float,
) -> tuple[SseSession, Message]:
    """GET the SSE stream, wait for its `endpoint`, then initialize over it."""
    get_headers = {"accept": "text/event-stream", **headers, **tracing.outgoing_headers()}
    stream_url = httpx.URL(url)
    with library_errors("SSE GET"):
        # On httpx over aiohttp: the stream is held for the session's life.
        response = await client.open_stream(
            "GET",
            stream_url,
            get_headers,
            None,
            httpx.Timeout(None, connect=client.connect_timeout),
        )
    await _refuse_challenge(response, "SSE GET")
    if response.status_code >= 400 or _content_type(response) != "text/event-stream":
        status = response.status_code
        await _close(response)
        raise UpstreamHttpError(
            f"upstream answered the SSE GET with HTTP {status}"
            + ("" if status >= 400 else " and no event stream"),
            status if status >= 400 else 502,
        )
    session: SseSession | None = None
    try:
        events = sse_events(response.aiter_bytes(), client.max_answer_bytes)
        endpoint = await _endpoint(events, stream_url, endpoint_timeout_s)
        session = SseSession(client, endpoint, response, events, headers, request_timeout_s)
        exchange = await session.request(initialize)
        answer: Message | None = None
        try:
            async for message in exchange:
                if "method" not in message:
                    answer = message
        finally:
            await exchange.aclose()
        result = initialize_result(answer, "upstream")
        await session.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
        session.initialized = True
        return session, result
    except BaseException:
        if session is not None:
            await session.close()
        else:
            await _close(response)
        raise


async def _endpoint(
    events: AsyncIterator[Event], stream_url: httpx.URL, timeout_s: float
) -> httpx.URL:
    """The first event must be `endpoint` (2024-11-05 basic/transports); its URI is
    resolved against the stream's URL and must stay on the stream's origin, so
    that an upstream cannot send the gateway's POSTs (with the caller's
    credentials) anywhere else."""
    try:
        async with asyncio.timeout(timeout_s):
            with library_errors("SSE GET"):
                event = await anext(events)
    except TimeoutError:
        raise UpstreamTimeout(
            f"upstream sent no endpoint event within {timeout_s:g}s of the SSE GET"
        ) from None
    except StopAsyncIteration:
        raise UpstreamProtocolError("upstream closed the SSE stream before its endpoint") from None
    if event.event != "endpoint" or not event.data.strip():
        raise UpstreamProtocolError(
            f"upstream's first SSE event is {quoted(event.event)}, not an endpoint event"
        )
    try:
        endpoint = stream_url.join(event.data.strip())
    except httpx.InvalidURL:
        raise UpstreamProtocolError("upstream's endpoint event is not a URI") from None
    if (endpoint.scheme, endpoint.host, endpoint.port) != (
        stream_url.scheme,
        stream_url.host,
        stream_url.port,
    ):
        raise UpstreamProtocolError("upstream's endpoint event names another origin")
    return endpoint


class DetectingTransport(StreamableHttpTransport):
    """Streamable HTTP first, then HTTP+SSE (`mode="auto"`), or HTTP+SSE only
    (`mode="sse"`); once a session opens, later ones use what worked. A
    Streamable HTTP transport otherwise: the same client, the same metadata
    fetch for OAuth."""

    def __init__(
        self,
        client: UpstreamClient,
        url: str,
        *,
        request_timeout_s: float,
        endpoint_timeout_s: float,
        mode: str = "auto",
    ) -> None:
        super().__init__(client, url, request_timeout_s=request_timeout_s)
        self._sse_client = client
        self._sse_url = url
        self._sse_request_timeout_s = request_timeout_s
        self._endpoint_timeout_s = endpoint_timeout_s
        # None until detected: "streamable-http" or "sse".
        self.kind: str | None = "sse" if mode == "sse" else None

    async def open_session(  # type: ignore[override]
        self, initialize: Message, headers: Mapping[str, str]
    ) -> tuple[StreamableHttpSession | SseSession, Message]:
        if self.kind == "sse":
            return await self._open_sse(initialize, headers)
        if self.kind == "streamable-http":
            return await super().open_session(initialize, headers)
        try:
            opened = await super().open_session(initialize, headers)
        except UpstreamHttpError as exc:
            if exc.http_status not in FALLBACK_STATUSES:
                raise
            try:
                sse = await self._open_sse(initialize, headers)
            except UpstreamError as sse_exc:
                raise UpstreamHttpError(
                    f"{exc.message}; no HTTP+SSE stream either ({sse_exc.message})",
                    exc.http_status,
                ) from None
            self._detected("sse")
            return sse
        self._detected("streamable-http")
        return opened

    def _detected(self, kind: str) -> None:
        if self.kind is None:
            self.kind = kind
            log.info("upstream_transport_detected", transport=kind)

    async def _open_sse(
        self, initialize: Message, headers: Mapping[str, str]
    ) -> tuple[SseSession, Message]:
        return await open_sse_session(
            self._sse_client,
            self._sse_url,
            initialize,
            headers,
            request_timeout_s=self._sse_request_timeout_s,
            endpoint_timeout_s=self._endpoint_timeout_s,
        )
