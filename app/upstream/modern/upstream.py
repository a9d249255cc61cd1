"""Modern (2026-07-28) Streamable HTTP toward the upstream server.

A modern server keeps no session: every request is one POST carrying its own
`_meta` (protocol version, client capabilities) and the standard headers
(`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`), answered by
one JSON body or one SSE stream (basic/transports/streamable-http). So this
side of the upstream seam has two uses:

- `post`: a modern client's request, as it came, its answer handed back
  unparsed (`ModernResponse`): the pass-through path (app/fronts/modern/passthrough.py);
- `request`: a message the gateway built (the era probe's `server/discover`,
  a legacy client's request made stateless by app/upstream/modern/session.py),
  its answer parsed into messages (`HttpExchange`, as for a legacy upstream).

Its requests go through `UpstreamClient` (app/upstream/httpclient/client.py),
their answers are `Answer`s (app/upstream/httpclient/interface.py), whichever library
carried them; library exceptions become the gateway's errors in each adapter's
`upstream_error`, applied by `http.client.library_errors`.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping

import httpx

from app import jsonio, tracing
from app.call import Message
from app.headers.header_values import NAME_FIELDS, header_form
from app.quoting import quoted
from app.upstream.errors import UpstreamHttpError, too_large
from app.upstream.httpclient.client import UpstreamClient, library_errors
from app.upstream.httpclient.interface import Answer
from app.upstream.streamable_http.transport import (
    SPLICED_METHODS,
    HttpExchange,
    _content_type,
    _refuse_challenge,
)

VERSION_HEADER = "mcp-protocol-version"
# What a modern client's request carries that the upstream needs (2026-07-28
# streamable-http "Request Metadata", basic/authorization), passed on as it came.
PASSED_HEADERS = frozenset(
    {"mcp-protocol-version", "mcp-method", "mcp-name", "authorization", "accept"}
)
PARAM_PREFIX = "mcp-param-"
# What the upstream's answer carries that the client needs.
RELAYED_HEADERS = frozenset({"content-type", "cache-control", "www-authenticate"})
_ACCEPT = "application/json, text/event-stream"


def passed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's headers the upstream gets; tracing headers only when valid
    (app/tracing/), everything else (Host, Origin, cookies) stays here."""
    out = {
        k.lower(): v
        for k, v in headers.items()
        if k.lower() in PASSED_HEADERS or k.lower().startswith(PARAM_PREFIX)
    }
    out.setdefault("accept", _ACCEPT)
    out["content-type"] = "application/json"
    out.update(tracing.outgoing_headers())
    return out


def header_value(value: str) -> str:
    """A value for Mcp-Name: as it is when it is visible ASCII, else the
    Base64 sentinel form (2026-07-28 streamable-http "Request Metadata")."""
    if all(0x20 <= ord(ch) <= 0x7E for ch in value) and value == value.strip():
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def standard_headers(message: Message, version: str) -> dict[str, str]:
    """The headers a modern request must carry, derived from its body."""
    method = str(message.get("method"))
    out = {VERSION_HEADER: version, "mcp-method": method}
    field = NAME_FIELDS.get(method)
    params = message.get("params")
    if field is not None and isinstance(params, dict):
        name = header_form(params.get(field))
        if name is not None:
            out["mcp-name"] = header_value(name)
    return out


