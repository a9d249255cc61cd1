"""The aggregate's endpoint answering the top-level `/mcp` graph in the
graph's own task: no ASGI call, no task, no queue between them.

The top-level graph's pass-through (app/fronts/modern/passthrough.py) and its
translating path read the endpoint's answer through the `Answer` interface
(app/upstream/httpclient/interface.py). Here that answer is made from the
aggregator's (aggregator.py) directly: the same status, headers and bytes the
endpoint's ASGI app (endpoint.py) sends, the same refusals, the same limit on
the answer's size. The caller's disconnect cancels the graph's task
(app/connection/held.py), which is awaiting this answer: the member's stream
is closed by `aclose` as the endpoint's own watch would close it.
`subscriptions/listen`, a stream that lasts, stays the endpoint app's, called
in process (loopback.py). bench/aggregate.py measures the CPU per call.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Final

from multidict import CIMultiDict, CIMultiDictProxy

from app import jsonio
from app.call import Message
from app.rejections import INTERNAL_ERROR, Rejection
from app.servers.aggregate.aggregator import Streamed, Whole
from app.servers.aggregate.endpoint import Endpoint, request_of, sse_event
from app.servers.aggregate.members import is_final
from app.upstream.errors import UpstreamUnavailable, too_large

_SSE: Final = (("content-type", "text/event-stream"), ("cache-control", "no-cache"))


class InPlaceAnswer:
    """An `Answer` of bytes at hand or of a member's renamed stream as SSE events."""

    def __init__(
        self,
        status: int,
        headers: tuple[tuple[str, str], ...],
        limit: int,
        body: bytes = b"",
        streamed: Streamed | None = None,
        first: Message | None = None,
    ) -> None:
        self.status_code = status
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict(headers))
        self.is_closed = False
        self._limit = limit
        self._body = body
        self._streamed = streamed
        self._first = first
        self._read = 0

    def _counted(self, chunk: bytes) -> bytes:
        self._read += len(chunk)
        if self._read > self._limit:
            raise too_large(self._limit, "the member's answer")
        return chunk

    async def aread(self) -> bytes:
        body = bytearray()
        async for chunk in self.aiter_bytes():
            body += chunk
        return bytes(body)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        if self.is_closed:
            return
        if self._streamed is None:
            self.is_closed = True
            if self._body:
                yield self._counted(self._body)
            return
        if self._first is not None:
            first, self._first = self._first, None
            yield self._counted(sse_event(first))
        messages = self._streamed.messages
        while True:
            try:
                message = await anext(messages, None)
            except Exception as exc:
                raise UpstreamUnavailable(
                    f"the member's route failed: {type(exc).__name__}"
                ) from exc
            if message is None:
                break
            yield self._counted(sse_event(message))
            if is_final(message):
                break
        self.is_closed = True

    async def aclose(self) -> None:
        self.is_closed = True
        streamed, self._streamed = self._streamed, None
        if streamed is not None:
            closer = getattr(streamed.messages, "aclose", None)
            with contextlib.suppress(Exception):
                if closer is not None:
                    await closer()
                await streamed.aclose()


def _whole(status: int, message: Message, limit: int) -> InPlaceAnswer:
    body = jsonio.dumps(message)
    headers = (("content-type", "application/json"), ("content-length", str(len(body))))
    return InPlaceAnswer(status, headers, limit, body=body)


async def answer_in_place(
    endpoint: Endpoint, body: bytes, headers: Mapping[str, str], limit: int
) -> InPlaceAnswer | None:
    """The endpoint's answer to a POST of `body`; None for `subscriptions/listen`."""
    message = request_of(body, endpoint.max_body_bytes)
    if isinstance(message, Rejection):
        return _whole(message.http_status, message.to_message(), limit)
    if "id" not in message:  # a notification: nothing of it reaches a member
        return InPlaceAnswer(202, (), limit)
    if message["method"] == "subscriptions/listen":
        return None
    try:
        answered = await endpoint.aggregator.answer(message, headers)
    except Exception as exc:
        raise UpstreamUnavailable(f"the route failed: {type(exc).__name__}") from exc
    if isinstance(answered, Whole):
        return _whole(answered.status, answered.message, limit)
    return await _first_of(answered, limit)


async def _first_of(answered: Streamed, limit: int) -> InPlaceAnswer:
    """A member's answer as one JSON body when its first message is its
    result, else as SSE from that first message on (endpoint.py `_stream`)."""
    streaming = False
    try:
        first = await anext(answered.messages, None)
        if first is None:  # `_renamed` always ends with a response: not expected
            refused = Rejection(INTERNAL_ERROR, "the server's answer ended empty", status=502)
            return _whole(refused.http_status, refused.to_message(), limit)
        if is_final(first):
            return _whole(200, first, limit)
        streaming = True
        return InPlaceAnswer(200, _SSE, limit, streamed=answered, first=first)
    except Exception as exc:
        raise UpstreamUnavailable(f"the route failed: {type(exc).__name__}") from exc
    finally:
        if not streaming:
            await answered.aclose()
