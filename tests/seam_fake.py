"""A scripted upstream behind the seam of app/upstream/base.py, for unit tests of
what sits above it (the gateway, the MRTR bridge, the legacy front, the modern
session).

A `Script` says, per JSON-RPC method, what the upstream answers each time that
method is requested: a list of steps played on the request's exchange, in
order, or an exception raised by `request` itself (the request never ran, as
for `SessionExpired`). The last answer of a method repeats. A step is:

- a message: a notification, a server request (`server_request`), or the
  response (`result` / `error`, whose id becomes the request's);
- a callable of the `Play` (the request as sent, the replies received so far)
  returning a message: a progress notification carrying the request's token,
  a result built from the gateway's reply;
- `Stall(seconds)`: the upstream says nothing for that long (a slow tool);
- `AwaitReply()`: the upstream waits for the gateway's response to the server
  request it sent last (`Session.respond`), within a bound;
- an exception: the exchange breaks there (`UpstreamUnavailable` mid-stream).

`ScriptedTransport` is the legacy seam (`Transport` / `Session` / `Exchange`);
`ScriptedModernUpstream` is what `ModernSession` talks to (a modern server's
`request(message, headers)`). Both record everything the code above them sent:
requests, notifications, responses, initializes, so a test can say what went
upstream and how many times.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.call import Message
from app.upstream.errors import SessionExpired

# Stands for the id of the request being answered.
REQUEST_ID = object()


@dataclass(frozen=True)
class AwaitReply:
    """Wait for the gateway's response to the server request yielded last."""

    timeout_s: float = 10.0


@dataclass(frozen=True)
class Stall:
    """The upstream is slow: nothing on the stream for `seconds`, then the next step."""

    seconds: float = 3600.0


@dataclass
class Play:
    """What a callable step sees: the request as it arrived, and every response
    the gateway sent to this exchange's server requests, by their id."""

    request: Message
    replies: dict[Any, Message]
    headers: Mapping[str, str] = field(default_factory=dict)


Step = Message | Callable[[Play], Message] | AwaitReply | Stall | BaseException
Answer = Sequence[Step] | BaseException


def result(value: Mapping[str, Any]) -> Message:
    return {"jsonrpc": "2.0", "id": REQUEST_ID, "result": dict(value)}


def error(code: int, message: str, data: Any = None) -> Message:
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": REQUEST_ID, "error": body}


def notification(method: str, params: Mapping[str, Any] | None = None) -> Message:
    return {"jsonrpc": "2.0", "method": method, "params": dict(params or {})}


_server_ids = itertools.count(1)


def server_request(method: str, params: Mapping[str, Any], ident: Any = None) -> Message:
    """A request of the upstream to its client (elicitation/create, sampling, roots, ping)."""
    return {
        "jsonrpc": "2.0",
        "id": ident if ident is not None else f"srv-{next(_server_ids)}",
        "method": method,
        "params": dict(params),
    }


def text_result(text: str) -> Message:
    return result({"content": [{"type": "text", "text": text}], "isError": False})


class Script:
    """Answers by method; each request of a method takes the next one, the last repeats."""

    def __init__(self, answers: Mapping[str, Answer] | None = None) -> None:
        self._answers: dict[str, list[Answer]] = {}
        self._taken: dict[str, int] = {}
        for method, answer in (answers or {}).items():
            self.on(method, answer)

    def on(self, method: str, *answers: Answer) -> Script:
        """Each of `answers` answers one request of `method`, in turn (a list of
        steps, or an exception `request` raises); the last one repeats."""
        self._answers[method] = list(answers)
        self._taken[method] = 0
        return self

    def next(self, method: str) -> Answer:
        answers = self._answers.get(method)
        if not answers:
            return [error(-32601, f"Method not found: {method} (not in the script)")]
        taken = self._taken[method]
        self._taken[method] = taken + 1
        return answers[min(taken, len(answers) - 1)]


