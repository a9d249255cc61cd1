"""Legacy Streamable HTTP (2025-03-26 .. 2025-11-25) toward the upstream server:
`StreamableHttpTransport` opens sessions, `StreamableHttpSession` speaks one,
`HttpExchange` reads one answer's messages (a JSON body or an SSE stream).
Every request goes through the shared HTTP client (app/upstream/httpclient/client.py),
whose answers are read the same way whichever library carried them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from typing import Any

import httpx
import structlog

from app import jsonio, splice, tracing
from app.call import Message, mark
from app.deadline import StepDeadline
from app.quoting import quoted
from app.upstream.errors import (
    AnswerRoomFull,
    SessionExpired,
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamHttpError,
    UpstreamProtocolError,
    too_large,
)
from app.upstream.httpclient import h1
from app.upstream.httpclient.client import UpstreamClient, library_errors
from app.upstream.httpclient.interface import Answer
from app.upstream.httpclient.sse_decoder import LongEvent, SSEDecoder
from translators.registry import Version, get_version

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
_ACCEPT = "application/json, text/event-stream"

log = structlog.get_logger("mcp_shim.upstream")


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
# costs a new TCP connection on the next request (measured: bench/forward.py).
_DRAIN_S = 0.25
# A metadata document is small; an upstream that cannot send it in this long is broken.
_METADATA_TIMEOUT_S = 10.0


class HttpExchange:
    """One POST's answer: a single JSON message, or the events of its SSE stream.

    A JSON answer is iterated by the exchange itself, not by an async
    generator: one call's answer is most often JSON, and each generator costs
    the event loop's first-iteration hook (a weak set's add and remove) and a
    close of its own (bench/asyncio_costs.py)."""

    def __init__(
        self,
        response: Answer,
        what: str,
        limit: int = h1.DEFAULT_MAX_ANSWER_BYTES,
        spliced: bool = False,
    ) -> None:
        self._response = response
        # `what` names the request in messages (quoted); `spliced` says whether its
        # answer is a call's, whose large strings may stay in their bytes.
        self._what = what
        self._spliced = spliced
        # MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES: a JSON answer's body, an SSE event.
        self._limit = limit
        # A modern server answers a session's request with 400 (upstream/sessions/era_transport.py).
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
        with library_errors(self._what):
            body = await self._body()
            parsed = await _parsed(body, self._spliced) if body else None
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
        decoder = SSEDecoder(self._limit, long_data=True)
        with library_errors(self._what):
            async for chunk in response.aiter_bytes():
                for event in decoder.feed(chunk):
                    if event.id:
                        self.last_event_id = event.id
                    long = isinstance(event, LongEvent)
                    if event.event != "message" or not (event.data or long):
                        continue
                    if isinstance(event, LongEvent):
                        parsed = await _parsed_event(event.raw, self._spliced)
                    else:
                        parsed = jsonio.loads(event.data)
                    for message in _messages_of(parsed):
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


async def _parsed_event(raw: bytearray, spliced: bool) -> Any:
    """A long SSE data line: as a JSON body, unless it is not UTF-8, which the
    decoder would have replaced (WHATWG "UTF-8 decode") before parsing."""
    try:
        return await _parsed(raw, spliced)
    except jsonio.JSONDecodeError:
        return jsonio.loads(str(raw, "utf-8", "replace"))


# The answers whose large strings stay in their bytes (app/splice.py): what a
# call answers with, written to its caller and dropped. Others (a list the
# gateway caches, a GET stream's events) are parsed whole, outside the bound.
SPLICED_METHODS = frozenset({"tools/call", "resources/read", "prompts/get"})


async def _parsed(body: bytes | bytearray, spliced: bool) -> Any:
    """A JSON answer's body parsed; a large answer to a call with its large
    strings left in its bytes (app/splice.py), once there is room for them
    among the answers in flight, given back when they are freed
    (bench/answers.py measures both)."""
    size = len(body)
    if size < splice.MIN_BODY or not spliced:
        return jsonio.loads(body)
    room = splice.ROOM
    if not await room.take(size):
        log.warning(
            "answer_room_full",
            size=size,
            in_flight=room.in_flight,
            setting="MCP_SHIM_MAX_ANSWER_BYTES_IN_FLIGHT",
        )
        raise AnswerRoomFull(room.refusal(size), retry_after_s=max(1, round(room.wait_s)))
    try:
        parsed = splice.loads(body)
    except BaseException:
        room.give(size)
        raise
    if not splice.hold(parsed, lambda: room.give(size)):
        # Parsed whole: the body is freed on return, its parsed form is the call's.
        room.give(size)
    return parsed


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
        # (3.5% of the gateway's CPU in the c8 profile, bench/profile.py).
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

    def shared_state(self) -> dict[str, Any] | None:
        """The upstream session as another worker speaks on it: the upstream knows it
        by its id alone (the caller's credentials come with each request)."""
        return {"u": self.session_id, "w": self.version.name}

    async def _post(self, message: Message, what: str) -> Answer:
        content = jsonio.dumps(message)
        # A client span when exporting (app/tracing/); else the shared no-op.
        with tracing.upstream_call(message, self.version.name, self.session_id, self._url) as span:
            with library_errors(what):
                response = await self._send(content, span.headers(), resendable(message))
            span.answered(response.status_code)
        mark("answer_head")
        if response.status_code == 404 and self.session_id is not None:
            await _close(response)
            raise SessionExpired("upstream no longer knows the session")
        await _refuse_challenge(response, what)
        return response

    async def request(self, message: Message) -> HttpExchange:
        method = message.get("method")
        what = quoted(method)
        response = await self._post(message, what)
        if response.status_code >= 400 and _content_type(response) != "application/json":
            status = response.status_code
            await _close(response)
            raise UpstreamHttpError(f"upstream answered {what} with HTTP {status}", status)
        return HttpExchange(response, what, self._limit, spliced=method in SPLICED_METHODS)

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
        await self._post_expect_accepted(message, quoted(message.get("method")))

    async def respond(self, message: Message) -> None:
        await self._post_expect_accepted(message, "response to a server request")

    async def listen(self, last_event_id: str | None = None) -> HttpExchange:
        headers = {k: v for k, v in self._headers.items() if k != "content-type"}
        headers["accept"] = "text/event-stream"
        if last_event_id is not None:
            headers["last-event-id"] = last_event_id
        headers.update(tracing.outgoing_headers())
        timeouts = httpx.Timeout(None, connect=self._timeout.connect)
        with library_errors("GET stream"):
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
        with contextlib.suppress(UpstreamError), library_errors("DELETE"):
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

    def rejoin(
        self, state: Mapping[str, Any], authorization: str | None
    ) -> StreamableHttpSession | None:
        """A session another process opened (`StreamableHttpSession.shared_state`),
        spoken on with the caller's credentials; None: `state` names none."""
        session_id, version = state.get("u"), get_version(state.get("w"))
        if not isinstance(session_id, str | None) or version is None:
            return None
        headers = {"authorization": authorization} if authorization is not None else {}
        return StreamableHttpSession(
            self._client, self._url, headers, session_id, version, self._request_timeout_s
        )

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
                f"upstream negotiated protocol version {quoted(result.get('protocolVersion'))}, "
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
        with library_errors("metadata GET"):
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
