"""Legacy clients (2024-11-05 .. 2025-11-25) on the gateway's endpoint.

The second client-side front, beside the modern one (app/fronts/modern/checks.py and
app/fronts/modern/gateway.py); both meet the same upstream seam (app/upstream/base.py). A
legacy client's session is the gateway's (app/fronts/legacy/sessions.py), with one
upstream session of its own behind it; every message is translated between
the client's negotiated version and the upstream session's with the
translator chain, both ways, so a legacy client sees only what its revision
defines. Everything goes through `Session` (request, notify, respond,
listen, close): nothing here knows the upstream's transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

import structlog
from starlette.responses import Response

from app import auth, jsonio
from app.auth import AuthRelay
from app.call import Outgoing
from app.fronts.legacy import checks as front
from app.fronts.legacy.sessions import LegacySession, LegacySessions
from app.fronts.shared.answer import CallAnswer, sse_event
from app.metrics import Metrics
from app.rejections import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, Rejection, RequestId
from app.replicas import HOP_HEADER, ReplicaRelay, header_items
from app.upstream.base import Exchange, Message
from app.upstream.errors import (
    PoolExhausted,
    SessionExpired,
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamHttpError,
)
from translators import translate
from translators.registry import Version

log = structlog.get_logger("mcp_shim.legacy")


def _json(message: Message, status: int, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        jsonio.dumps(message), status_code=status, media_type="application/json", headers=headers
    )


def _json_list(messages: list[Message]) -> Response:
    return Response(jsonio.dumps(messages), status_code=200, media_type="application/json")


def refuse(rejection: Rejection, headers: Mapping[str, str] | None = None) -> Response:
    log.info("request_rejected", era="legacy", code=rejection.code, status=rejection.http_status)
    return _json(front.error_message(rejection), rejection.http_status, headers)


@dataclasses.dataclass(frozen=True, slots=True)
class AtLimit(Rejection):
    """A refusal at one of the gateway's bounds (429, 503), with the seconds after
    which a retry may find room: the answer's Retry-After."""

    retry_after_s: int = 1


def _internal_error(request_id: RequestId | None) -> Rejection:
    return Rejection(
        INTERNAL_ERROR,
        "Internal error: the gateway failed to serve the request",
        request_id,
        status=500,
    )


def auth_refusal(
    exc: UpstreamAuthChallenge,
    request_id: RequestId | None,
    gateway_url: str | None,
    relay: AuthRelay | None,
) -> tuple[Rejection, tuple[tuple[str, str], ...]]:
    """An upstream 401/403 as the modern front relays it (app/auth.py): the same
    status and its challenge, `resource_metadata` naming the gateway, so an
    OAuth-capable legacy client starts its flow against the gateway."""
    log.info("upstream_auth_refused", era="legacy", status=exc.status)
    if relay is not None:
        relay.note(exc.www_authenticate)
    return auth.refusal(request_id, exc, gateway_url)


_P = ParamSpec("_P")
_Owner = TypeVar("_Owner")


def guarded(
    handler: Callable[Concatenate[_Owner, _P], Awaitable[Response]],
) -> Callable[Concatenate[_Owner, _P], Coroutine[Any, Any, Response]]:
    """An entry point whose failures still answer JSON: an upstream 401/403 as
    `auth_refusal`, a defect of ours as -32603 with 500 and one `call_failed`
    line with its stack (never a plain-text 500). What the handler took is
    released by its own try/finally and context managers on the way out."""

    async def guard(owner: _Owner, /, *args: _P.args, **kwargs: _P.kwargs) -> Response:
        try:
            return await handler(owner, *args, **kwargs)
        except UpstreamAuthChallenge as exc:
            relay = getattr(owner, "auth_relay", None)
            url = kwargs.get("gateway_url")
            gateway_url = url if isinstance(url, str) else None
            refusal, headers = auth_refusal(exc, _request_id(args), gateway_url, relay)
            return refuse(refusal, dict(headers))
        except Exception:
            log.exception("call_failed", era="legacy", route=handler.__name__)
            return refuse(_internal_error(_request_id(args)))

    functools.update_wrapper(guard, handler)
    return guard