@dataclass
class Sent:
    """One message the code under test sent upstream."""

    kind: str  # "request" | "notify" | "respond" | "listen"
    session: int  # serial of the session (0 for the modern upstream)
    message: Message
    headers: Mapping[str, str] = field(default_factory=dict)
    # Refused before it ran: an expired session's 404, or an exception scripted
    # in place of the answer (the handler never ran).
    refused: bool = False


class Recorder:
    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.exchanges: list[ScriptedExchange] = []

    def requests(self, method: str | None = None) -> list[Message]:
        return [
            s.message
            for s in self.sent
            if s.kind == "request" and (method is None or s.message.get("method") == method)
        ]

    def sent_requests(self, method: str) -> list[Sent]:
        return [s for s in self.sent if s.kind == "request" and s.message.get("method") == method]

    def ran(self, method: str) -> list[Sent]:
        """The requests of `method` that reached the upstream's handler."""
        return [s for s in self.sent_requests(method) if not s.refused]

    def notifications(self, method: str | None = None) -> list[Message]:
        return [
            s.message
            for s in self.sent
            if s.kind == "notify" and (method is None or s.message.get("method") == method)
        ]

    def responses(self) -> list[Message]:
        return [s.message for s in self.sent if s.kind == "respond"]

    def methods(self) -> list[str]:
        return [str(s.message.get("method")) for s in self.sent if s.kind == "request"]


class ScriptedExchange:
    """One request's answer stream, played from its script."""

    def __init__(
        self,
        steps: Sequence[Step],
        request: Message,
        replies: dict[Any, asyncio.Future[Message]],
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.last_event_id: str | None = None
        self.status = 200  # what ModernSession reads of an HTTP answer
        self.request = request
        self.closed = False
        self.drained: bool | None = None
        self._steps = list(steps)
        self._replies = replies
        self._headers = dict(headers or {})
        self._iterator: AsyncIterator[Message] | None = None

    def __aiter__(self) -> AsyncIterator[Message]:
        if self._iterator is None:
            self._iterator = self._play()
        return self._iterator

    async def _play(self) -> AsyncIterator[Message]:
        play = Play(self.request, {}, self._headers)
        last_asked: Any = None
        for step in self._steps:
            if self.closed:
                return
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, Stall):
                await asyncio.sleep(step.seconds)
                continue
            if isinstance(step, AwaitReply):
                assert last_asked is not None, "AwaitReply needs a server request before it"
                future = self._replies[last_asked]
                async with asyncio.timeout(step.timeout_s):
                    play.replies[last_asked] = await future
                continue
            message = step(play) if callable(step) else step
            message = dict(message)
            if message.get("id") is REQUEST_ID:
                message["id"] = self.request.get("id")
            if "method" in message and "id" in message:
                last_asked = message["id"]
                self._replies.setdefault(last_asked, asyncio.get_running_loop().create_future())
            yield message

    async def aclose(self, drain: bool = False) -> None:
        self.closed = True
        self.drained = drain


class ScriptedListen:
    """A session's GET stream: what the test pushes, until closed."""

    def __init__(self) -> None:
        self.last_event_id: str | None = None
        self._queue: asyncio.Queue[Message | None] = asyncio.Queue()
        self.closed = False

    def push(self, message: Message) -> None:
        self._queue.put_nowait(message)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._read()

    async def _read(self) -> AsyncIterator[Message]:
        while True:
            message = await self._queue.get()
            if message is None:
                return
            yield message

    async def aclose(self, drain: bool = False) -> None:
        self.closed = True
        self._queue.put_nowait(None)


