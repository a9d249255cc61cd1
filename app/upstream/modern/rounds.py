"""One legacy request to a modern upstream, and its input rounds (basic/patterns/mrtr).

The request is sent stateless (upgraded by the session). An
`InputRequiredResult` becomes real server-to-client requests: each
`inputRequests` entry is yielded on the call's exchange as
`elicitation/create`, `sampling/createMessage` or `roots/list` with an id of
the gateway's; the client's answers (`respond`) are gathered into
`inputResponses` and the request is sent again with them and the
`requestState`, for as many rounds as the server asks. The client sees one
call. An input request of a kind the client did not declare, an error answer,
or the exchange closed (the client went away) end the call: the upstream is
not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Mapping
from typing import Any, Protocol, TypeVar

from app.call import Message
from app.quoting import quoted
from app.upstream.errors import UpstreamError, UpstreamProtocolError
from app.upstream.modern.list_cache import CacheKey
from app.upstream.modern.upstream import ModernHttpUpstream
from app.upstream.streamable_http.transport import HttpExchange
from translators import translate
from translators.registry import Version

_T = TypeVar("_T")

INPUT_METHODS = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
# At most this many input rounds for one call: a server that never stops
# asking ends the call instead of holding it forever.
MAX_ROUNDS = 32


def _error(call_id: Any, code: int, message: str, data: Any = None) -> Message:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": call_id, "error": error}


class Asking(Protocol):
    """A request of a legacy client in flight on a modern upstream that may ask
    the client questions (`CallRounds`, a task's `tasks/result`): the client's
    answers and its cancellation reach it by the client's request id."""

    client_id: Any

    def answered(self, message: Message) -> None: ...

    async def cancel(self) -> None: ...


class RoundsSession(Protocol):
    """What a call's rounds need of the legacy session they run for
    (`ModernSession`, app/upstream/modern/session.py)."""

    modern: Version
    version: Version

    def upgrade(self, message: Message) -> Message: ...

    def headers_for(self, message: Message) -> dict[str, str]: ...

    async def param_headers(self, message: Message) -> dict[str, str]: ...

    async def still_modern(
        self, exchange: HttpExchange, answer: Message | None, request_id: object, method: str
    ) -> None: ...

    def listed(self, key: CacheKey, result: Message) -> None: ...

    def next_input_id(self, call: Asking) -> str: ...

    def forget(self, call: Asking) -> None: ...

    def declared(self, method: str) -> bool: ...


class CallRounds:
    """One legacy request sent stateless, and as many input rounds as it takes."""

    last_event_id: str | None = None

    def __init__(
        self,
        session: RoundsSession,
        upstream: ModernHttpUpstream,
        message: Message,
        cache_key: CacheKey | None = None,
    ) -> None:
        self._session = session
        self._upstream = upstream
        self._message = message
        self._cache_key = cache_key
        self.client_id = message.get("id")
        self._method = str(message.get("method"))
        self._exchange: HttpExchange | None = None
        self._answers: asyncio.Queue[Message] = asyncio.Queue()
        self._cancelled = False
        self._cancel = asyncio.Event()
        self._messages = self._run()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._messages

    async def cancel(self) -> None:
        self._cancelled = True
        self._cancel.set()

    async def _until_cancelled(self, exchange: HttpExchange) -> AsyncGenerator[Message, None]:
        """The exchange's messages until the client cancels: the read is raced
        against the cancellation, since closing a response another task reads
        does not wake that read. Leaving closes the upstream stream."""
        messages = aiter(exchange)
        while True:
            try:
                message = await self._or_cancelled(anext(messages))
            except StopAsyncIteration:
                return
            if message is None:
                return
            yield message

    async def _or_cancelled(self, step: Awaitable[_T]) -> _T | None:
        """`step`'s result, or None if the client cancels first (then `step` is
        cancelled, which closes the connection it was reading)."""
        task = asyncio.ensure_future(step)
        cancelled = asyncio.ensure_future(self._cancel.wait())
        try:
            await asyncio.wait({task, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        return None

    def answered(self, message: Message) -> None:
        self._answers.put_nowait(message)

    def _upgraded(self) -> Message:
        """The request in the upstream's version (a task call adds to it)."""
        return self._session.upgrade(self._message)

    async def _send(self, params_extra: Mapping[str, Any]) -> HttpExchange:
        message = self._upgraded()
        if params_extra:
            message = {**message, "params": {**(message.get("params") or {}), **params_extra}}
        headers = self._session.headers_for(message)
        if self._method == "tools/call":
            headers.update(await self._session.param_headers(message))
        exchange = await self._upstream.request(message, headers)
        self._exchange = exchange
        return exchange

    def _down(self, message: Message) -> Message | None:
        session = self._session
        if "method" in message:
            return translate.notification(message, session.modern, session.version)
        if "error" in message:
            error = translate.error(message["error"], session.modern, session.version, self._method)
            return {"jsonrpc": "2.0", "id": self.client_id, "error": error}
        result = translate.result(
            message.get("result") or {}, self._method, session.modern, session.version
        )
        return {"jsonrpc": "2.0", "id": self.client_id, "result": result}

    async def _run(self) -> AsyncGenerator[Message, None]:
        extra: dict[str, Any] = {}
        try:
            async with contextlib.aclosing(self._rounds(extra)) as messages:
                async for message in messages:
                    yield message
        except UpstreamError:
            if not self._cancelled:
                raise
            # Cancelled by the client: its stream was closed under the read.
        finally:
            self._session.forget(self)

    async def _rounds(self, extra: dict[str, Any]) -> AsyncGenerator[Message, None]:
        for _ in range(MAX_ROUNDS):
            # A modern server may hold the answer's headers until it has
            # something to say: the send itself is raced against a cancel.
            exchange = await self._or_cancelled(self._send(extra))
            if exchange is None:
                return
            final: Message | None = None
            try:
                # Closed here when the answer ends the loop, not later by the
                # loop's finalizer hook in a task of its own.
                async with contextlib.aclosing(self._until_cancelled(exchange)) as messages:
                    async for message in messages:
                        if "method" in message and "id" not in message:
                            note = self._down(message)
                            if note is not None:
                                yield note
                        elif "method" not in message:
                            final = message
                            break
            finally:
                await exchange.aclose(drain=final is not None)
                self._exchange = None
            if self._cancelled:
                return
            await self._session.still_modern(exchange, final, self.client_id, self._method)
            if final is None:
                raise UpstreamProtocolError(
                    f"upstream closed the {quoted(self._method)} stream without answering"
                )
            result = final.get("result")
            if not (isinstance(result, dict) and result.get("resultType") == "input_required"):
                if self._cache_key is not None and not extra and isinstance(result, dict):
                    self._session.listed(self._cache_key, result)
                answer = self._down(final)
                if answer is not None:
                    yield answer
                return
            # basic/patterns/mrtr: ask the client, gather, retry with the answers.
            gathered: dict[str, Any] = {}
            refusal: Message | None = None
            asked = self._ask(result.get("inputRequests") or {}, gathered)
            async with contextlib.aclosing(asked) as items:
                async for item in items:
                    if "error" in item and item.get("id") == self.client_id:
                        refusal = item
                        break
                    yield item
            if refusal is not None:
                yield refusal
                return
            extra = {"inputResponses": gathered}
            if isinstance(result.get("requestState"), str):
                extra["requestState"] = result["requestState"]
        yield _error(
            self.client_id,
            -32603,
            f"the upstream asked for input more than {MAX_ROUNDS} times; the call was ended",
        )

    async def _ask(
        self, requests: Mapping[str, Any], gathered: dict[str, Any]
    ) -> AsyncGenerator[Message, None]:
        """Yield the round's input requests as server requests, then wait for every
        answer; an error message for the client (with its id) ends the call."""
        session = self._session
        waiting: dict[str, str] = {}
        for key, request in requests.items():
            method = request.get("method") if isinstance(request, dict) else None
            if not isinstance(method, str) or not session.declared(method):
                kind = INPUT_METHODS.get(str(method), str(method))
                yield _error(
                    self.client_id,
                    -32603,
                    f"The upstream needs the client's {kind} capability to answer this request, "
                    "and the client did not declare it at initialize",
                    {"requiredCapability": kind},
                )
                return
            ident = session.next_input_id(self)
            waiting[ident] = key
            legacy = translate.request(
                {"jsonrpc": "2.0", "id": ident, "method": method, "params": request.get("params")},
                session.modern,
                session.version,
            )
            yield legacy
        while waiting:
            answer = await self._answers.get()
            key_of = waiting.pop(answer.get("id"), None)  # type: ignore[arg-type]
            if key_of is None:
                continue
            if "error" in answer or not isinstance(answer.get("result"), dict):
                err = answer.get("error") if isinstance(answer.get("error"), dict) else {}
                yield _error(
                    self.client_id,
                    -32603,
                    "The client answered the upstream's input request with an error; "
                    "the call was ended",
                    {"inputKey": key_of, "clientError": err},
                )
                return
            method = requests[key_of]["method"]
            gathered[key_of] = translate.result(
                answer["result"], method, session.version, session.modern
            )

    async def aclose(self, drain: bool = False) -> None:
        # The client went away or the front is done: nothing is retried.
        self._cancelled = True
        self._cancel.set()
        if self._exchange is not None:
            with contextlib.suppress(Exception):
                await self._exchange.aclose()
        with contextlib.suppress(Exception):
            await self._messages.aclose()
        self._session.forget(self)