def _request_id(args: tuple[Any, ...]) -> RequestId | None:
    """The id of the message an entry point was serving (its claim or body), if readable."""
    for arg in args:
        if isinstance(arg, front.Claim):
            return front.readable_id(arg.body)
        if isinstance(arg, bytes):
            with contextlib.suppress(jsonio.JSONDecodeError):
                return front.readable_id(jsonio.loads(arg))
    return None


def _opens_session(body: Any) -> bool:
    """An `initialize` (alone or in a batch) is served here, whatever id it carries."""
    if isinstance(body, list):
        return front.holds_initialize(body)
    return isinstance(body, dict) and body.get("method") == "initialize"


def session_not_found(request_id: RequestId | None = None) -> Rejection:
    # 2025-11-25 streamable-http "Session Management": a request with a session
    # id the server does not know MUST get 404; the client then initialises again.
    return Rejection(
        INVALID_REQUEST,
        "Session not found: it expired or was ended; send initialize to start a new one",
        request_id,
        status=404,
    )


def owner_unreachable(request_id: RequestId | None = None) -> Rejection:
    # The session lives in another replica's memory and that replica does not
    # answer: for this client the session is gone, and the 2025-11-25
    # streamable-http answer to a session the server does not have is 404,
    # upon which the client initialises again (app/replicas.py).
    return Rejection(
        INVALID_REQUEST,
        "Session not found: the gateway replica holding it cannot be reached; send "
        "initialize to start a new one",
        request_id,
        status=404,
    )


def _upstream_failure(exc: UpstreamError, request_id: RequestId | None) -> Rejection:
    return Rejection(
        INTERNAL_ERROR,
        f"Internal error: the upstream MCP server could not serve the request ({exc.message})",
        request_id,
        status=exc.status,
    )