class ScriptedSession:
    """One upstream session (`app.upstream.base.Session`)."""

    def __init__(self, serial: int, transport: ScriptedTransport) -> None:
        self.serial = serial
        self.session_id: str | None = f"scripted-{serial}"
        self.expired = False
        self.closed = False
        self.streams: list[ScriptedListen] = []
        self._transport = transport
        self._replies: dict[Any, asyncio.Future[Message]] = {}

    def _check(self) -> None:
        if self.expired:
            raise SessionExpired(f"scripted session {self.serial} expired (404)")

    async def request(self, message: Message) -> ScriptedExchange:
        record = self._transport.record
        sent = Sent("request", self.serial, message, refused=self.expired)
        record.sent.append(sent)
        self._check()
        answer = self._transport.script.next(str(message.get("method")))
        if isinstance(answer, BaseException):
            sent.refused = True
            raise answer
        exchange = ScriptedExchange(answer, message, self._replies)
        record.exchanges.append(exchange)
        return exchange

    async def notify(self, message: Message) -> None:
        self._transport.record.sent.append(Sent("notify", self.serial, message))
        self._check()

    async def respond(self, message: Message) -> None:
        self._transport.record.sent.append(Sent("respond", self.serial, message))
        self._check()
        future = self._replies.setdefault(
            message.get("id"), asyncio.get_running_loop().create_future()
        )
        if not future.done():
            future.set_result(message)

    async def listen(self, last_event_id: str | None = None) -> ScriptedListen:
        self._check()
        stream = ScriptedListen()
        self.streams.append(stream)
        return stream

    async def close(self) -> None:
        self.closed = True
        for stream in self.streams:
            await stream.aclose()


class ScriptedTransport:
    """The legacy seam (`app.upstream.base.Transport`), answering from a script."""

    def __init__(
        self,
        script: Script | None = None,
        *,
        version: str = "2025-11-25",
        capabilities: Mapping[str, Any] | None = None,
        server_info: Mapping[str, Any] | None = None,
        instructions: str | None = None,
        open_error: BaseException | None = None,
    ) -> None:
        self.script = script if script is not None else Script()
        self.record = Recorder()
        self.sessions: list[ScriptedSession] = []
        self.initializes: list[Message] = []
        self.init_headers: list[Mapping[str, str]] = []
        self.version = version
        self.capabilities = dict(capabilities if capabilities is not None else {"tools": {}})
        self.server_info = dict(server_info or {"name": "scripted", "version": "1.0"})
        self.instructions = instructions
        self.open_error = open_error
        self.closed = False

    async def open_session(
        self, initialize: Message, headers: Mapping[str, str]
    ) -> tuple[ScriptedSession, Message]:
        self.initializes.append(initialize)
        self.init_headers.append(dict(headers))
        if self.open_error is not None:
            raise self.open_error
        session = ScriptedSession(len(self.sessions) + 1, self)
        self.sessions.append(session)
        init: Message = {
            "protocolVersion": self.version,
            "capabilities": self.capabilities,
            "serverInfo": self.server_info,
        }
        if self.instructions is not None:
            init["instructions"] = self.instructions
        return session, init

    def expire_sessions(self) -> None:
        """The upstream forgot every session it gave (it restarted): 404 from now on."""
        for session in self.sessions:
            session.expired = True

    async def aclose(self) -> None:
        self.closed = True


class ScriptedModernUpstream:
    """A modern (2026-07-28) server as `ModernSession` meets it: stateless
    requests, each with its own headers (`ModernHttpUpstream.request`)."""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script if script is not None else Script()
        self.record = Recorder()
        self.url = "http://scripted.invalid/mcp"
        self._replies: dict[Any, asyncio.Future[Message]] = {}

    async def request(
        self, message: Message, headers: Mapping[str, str], *, long_lived: bool = False
    ) -> ScriptedExchange:
        sent = Sent("request", 0, message, dict(headers))
        self.record.sent.append(sent)
        answer = self.script.next(str(message.get("method")))
        if isinstance(answer, BaseException):
            sent.refused = True
            raise answer
        exchange = ScriptedExchange(answer, message, self._replies, headers)
        self.record.exchanges.append(exchange)
        return exchange


async def drain(iterable: Any) -> list[Any]:
    """Everything an async iterator yields, closing it at the end."""
    out: list[Any] = []
    iterator = aiter(iterable)
    try:
        async for item in iterator:
            out.append(item)
    finally:
        closing = getattr(iterator, "aclose", None)
        if closing is not None:
            await closing()
    return out
