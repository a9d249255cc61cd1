"""A member's named route called in this process: its ASGI app handed the
request, no socket, no HTTP parsing either way.

The aggregate asks each member at `/servers/NAME/mcp` (members.py). Over
loopback HTTP that is a client request and a server request more per call;
here the member's own app (app/servers/registry.py) is called with the
request's scope, its answer's body handed over chunk by chunk as the app
sends it, and read by the same `HttpExchange` as an HTTP answer (JSON or SSE,
the answer bound). Closing the exchange is the caller's disconnect: the
member's app sees `http.disconnect` and ends the call (2026-07-28
streamable-http "Cancellation"), then its task is awaited. bench/aggregate.py
measures the CPU per call both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, MutableMapping
from typing import Any, Final

import structlog
from multidict import CIMultiDict, CIMultiDictProxy
from starlette.types import ASGIApp, Receive, Scope, Send

from app import jsonio, tracing
from app.call import Message
from app.connection.link import LINK, ConnectionLink
from app.quoting import quoted
from app.upstream.errors import (
    UpstreamAuthChallenge,
    UpstreamHttpError,
    UpstreamUnavailable,
    too_large,
)
from app.upstream.streamable_http.transport import SPLICED_METHODS, HttpExchange

_ACCEPT: Final = "application/json, text/event-stream"


class _Unpaused:
    """The flow of an answer handed over in process: a send never waits."""

    write_paused = False


_UNPAUSED: Final = _Unpaused()


class InProcessAnswer:
    """An `Answer` (app/upstream/httpclient/interface.py) fed by an ASGI app's sends."""

    def __init__(
        self,
        run: asyncio.Task[None],
        chunks: asyncio.Queue[bytes | BaseException | None],
        limit: int,
        link: ConnectionLink,
    ) -> None:
        self._run = run
        self._chunks = chunks
        self._link = link
        self._limit = limit
        self._read = 0
        self.status_code = 0
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
        self.is_closed = False
        self.gone = asyncio.Event()  # the caller's disconnect, for the app's receive

    async def _next(self) -> bytes:
        chunk = await self._chunks.get()  # None: the body's end
        if isinstance(chunk, BaseException):
            raise UpstreamUnavailable(f"the member's route failed: {type(chunk).__name__}")
        if chunk is None:
            self.is_closed = True
            return b""
        self._read += len(chunk)
        if self._read > self._limit:
            raise too_large(self._limit, "the member's answer")
        return chunk

    async def aread(self) -> bytes:
        body = bytearray()
        while not self.is_closed:
            body += await self._next()
        return bytes(body)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        while not self.is_closed:
            chunk = await self._next()
            if chunk:
                yield chunk

    async def aclose(self) -> None:
        self.is_closed = True
        self.gone.set()
        self._link.connection_lost()
        if not self._run.done():
            # The app got its disconnect; a call that does not end on it is cut.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await asyncio.shield(self._run)
        if not self._run.done():
            self._run.cancel()
        with contextlib.suppress(BaseException):
            await self._run


def post_scope(path: str, root_path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """An ASGI scope of a POST to `path`, as the gateway's HTTP server makes one."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("latin-1"),
        "root_path": root_path,
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 0),
        "server": None,
    }


async def call_app(app: ASGIApp, scope: dict[str, Any], body: bytes, limit: int) -> InProcessAnswer:
    """`app` handed one request in a task of its own: its answer once its
    status and headers are sent, the body following as the app sends it."""
    # The app told of the caller's disconnect by a callback, not a task awaiting
    # `receive()`; its body read and its sends untimed, as they cannot wait
    # (app/connection/link.py; bench/aggregate.py measures the CPU per call).
    link = ConnectionLink(_UNPAUSED)
    link.body_complete = True
    scope = {**scope, "extensions": {**(scope.get("extensions") or {}), LINK: link}}
    chunks: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
    started = asyncio.get_running_loop().create_future()
    delivered = False
    answer: InProcessAnswer

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answer.gone.wait()
        return {"type": "http.disconnect"}

    async def send(event: MutableMapping[str, Any]) -> None:
        if event["type"] == "http.response.start":
            found: CIMultiDict[str] = CIMultiDict()
            for k, v in event.get("headers", ()):
                found.add(k.decode("latin-1"), v.decode("latin-1"))
            answer.status_code = event["status"]
            answer.headers = CIMultiDictProxy(found)
            if not started.done():
                started.set_result(None)
        elif event["type"] == "http.response.body":
            chunk = bytes(event.get("body", b""))
            if chunk:
                chunks.put_nowait(chunk)
            if not event.get("more_body", False):
                chunks.put_nowait(None)

    async def run() -> None:
        try:
            await app(scope, receive, send)
        except BaseException as exc:
            chunks.put_nowait(exc)
            if not started.done():
                started.set_exception(
                    UpstreamUnavailable(f"the route failed: {type(exc).__name__}")
                )
            raise
        chunks.put_nowait(None)
        if not started.done():
            started.set_exception(UpstreamUnavailable("the route answered nothing"))

    answer = InProcessAnswer(asyncio.create_task(run()), chunks, limit, link)
    try:
        await started
    except BaseException:
        await answer.aclose()
        raise
    return answer


class InProcessLink:
    """A member's route as a `Link` (members.py): its app, called in place."""

    def __init__(self, name: str, app: ASGIApp, host: str, max_answer_bytes: int) -> None:
        self._name = name
        self._app = app
        self._root_path = f"/servers/{name}"
        self._host = host.encode("latin-1")
        self._limit = max_answer_bytes

    async def _member_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The member's log lines name it, as on its route (app/servers/app.py).
        structlog.contextvars.bind_contextvars(server=self._name)
        await self._app(scope, receive, send)

    async def request(
        self, message: Message, headers: Mapping[str, str], *, long_lived: bool = False
    ) -> HttpExchange:
        method = message.get("method")
        raw = [
            (b"host", self._host),
            (b"accept", _ACCEPT.encode()),
            (b"content-type", b"application/json"),
        ]
        sent = {**headers, **tracing.outgoing_headers()}
        raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in sent.items()]
        scope = post_scope("/mcp", self._root_path, raw)
        answer = await call_app(self._member_app, scope, jsonio.dumps(message), self._limit)
        return await _checked(answer, quoted(method), method in SPLICED_METHODS, self._limit)


async def _checked(answer: InProcessAnswer, what: str, spliced: bool, limit: int) -> HttpExchange:
    """The answer as messages; its status refused as an HTTP answer's would be."""
    status = answer.status_code
    kind = answer.headers.get("content-type", "").partition(";")[0].strip().lower()
    if status in (401, 403):
        challenge = answer.headers.get("www-authenticate")
        await answer.aclose()
        raise UpstreamAuthChallenge(
            f"the member answered {what} with HTTP {status}", status, challenge
        )
    if status >= 400 and kind != "application/json":
        await answer.aclose()
        raise UpstreamHttpError(f"the member answered {what} with HTTP {status}", status)
    return HttpExchange(answer, what, limit, spliced=spliced)
