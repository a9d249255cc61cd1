"""Driving a multi round-trip exchange: the call sent upstream, and its events
read until it completes, waits for the client, or ends.

Notifications are relayed; a request for input is answered at once from the
turn's `inputResponses` when they hold an answer that fits under its key,
otherwise it waits for the client (with the others that arrive within the
quiet period: then the exchange is parked, app/mrtr/parking.py); the call's
response ends the exchange.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

import structlog

from app import tracing
from app.call import Message, upstream_sent
from app.mrtr import answers, capabilities, results
from app.mrtr.exchange import LiveExchange, Question, ServerRequest, StreamEnded
from app.mrtr.forwarder import Forwarder
from app.mrtr.lanes import Lanes
from app.mrtr.parking import Parking
from app.mrtr.results import Frame
from app.mrtr.turn import BridgeSettings, Settled, Turn
from app.rejections import INTERNAL_ERROR, Rejection
from app.upstream.errors import SessionExpired, UpstreamError
from app.upstream.sessions.listener import default_answer
from translators import translate
from translators._base import INPUT_REQUEST_METHODS

log = structlog.get_logger("mcp_shim.mrtr")


def _progress_token(params: Mapping[str, Any]) -> Any:
    meta = params.get("_meta")
    return meta.get("progressToken") if isinstance(meta, dict) else None


async def _send_reply(
    reply: Callable[[Message], Awaitable[None]], message: Message, exchange: str
) -> UpstreamError | None:
    """Deliver a response to the upstream's request; the failure, if it could not
    be (after the one resend on a fresh connection the upstream layer makes:
    app/upstream/streamable_http/transport.py `resendable`)."""
    try:
        await reply(message)
    except UpstreamError as exc:
        log.warning("mrtr_reply_failed", exchange=exchange, error=exc.message)
        return exc
    return None


class Driver:
    def __init__(
        self, *, lanes: Lanes, settings: BridgeSettings, parking: Parking, upstream: Forwarder
    ) -> None:
        self._lanes = lanes
        # Translating, sending, relaying and answering, as for any call (app/mrtr/forwarder.py).
        self._upstream = upstream
        self._settings = settings
        self._parking = parking

    async def send(self, ex: LiveExchange, turn: Turn) -> None:
        """Send the call on the exchange's lane; once more on a fresh lane if the
        upstream forgot the session (its handler never ran: not a second run)."""
        assert ex.lane is not None
        # Always ask for progress: a later turn (a retry carrying a progressToken)
        # gets the progress of the call it continues, whatever the first call asked.
        outbound = results.with_progress_token(self._upstream.outbound(turn.call, ex.pooled))
        try:
            upstream_id, exchange = await self._upstream.send(ex.pooled, outbound)
        except SessionExpired:
            # Not the exchange's any more while it is replaced: released exactly once.
            stale, ex.lane = ex.lane, None
            ex.lane = await self._lanes.replace(stale, turn.upstream_caps, turn.authorization)
            ex.pooled = ex.lane.pooled
            upstream_id, exchange = await self._upstream.send(ex.pooled, outbound)
        ex.attach(upstream_id, exchange)

    async def drive(
        self, ex: LiveExchange, turn: Turn, supplied: dict[str, Any]
    ) -> AsyncGenerator[Frame, None]:
        """The exchange's events until it completes, is parked, or ends."""
        call = turn.call
        loop = asyncio.get_running_loop()
        token = _progress_token(call.params)
        # Questions left unanswered by this turn count as just asked: the quiet
        # period gives the upstream a chance to ask more before the next round.
        first_at: float | None = loop.time() if ex.pending else None
        last_at = first_at
        while True:
            timeout: float | None = None
            if first_at is not None and last_at is not None and ex.pending:
                deadline = min(
                    last_at + self._settings.quiet_s, first_at + self._settings.gather_max_s
                )
                timeout = max(0.0, deadline - loop.time())
            try:
                async with asyncio.timeout(timeout):
                    event = await ex.events.get()
            except TimeoutError:
                tracing.event("mcp_shim.mrtr.park", {"mcp_shim.mrtr.questions": len(ex.pending)})
                yield await self._parking.park(ex, turn)
                return

            if isinstance(event, StreamEnded):
                yield await self._upstream_lost(ex, turn, event)
                return
            if isinstance(event, ServerRequest):
                tracing.event(
                    "mcp_shim.mrtr.question",
                    {"mcp.method.name": str(event.message.get("method", ""))},
                )
                refusal = await self._question(ex, turn, event, supplied)
                if refusal is not None:
                    yield refusal
                    return
                if ex.pending and first_at is None:
                    first_at = loop.time()
                if ex.pending:
                    last_at = loop.time()
                continue
            if "method" in event:
                assert ex.upstream_id is not None
                relayed = self._upstream.relay(call, ex.pooled, event, token, ex.upstream_id)
                if relayed is not None:
                    yield Frame(relayed)
                continue
            if event.get("id") != ex.upstream_id:
                continue
            yield await self._response(ex, turn, event)
            return

    async def _question(
        self, ex: LiveExchange, turn: Turn, event: ServerRequest, supplied: dict[str, Any]
    ) -> Frame | None:
        """A request of the upstream: answered now, put to the client, or refused (-32021)."""
        call = turn.call
        request = event.message
        method = request.get("method")
        if method not in INPUT_REQUEST_METHODS:
            # ping, or -32601
            failed = await _send_reply(event.reply, default_answer(request), ex.fingerprint)
            return None if failed is None else await self._reply_lost(ex, turn, failed)
        missing = capabilities.missing_for(method, request.get("params"), call.client_capabilities)
        if missing is not None:
            # The call cannot go on without it: cancelled first, so the tool does not
            # complete on the refusal; then the upstream's request gets its answer.
            await ex.abandon(
                "the client lacks a capability this call needs",
                cancel_first=True,
                extra=(event.reply, results.refusal_reply(request, missing)),
            )
            await self._parking.release_lane(ex, reusable=False)
            turn.state.outcome = "missing_capability"
            turn.settled = Settled.ENDED
            turn.log("mrtr_missing_capability", exchange=ex.fingerprint, asked=method)
            rejection = results.missing_capability(call.id, missing)
            return Frame(rejection.to_message(), True, rejection.http_status)
        key = ex.keys.assign(method, request.get("params"))
        question = Question(
            key,
            request,
            results.input_request(request, ex.pooled.version, call.version),
            event.reply,
        )
        answer = supplied.pop(key, None)
        if answer is None and "requestState" not in call.params:
            # A first call that already carries answers (not what the spec's flow
            # produces, but clients do it) cannot know the gateway's key for a
            # question the upstream did not name: an answer is used only when it
            # is the one answer given that fits this question.
            sole = answers.sole_fit(question.input_request, supplied)
            if sole is not None:
                answer = supplied.pop(sole)
        if answer is not None and answers.check_answer(question.input_request, answer) is None:
            return await self.feed(ex, question, answer, turn)
        # No answer, or one that does not fit: the client is asked (again).
        ex.pending[key] = question
        return None

    async def feed(
        self, ex: LiveExchange, question: Question, answer: Mapping[str, Any], turn: Turn
    ) -> Frame | None:
        """Post the client's answer to the upstream as the response to its request;
        the call's end if it could not be delivered."""
        if question.reply is None:
            return None
        method = str(question.request.get("method"))
        translated = translate.result(dict(answer), method, turn.call.version, ex.pooled.version)
        upstream_sent()  # the upstream part now runs until its next answer
        reply = results.response(question.request, translated)
        failed = await _send_reply(question.reply, reply, ex.fingerprint)
        return None if failed is None else await self._reply_lost(ex, turn, failed)

    async def _reply_lost(self, ex: LiveExchange, turn: Turn, failed: UpstreamError) -> Frame:
        """A response the upstream waits for could not be delivered: its call would
        wait for it until its deadline, so it ends now (cancelled upstream, its lane
        closed) and the client is told, as for an upstream that closed the stream."""
        await self._parking.abandon(
            ex, "a response to the upstream's request could not be delivered"
        )
        turn.state.outcome = "upstream_closed"
        turn.settled = Settled.ENDED
        rejection = Rejection(
            INTERNAL_ERROR,
            "Internal error: the gateway could not deliver the answer to the upstream MCP "
            f"server ({failed.message}); the call was cancelled",
            turn.call.id,
            status=502,
        )
        return Frame(rejection.to_message(), True, rejection.http_status)

    async def _response(self, ex: LiveExchange, turn: Turn, message: Message) -> Frame:
        """The call's own response: the answer, or -32042 turned into URL questions."""
        call = turn.call
        error = message.get("error")
        urls = capabilities.url_elicitations(error)
        if urls is not None and isinstance(error, dict):
            missing = capabilities.missing_for(
                "elicitation/create", {"mode": "url"}, call.client_capabilities
            )
            if missing is None:
                await ex.close_stream(answered=True)
                ex.ended_with_url_required(error)
                await self._parking.release_lane(ex, reusable=True)
                for params in urls:
                    request = {"method": "elicitation/create", "params": params}
                    key = ex.keys.assign("elicitation/create", params)
                    ex.pending[key] = Question(
                        key,
                        request,
                        results.input_request(request, ex.pooled.version, call.version),
                        None,
                    )
                return await self._parking.park(ex, turn)
        ex.upstream_finished()
        turn.settled = Settled.COMPLETED
        out = self._upstream.answer(call, ex.pooled, message, turn.state)
        answer = out.message
        if turn.retried and isinstance(answer.get("result"), dict):
            answer = {**answer, "result": results.do_not_cache(answer["result"], call.method)}
        turn.log("mrtr_completed", exchange=ex.fingerprint, rounds=ex.round)
        return Frame(answer, True, out.status)

    async def _upstream_lost(self, ex: LiveExchange, turn: Turn, event: StreamEnded) -> Frame:
        await self._parking.abandon(ex, "upstream stream ended")
        turn.state.outcome = "upstream_closed"
        turn.settled = Settled.ENDED
        detail = f" ({event.error})" if event.error else ""
        rejection = Rejection(
            INTERNAL_ERROR,
            "Internal error: the upstream MCP server closed the stream without answering" + detail,
            turn.call.id,
            status=502,
        )
        return Frame(rejection.to_message(), True, rejection.http_status)