async def _reads(
    messages: AsyncIterator[Message],
    *,
    stop: asyncio.Event | None = None,
    quiet_s: float | None = None,
) -> AsyncGenerator[Message | None, None]:
    """`messages`, until `stop` is set, with None after each `quiet_s` without one.

    Each read is raced against `stop`, since closing a stream that another task
    reads does not wake that read; and the read goes on across a quiet period,
    so a message is never lost to the timer."""
    stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
    step: asyncio.Future[Message] | None = None
    try:
        while True:
            if step is None:
                step = asyncio.ensure_future(anext(messages))
            waited = (step,) if stopped is None else (step, stopped)
            await asyncio.wait(waited, timeout=quiet_s, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                if stopped is not None and stopped.done():
                    return
                yield None
                continue
            finished, step = step, None
            try:
                message = finished.result()
            except StopAsyncIteration:
                return
            yield message
    finally:
        if stopped is not None:
            stopped.cancel()
        # Whatever ends the relay (the cancellation, the client gone), the read
        # in flight ends with it, before the caller closes the exchange.
        if step is not None:
            step.cancel()
            with contextlib.suppress(BaseException):
                await step


class IdTurns:
    """One request in flight upstream per session and id *as text*.

    The client's ids go upstream unchanged (the session is the client's alone),
    and 1 and "1" are two ids, but servers may key their calls by the id's text:
    the official Python SDK 1.x's Streamable HTTP transport routes each answer
    to the POST of `str(id)`, so with both in flight one answer lands on the
    other's stream and the other call never ends. Such a request waits for its
    twin to finish; any other request passes without waiting."""

    def __init__(self) -> None:
        # Taken keys; the value is the event its waiters wait on, once there are any.
        self._taken: dict[tuple[str, str], asyncio.Event | None] = {}

    def of(self, session_id: str, request_id: RequestId) -> _Turn:
        return _Turn(self._taken, (session_id, str(request_id)))

    def __len__(self) -> int:
        return len(self._taken)


class _Turn:
    __slots__ = ("_key", "_taken")

    def __init__(self, taken: dict[tuple[str, str], asyncio.Event | None], key: tuple[str, str]):
        self._taken = taken
        self._key = key

    async def __aenter__(self) -> None:
        while self._key in self._taken:
            turn = self._taken[self._key]
            if turn is None:
                turn = self._taken[self._key] = asyncio.Event()
            await turn.wait()
        self._taken[self._key] = None

    async def __aexit__(self, *_exc: object) -> None:
        turn = self._taken.pop(self._key, None)
        if turn is not None:
            turn.set()


class LegacyFront:
    def __init__(
        self,
        sessions: LegacySessions,
        *,
        offered: Version,
        max_batch: int,
        write_timeout_s: float,
        max_json_depth: int = jsonio.DEFAULT_MAX_DEPTH,
        auth_relay: AuthRelay | None = None,
        relay: ReplicaRelay | None = None,
        keepalive_s: float = 15.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.max_json_depth = max_json_depth
        # Every legacy call is counted in `call`, the one place POST /mcp (one
        # request or a batch) and HTTP+SSE's POST /messages all go through.
        self._metrics = metrics
        # A quiet GET stream gets an SSE comment this often, or proxies cut it.
        self._keepalive_s = keepalive_s
        self.auth_relay = auth_relay
        # Toward the replica owning a session that is not here (app/replicas.py).
        self.relay = relay
        self._sessions = sessions
        # The version offered to the upstream at initialize (MCP_SHIM_UPSTREAM_PROTOCOL_VERSION).
        self._offered = offered
        self._max_batch = max_batch
        self._write_timeout_s = write_timeout_s
        # The calls in flight that the client may cancel, by (session id, request id).
        self._cancels: dict[tuple[str, Any], asyncio.Event] = {}
        self._turns = IdTurns()

    # -- POST /mcp ---------------------------------------------------------

    @guarded
    async def post(
        self,
        claim: front.Claim,
        headers: Mapping[str, str],
        *,
        sse_ok: bool,
        json_ok: bool,
        gateway_url: str | None = None,
    ) -> Response:
        authorization = headers.get("authorization")
        if claim.parse_error:
            return refuse(front.parse_error())
        unfit = front.check_received(claim, headers, self.max_json_depth)
        if unfit is not None:
            return refuse(unfit)
        if not _opens_session(claim.body):
            relayed = self.relayed(
                "POST",
                "/mcp",
                claim.session_id,
                headers,
                claim.raw,
                request_id=front.readable_id(claim.body),
            )
            if relayed is not None:
                return relayed
        if isinstance(claim.body, list):
            return await self._batch(claim, headers, sse_ok=sse_ok, json_ok=json_ok)
        message = front.check_message(claim.body)
        if isinstance(message, Rejection):
            return refuse(message)
        if isinstance(message, front.LegacyRequest) and message.method == "initialize":
            return await self._initialize(message, authorization, sse_ok=sse_ok, json_ok=json_ok)
        session = self._find(claim.session_id, authorization)
        if session is None:
            return refuse(session_not_found(getattr(message, "id", None)))
        refusal = front.check_version_header(
            headers.get(front.VERSION_HEADER), session.client_version
        )
        if refusal is not None:
            return refuse(refusal.with_id(getattr(message, "id", None)))
        if isinstance(message, front.LegacyNotification):
            return await self._notify(session, message)
        if isinstance(message, front.LegacyResponse):
            return await self._respond(session, message)
        return self._answer(
            self.call(session, message, resumable=sse_ok, streamed=sse_ok),
            message.method,
            session,
            sse_ok,
            json_ok,
            request_id=message.id,
            gateway_url=gateway_url,
        )

    def relayed(
        self,
        method: str,
        target: str,
        session_id: str | None,
        headers: Mapping[str, str],
        body: bytes = b"",
        *,
        long_lived: bool = False,
        owned: str = "legacy_session",
        request_id: RequestId | None = None,
    ) -> Response | None:
        """The owner's answer, when the id (a session's, an HTTP+SSE channel's) names
        another replica (app/replicas.py); None: serve it here (which answers 404
        for an id that is not here)."""
        if self.relay is None:
            return None
        owner = self._sessions.elsewhere(
            session_id, headers.get("authorization"), HOP_HEADER in headers
        )
        if owner is None:
            return None
        return self.relay.answer(
            owner,
            method,
            target,
            header_items(headers),
            body,
            what=owned,
            long_lived=long_lived,
            unreachable=lambda: refuse(owner_unreachable(request_id)),
            write_timeout_s=self._write_timeout_s,
        )

    def _find(self, session_id: str | None, authorization: str | None) -> LegacySession | None:
        if session_id is None:
            return None
        return self._sessions.find(session_id, authorization)

    async def _initialize(
        self,
        request: front.LegacyRequest,
        authorization: str | None,
        *,
        sse_ok: bool,
        json_ok: bool,
    ) -> Response:
        opened = await self.open_session(request, authorization)
        if isinstance(opened, AtLimit):
            return refuse(opened, {"retry-after": str(opened.retry_after_s)})
        if isinstance(opened, Rejection):
            return refuse(opened)
        session, answer = opened
        headers = {front.SESSION_HEADER: session.id}
        if json_ok or not sse_ok:
            return _json(answer, 200, headers)
        return Response(sse_event(answer), media_type="text/event-stream", headers=headers)

    async def open_session(
        self, request: front.LegacyRequest, authorization: str | None
    ) -> tuple[LegacySession, Message] | Rejection:
        """Answer `initialize`: a new session with its own upstream session, and the
        initialize response in the negotiated version."""
        init = front.check_initialize(request)
        if isinstance(init, Rejection):
            return init
        # The client's capabilities as the upstream's revision expresses them:
        # what that revision does not define is dropped.
        upstream_caps = translate.client_capabilities(
            init.capabilities, init.version, self._offered
        )
        try:
            session = await self._sessions.open(
                init.version, upstream_caps, self._offered, authorization, init.client_info
            )
        except UpstreamAuthChallenge:
            raise  # the client's to answer (`guarded`): its OAuth flow starts there
        except PoolExhausted as exc:
            # The gateway's own bound, not the upstream's failure.
            log.warning("legacy_initialize_refused", error=exc.message, status=exc.status)
            return AtLimit(
                INTERNAL_ERROR,
                f"Internal error: the gateway is at a limit ({exc.message})",
                request.id,
                status=exc.status,
                retry_after_s=exc.retry_after_s,
            )
        except UpstreamError as exc:
            log.warning("legacy_initialize_failed", error=exc.message, status=exc.status)
            return _upstream_failure(exc, request.id)
        upstream = session.upstream
        try:
            result = translate.result(
                upstream.init_result, "initialize", upstream.version, session.client_version
            )
        except BaseException:
            # Its id never reached the client: nobody else would end it before it idles out.
            await self._sessions.end(session, "initialize_failed")
            raise
        result = {**result, "protocolVersion": session.client_version.name}
        log.info(
            "legacy_initialize",
            requested=init.requested[:40],
            client_version=session.client_version.name,
            upstream_version=upstream.version.name,
        )
        return session, {"jsonrpc": "2.0", "id": request.id, "result": result}

    async def _notify(self, session: LegacySession, note: front.LegacyNotification) -> Response:
        # 2025-11-25 streamable-http "Sending Messages to the Server": an accepted
        # notification or response gets 202 Accepted with no body.
        failure = await self.deliver(session, note)
        return Response(status_code=202) if failure is None else refuse(failure)

    async def _respond(self, session: LegacySession, reply: front.LegacyResponse) -> Response:
        failure = await self.deliver(session, reply)
        return Response(status_code=202) if failure is None else refuse(failure)

    def _upstream_message(
        self, session: LegacySession, item: front.LegacyNotification | front.LegacyResponse
    ) -> Message | None:
        """What goes upstream for a client's notification or response; None: nothing."""
        cv, uv = session.client_version, session.upstream_version
        if isinstance(item, front.LegacyNotification):
            if item.method == "notifications/initialized":
                return None  # the gateway sent its own when it opened the upstream session
            return translate.notification(item.message, cv, uv)
        method = session.server_requests.pop(item.id, None)
        message = item.message
        error = message.get("error")
        if isinstance(error, dict):
            return {**message, "error": translate.error(error, cv, uv)}
        result = message.get("result")
        if method is not None and isinstance(result, dict):
            return {**message, "result": translate.result(result, method, cv, uv)}
        return message

    async def deliver(
        self, session: LegacySession, item: front.LegacyNotification | front.LegacyResponse
    ) -> Rejection | None:
        message = self._upstream_message(session, item)
        if message is None:
            return None
        async with self._sessions.lease(session):
            upstream = session.upstream.session
            try:
                if isinstance(item, front.LegacyResponse):
                    await upstream.respond(message)
                else:
                    await upstream.notify(message)
                    if item.method == "notifications/cancelled":
                        self._cancelled(session, item.message)
            except UpstreamAuthChallenge:
                raise
            except SessionExpired:
                await self._expire(session)
                return session_not_found()
            except UpstreamError as exc:
                failure = _upstream_failure(exc, None)
                if isinstance(exc, UpstreamHttpError) and 400 <= exc.http_status < 500:
                    # The upstream refused the message itself: the client's to know.
                    failure = Rejection(failure.code, failure.message, status=exc.http_status)
                return failure
        return None

    def _cancelled(self, session: LegacySession, note: Message) -> None:
        """The client cancelled one of its calls (forwarded upstream already): its
        stream ends without an answer. An unknown id is ignored (2025-11-25
        basic/utilities/cancellation "Error Handling")."""
        params = note.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        cancel = self._cancels.get((session.id, request_id))
        if cancel is not None:
            log.info("legacy_call_cancelled", client_version=session.client_version.name)
            cancel.set()

    # -- a request and what the upstream sends back for it ------------------

    def _answer(
        self,
        events: AsyncGenerator[Outgoing, None],
        method: str,
        session: LegacySession,
        sse_ok: bool,
        json_ok: bool,
        *,
        request_id: RequestId | None = None,
        gateway_url: str | None = None,
    ) -> CallAnswer:
        started = time.perf_counter()
        events = self.for_client(events, request_id, gateway_url)

        def done(status: int, ending: str | None) -> None:
            log.info(
                "call",
                era="legacy",
                method=method[:64],
                client_version=session.client_version.name,
                upstream_version=session.upstream_version.name,
                outcome=ending or "done",
                status=status,
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
            )

        return CallAnswer(
            events,
            accepts_sse=sse_ok,
            accepts_json=json_ok,
            on_done=done,
            write_timeout_s=self._write_timeout_s,
        )

    async def call(
        self,
        session: LegacySession,
        request: front.LegacyRequest,
        *,
        resumable: bool,
        streamed: bool = True,
    ) -> AsyncGenerator[Outgoing, None]:
        """The upstream's answer to one request, as the client's messages (`_call`),
        counted in /metrics when it ends (`mcp_shim_calls_total`, era legacy)."""
        calls = self._call(session, request, resumable=resumable, streamed=streamed)
        if self._metrics is None:
            async with contextlib.aclosing(calls) as events:
                async for out in events:
                    yield out
            return
        started = time.perf_counter()
        outcome, status = "client_disconnected", 200
        try:
            async with contextlib.aclosing(calls) as events:
                async for out in events:
                    if out.final or out.keepalive:
                        # The answer, or a stream ended without one (cancelled,
                        # or resumed on the GET stream).
                        error = out.message.get("error")
                        code = error.get("code") if isinstance(error, dict) else None
                        outcome = f"error {code}" if code is not None else "ok"
                        status = out.status
                    yield out
        finally:
            self._metrics.call_done(
                request.method,
                session.client_version,
                outcome,
                status,
                time.perf_counter() - started,
                None,
            )

    async def _call(
        self,
        session: LegacySession,
        request: front.LegacyRequest,
        *,
        resumable: bool,
        streamed: bool = True,
    ) -> AsyncGenerator[Outgoing, None]:
        """The upstream's answer to one request, as the client's messages. `streamed`:
        the client takes an event stream; without one, nothing the upstream asks on
        the way can reach the client, so the gateway answers it (never left waiting)."""
        cv, uv = session.client_version, session.upstream_version
        outbound = translate.request(request.message, cv, uv)
        async with self._sessions.lease(session), self._turns.of(session.id, request.id):
            try:
                exchange = await session.upstream.session.request(outbound)
            except UpstreamAuthChallenge:
                raise
            except SessionExpired:
                await self._expire(session)
                refusal = session_not_found(request.id)
                yield Outgoing(refusal.to_message(), True, refusal.http_status)
                return
            except UpstreamError as exc:
                failure = _upstream_failure(exc, request.id)
                yield Outgoing(failure.to_message(), True, failure.http_status)
                return
            answered = False
            session.remember_request(request.id, request.method)
            sent_event_id: str | None = None
            cancel = asyncio.Event()
            call_key = (session.id, request.id)
            self._cancels[call_key] = cancel
            relayed = _reads(aiter(exchange), stop=cancel)
            try:
                async for message in relayed:
                    if message is None:
                        continue  # no quiet period was asked for: never yielded
                    if "method" not in message:
                        # The session is this client's alone: its ids are the upstream's.
                        if message.get("id") != request.id:
                            continue
                        if cancel.is_set():
                            break  # an upstream's answer to the cancelled call: not relayed
                        answered = True
                        session.open_requests.pop(request.id, None)
                        yield Outgoing(
                            self._response(session, request.method, message),
                            final=True,
                            event_id=exchange.last_event_id,
                        )
                        return
                    if "id" in message and not streamed:
                        await self._refuse_server_request(
                            session, message, "the client takes no text/event-stream answer"
                        )
                        continue
                    out = await self._to_client(session, message)
                    if out is not None:
                        sent_event_id = exchange.last_event_id
                        yield Outgoing(out, event_id=sent_event_id)
                if cancel.is_set():
                    # 2025-11-25 basic/utilities/cancellation: the receiver SHOULD
                    # "Not send a response for the cancelled request". The stream
                    # ends empty; a client that takes only JSON needs a body.
                    session.open_requests.pop(request.id, None)
                    if streamed:
                        yield Outgoing({}, keepalive=True)
                    else:
                        cancelled = Rejection(
                            INTERNAL_ERROR, "Request cancelled by the client", request.id
                        )
                        yield Outgoing(cancelled.to_message(), True, 200)
                    return
                if resumable and exchange.last_event_id is not None:
                    # The upstream closed the stream before answering and gave event
                    # ids (2025-11-25 SSE polling): so does the client's, with the
                    # id to resume from; the answer comes on its GET stream.
                    answered = True
                    if exchange.last_event_id != sent_event_id:
                        yield Outgoing({}, keepalive=True, event_id=exchange.last_event_id)
                    return
                session.open_requests.pop(request.id, None)
                failure = Rejection(
                    INTERNAL_ERROR,
                    "Internal error: the upstream MCP server closed the stream without answering",
                    request.id,
                    status=502,
                )
                answered = True
                yield Outgoing(failure.to_message(), True, failure.http_status)
            except UpstreamError as exc:
                answered = True
                session.open_requests.pop(request.id, None)
                failure = _upstream_failure(exc, request.id)
                yield Outgoing(failure.to_message(), True, failure.http_status)
            finally:
                if self._cancels.get(call_key) is cancel:
                    del self._cancels[call_key]
                # Closed here, not by the garbage collector, when the call ends early.
                await relayed.aclose()
                # A legacy client's disconnect is not a cancellation (2025-11-25
                # streamable-http): it sends notifications/cancelled itself.
                await exchange.aclose(drain=answered)

    def _response(self, session: LegacySession, method: str, message: Message) -> Message:
        cv, uv = session.client_version, session.upstream_version
        error = message.get("error")
        if isinstance(error, dict):
            return {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": translate.error(error, uv, cv, method),
            }
        result = message.get("result")
        translated = translate.result(result if isinstance(result, dict) else {}, method, uv, cv)
        return {"jsonrpc": "2.0", "id": message["id"], "result": translated}

    async def _to_client(self, session: LegacySession, message: Message) -> Message | None:
        """A server request or notification in the client's revision; None: not for it."""
        cv, uv = session.client_version, session.upstream_version
        method = message.get("method")
        if "id" not in message:
            return translate.notification(message, uv, cv)
        if not isinstance(method, str) or method not in cv.features.server_requests:
            await self._refuse_server_request(
                session, message, f"the client's protocol version {cv.name} has no such request"
            )
            return None
        session.remember_server_request(message["id"], method)
        return translate.request(message, uv, cv)

    async def _refuse_server_request(
        self, session: LegacySession, request: Message, why: str
    ) -> None:
        """Answer a request of the upstream that cannot reach the client (ping: {})."""
        if request.get("method") == "ping":
            reply: Message = {"jsonrpc": "2.0", "id": request["id"], "result": {}}
        else:
            method = str(request.get("method"))[:64]
            reply = {
                "jsonrpc": "2.0",
                "id": request["id"],
                "error": {"code": METHOD_NOT_FOUND, "message": f"{method} refused: {why}"},
            }
        with contextlib.suppress(UpstreamError):
            await session.upstream.session.respond(reply)

    # -- GET /mcp: the session's server stream -------------------------------

    @guarded
    async def get(
        self, headers: Mapping[str, str], *, sse_ok: bool, gateway_url: str | None = None
    ) -> Response:
        unfit = front.check_header_values(headers)
        if unfit is not None:
            return refuse(unfit)
        session_id = headers.get(front.SESSION_HEADER)
        relayed = self.relayed("GET", "/mcp", session_id, headers, long_lived=True)
        if relayed is not None:
            return relayed
        session = self._find(session_id, headers.get("authorization"))
        if session is None:
            return refuse(session_not_found())
        if not sse_ok:
            return refuse(
                Rejection(
                    INVALID_REQUEST,
                    "Not Acceptable: the server stream is text/event-stream; send "
                    "Accept: text/event-stream",
                    status=406,
                )
            )
        refusal = front.check_version_header(
            headers.get(front.VERSION_HEADER), session.client_version
        )
        if refusal is not None:
            return refuse(refusal)
        last_event_id = headers.get(front.LAST_EVENT_ID_HEADER)
        return self._answer(
            self.server_stream(session, last_event_id),
            "GET",
            session,
            True,
            True,
            gateway_url=gateway_url,
        )

    async def server_stream(
        self, session: LegacySession, last_event_id: str | None
    ) -> AsyncGenerator[Outgoing, None]:
        async with self._sessions.lease(session):
            try:
                exchange: Exchange = await session.upstream.session.listen(last_event_id)
            except UpstreamAuthChallenge:
                raise
            except SessionExpired:
                await self._expire(session)
                refusal = session_not_found()
                yield Outgoing(refusal.to_message(), True, refusal.http_status)
                return
            except UpstreamHttpError as exc:
                # 405 (no GET stream upstream), 409 (one is open already): the client's to know.
                status = exc.http_status if 400 <= exc.http_status < 500 else 502
                failure = Rejection(INTERNAL_ERROR, exc.message, status=status)
                yield Outgoing(failure.to_message(), True, status)
                return
            except UpstreamError as exc:
                failure = _upstream_failure(exc, None)
                yield Outgoing(failure.to_message(), True, failure.http_status)
                return
            relayed = _reads(aiter(exchange), quiet_s=self._keepalive_s)
            try:
                yield Outgoing({}, keepalive=True)  # the stream is open: headers now
                async for message in relayed:
                    if message is None:
                        # streamable-http "Receiving Messages": a comment line (`:`)
                        # keeps a quiet stream open through intermediaries. No
                        # `id:`, so the client's Last-Event-ID stays the last
                        # event's, which the upstream can resume from.
                        yield Outgoing({}, keepalive=True)
                        continue
                    if "method" not in message:
                        # An answer replayed after Last-Event-ID, or nothing of ours.
                        method = session.open_requests.pop(message.get("id"), None)
                        if method is None:
                            continue
                        out: Message | None = self._response(session, method, message)
                    else:
                        out = await self._to_client(session, message)
                    if out is not None:
                        yield Outgoing(out, event_id=exchange.last_event_id)
            except UpstreamError as exc:
                log.info("legacy_server_stream_dropped", error=exc.message)
            finally:
                await relayed.aclose()
                await exchange.aclose()

    # -- DELETE /mcp ---------------------------------------------------------

    @guarded
    async def delete(self, headers: Mapping[str, str]) -> Response:
        unfit = front.check_header_values(headers)
        if unfit is not None:
            return refuse(unfit)
        session_id = headers.get(front.SESSION_HEADER)
        relayed = self.relayed("DELETE", "/mcp", session_id, headers)
        if relayed is not None:
            return relayed
        session = self._find(session_id, headers.get("authorization"))
        if session is None:
            return refuse(session_not_found())
        await self._sessions.end(session, "client_deleted")
        return Response(status_code=200)

    # -- batches -------------------------------------------------------------

    async def _batch(
        self, claim: front.Claim, headers: Mapping[str, str], *, sse_ok: bool, json_ok: bool
    ) -> Response:
        """A JSON-RPC batch (2025-03-26 basic/index "Batching"): each request sent
        upstream on its own and concurrently, the responses matched by id and
        answered as one; notifications and responses in it forwarded."""
        items: list[Any] = claim.body
        session = self._find(claim.session_id, headers.get("authorization"))
        if session is None:
            if claim.session_id is not None and not front.holds_initialize(items):
                return refuse(session_not_found())
            # Served by no session: refused by the batch rules (an initialize inside).
        members = self.batch_members(items, session)
        if isinstance(members, Rejection):
            return refuse(members)
        assert session is not None
        refusal = front.check_version_header(
            headers.get(front.VERSION_HEADER), session.client_version
        )
        if refusal is not None:
            return refuse(refusal)
        requests = [m for m in members if isinstance(m, front.LegacyRequest)]
        for member in members:
            if isinstance(member, front.LegacyNotification | front.LegacyResponse):
                failure = await self.deliver(session, member)
                if failure is not None:
                    return refuse(failure)
        if not requests:
            # 2025-03-26 streamable-http: only notifications or responses: 202.
            return Response(status_code=202)
        log.info("legacy_batch", size=len(items), requests=len(requests))
        if sse_ok:
            return self._answer(self._merged(session, requests), "batch", session, True, False)
        answers = await asyncio.gather(*(self._collect(session, r) for r in requests))
        return _json_list(answers)

    def batch_members(
        self, items: list[Any], session: LegacySession | None
    ) -> list[front.LegacyMessage] | Rejection:
        """The batch rules (`front.batch_members`) as every route applies them, by the
        session's negotiated version."""
        version = session.client_version if session is not None else None
        return front.batch_members(items, version, self._max_batch)

    async def _collect(self, session: LegacySession, request: front.LegacyRequest) -> Message:
        """One batch member's response, for a client that takes no event stream: what the
        upstream asks on the way cannot reach it, so the gateway answers that itself."""
        calls = self.for_client(
            self.call(session, request, resumable=False, streamed=False), request.id
        )
        async with contextlib.aclosing(calls) as events:
            async for out in events:
                if out.final:
                    return out.message
        raise AssertionError("a call's events end with its answer")  # pragma: no cover

    async def _merged(
        self, session: LegacySession, requests: list[front.LegacyRequest]
    ) -> AsyncGenerator[Outgoing, None]:
        """One SSE stream for the whole batch: what each call relays, as it comes, and
        every response; the stream ends with the last of them."""
        queue: asyncio.Queue[Outgoing] = asyncio.Queue()

        async def pump(request: front.LegacyRequest) -> None:
            # A member that fails still answers, or the stream would wait for it forever.
            calls = self.for_client(self.call(session, request, resumable=False), request.id)
            answered = False
            async with contextlib.aclosing(calls) as events:
                async for out in events:
                    answered = answered or out.final
                    await queue.put(out)
            if not answered:
                # Cancelled by the client: no answer, but the member is done.
                await queue.put(Outgoing({}, True, keepalive=True))

        tasks = [asyncio.create_task(pump(r)) for r in requests]
        try:
            yield Outgoing({}, keepalive=True)  # an event stream from the start
            answered = 0
            while answered < len(requests):
                out = await queue.get()
                if out.final:
                    answered += 1
                    if out.keepalive:
                        continue
                    out = Outgoing(
                        out.message, answered == len(requests), 200, event_id=out.event_id
                    )
                yield out
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- what every stream of events ends with ---------------------------------

    async def for_client(
        self,
        events: AsyncGenerator[Outgoing, None],
        request_id: RequestId | None,
        gateway_url: str | None = None,
    ) -> AsyncGenerator[Outgoing, None]:
        """`events` as a legacy client may receive them: an error always with an id
        (`front.error_message`), and a failure that escapes them as a last message
        (an upstream 401/403 relayed; a defect of ours -32603 with 500 and one
        `call_failed` line with its stack), never a plain-text 500 or a stream
        cut short. `events` is closed here, releasing what it took."""
        async with contextlib.aclosing(events) as steps:
            try:
                async for out in steps:
                    if "error" in out.message and "id" not in out.message:
                        out = dataclasses.replace(
                            out, message={**out.message, "id": front.UNREAD_ID}
                        )
                    yield out
                return
            except UpstreamAuthChallenge as exc:
                refusal, headers = auth_refusal(exc, request_id, gateway_url, self.auth_relay)
                failure = Outgoing(
                    front.error_message(refusal), True, refusal.http_status, headers=headers
                )
            except Exception:
                log.exception("call_failed", era="legacy")
                internal = _internal_error(request_id)
                failure = Outgoing(front.error_message(internal), True, internal.http_status)
        yield failure

    # -- session end ---------------------------------------------------------

    async def _expire(self, session: LegacySession) -> None:
        await self._sessions.end(session, "upstream_session_expired")