class ModernResponse:
    """The upstream's answer to a passed-through request, not parsed: its status,
    the headers the client gets, and its body as it streams."""

    def __init__(self, response: Answer, limit: int) -> None:
        self._response = response
        # MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES, of the decoded body.
        self.limit = limit
        self.status = response.status_code
        self.content_type = _content_type(response)
        self.headers = [
            (k.lower(), v) for k, v in response.headers.items() if k.lower() in RELAYED_HEADERS
        ]

    # Decoded bytes (`aiter_bytes`), never the raw ones: the request offered
    # gzip and deflate (the client's Accept-Encoding) and Content-Encoding is not
    # relayed, so a compressing upstream's raw body would reach the client as
    # undecodable JSON (tests/unit/upstream/test_passthrough_encoding.py).

    async def read(self, limit: int) -> bytes | None:
        """The whole body, decoded, if it is at most `limit` bytes, else None."""
        body = bytearray()
        with library_errors("reading the answer"):
            async for chunk in self._response.aiter_bytes():
                body += chunk
                if len(body) > limit:
                    return None
        return bytes(body)

    def announced_too_large(self) -> bool:
        """The answer's Content-Length is over the limit (its encoded size: the
        decoded one is larger still)."""
        length = self._response.headers.get("content-length", "")
        return length.isdigit() and int(length) > self.limit

    async def chunks(self) -> AsyncIterator[bytes]:
        """The decoded body as it comes; `UpstreamAnswerTooLarge` past the limit."""
        size = 0
        with library_errors("streaming the answer"):
            async for chunk in self._response.aiter_bytes():
                size += len(chunk)
                if size > self.limit:
                    raise too_large(self.limit, "the passed-through request")
                yield chunk

    async def aclose(self) -> None:
        # Closing the stream is how a modern client cancels (streamable-http
        # "Cancellation"): the upstream sees the connection go.
        await self._response.aclose()


class ModernHttpUpstream:
    def __init__(
        self,
        client: UpstreamClient,
        url: str,
        *,
        request_timeout_s: float,
        legacy_tasks_per_session: int = 100,
    ) -> None:
        self._client = client
        # MCP_SHIM_LEGACY_TASKS_PER_SESSION: the tasks a legacy session's record keeps.
        self.legacy_tasks_per_session = legacy_tasks_per_session
        self.url = url
        self._parsed_url = httpx.URL(url)
        self._timeout = httpx.Timeout(request_timeout_s, connect=client.connect_timeout)
        # A listen stream is quiet for as long as nothing changes.
        self._long_timeout = httpx.Timeout(None, connect=client.connect_timeout)

    async def post(
        self, body: bytes, headers: Mapping[str, str], *, long_lived: bool = False
    ) -> ModernResponse:
        """POST a request as it is; 401/403 come back as an answer, like any status."""
        timeouts = self._long_timeout if long_lived else self._timeout
        method = headers.get("mcp-method")
        # A client span when exporting (app/tracing/): its traceparent replaces the call's.
        traced = tracing.upstream_call(
            {"method": method}, headers.get(VERSION_HEADER), None, self._parsed_url
        )
        if traced is not tracing.OFF:
            headers = {**headers, **traced.headers()}
        with traced, library_errors(str(method)):
            response = await self._client.open_stream(
                "POST", self._parsed_url, headers, body, timeouts
            )
            traced.answered(response.status_code)
        return ModernResponse(response, self._client.max_answer_bytes)

    async def request(
        self, message: Message, headers: Mapping[str, str], *, long_lived: bool = False
    ) -> HttpExchange:
        """POST a message the gateway built; its answer as messages. A 401/403
        raises `UpstreamAuthChallenge`, any other non-JSON error `UpstreamHttpError`."""
        method = message.get("method")
        what = quoted(method)
        content = jsonio.dumps(message)
        traced = tracing.upstream_call(message, headers.get(VERSION_HEADER), None, self._parsed_url)
        sent = {
            "accept": _ACCEPT,
            "content-type": "application/json",
            **headers,
            **traced.headers(),
        }
        response: Answer
        with traced, library_errors(what):
            if long_lived:
                # A listen keeps its connection as long as its client: never
                # one of the POSTs' pool.
                response = await self._client.open_stream(
                    "POST", self._parsed_url, sent, content, self._long_timeout
                )
            else:
                # The era probe and a legacy client's stateless requests: as a
                # session's one-off requests (on h1 when it is the POSTs' stack).
                response = await self._client.one_off(
                    b"POST", self._parsed_url, sent, content, self._timeout
                )
            traced.answered(response.status_code)
        await _refuse_challenge(response, what)
        if response.status_code >= 400 and _content_type(response) != "application/json":
            status = response.status_code
            await response.aclose()
            raise UpstreamHttpError(f"upstream answered {what} with HTTP {status}", status)
        spliced = method in SPLICED_METHODS
        return HttpExchange(response, what, self._client.max_answer_bytes, spliced=spliced)
