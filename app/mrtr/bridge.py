"""The bridge's orchestration: first calls, parking, retries, the end of an exchange.

The gateway hands the bridge every `tools/call`, `prompts/get` and
`resources/read` whose caller can receive input requests, or that carries
`inputResponses` / `requestState` (``Bridge.takes``). One HTTP request is a
*turn*:

- a first call (no `requestState`) takes a lane, sends the call upstream
  and drives it;
- a retry opens the sealed state, checks it against the request and the
  caller, takes the parked exchange out of the registry (or forwards the
  retry to the replica holding it), feeds the answers to the upstream and
  drives on.

*Driving* reads the exchange's events: notifications are relayed; a request
for input is answered at once from the turn's `inputResponses` when they
hold an answer that fits under its key, otherwise it waits for the client
(with the others that arrive within the quiet period); the call's response
ends the exchange. When questions wait, the exchange is parked and the turn
answers `input_required` with a fresh sealed state. docs/architecture.md
("Life of a parked exchange") walks through it step by step.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from app.call import CallState, upstream_sent
from app.config import Settings
from app.fronts.modern.checks import ModernCall
from app.mrtr import answers, capabilities, results
from app.mrtr.exchange import LiveExchange, Question, ServerRequest, StreamEnded
from app.mrtr.forwarding import ReplicaForwarder
from app.mrtr.lanes import Lanes
from app.mrtr.parked import ParkedRegistry, RegistryFull
from app.mrtr.results import Frame
from app.mrtr.shelter import Shelter
from app.mrtr.state import Claims, Sealer, caller_digest, params_digest
from app.rejections import INTERNAL_ERROR, INVALID_PARAMS, Rejection
from app.replicas import Replicas, reachable
from app.upstream.base import Exchange, Message
from app.upstream.errors import SessionExpired, UpstreamError
from app.upstream.listener import default_answer
from app.upstream.pool import PooledSession, SessionKey, SessionPool, credential_hash
from translators import translate
from translators._base import INPUT_REQUEST_METHODS

log = structlog.get_logger("mcp_shim.mrtr")


class Answer(Protocol):
    """The gateway's translated answer to a call (its `Outgoing`)."""

    message: Message
    status: int


@dataclass(frozen=True, slots=True)
class Codec:
    """What the bridge borrows from the gateway to speak to an upstream session:
    the same translation, sending, relaying and answering as any other call."""

    outbound: Callable[[ModernCall, PooledSession], Message]
    send: Callable[[PooledSession, Message], Awaitable[tuple[int, Exchange]]]
    relay: Callable[[ModernCall, PooledSession, Message, Any, int], Message | None]
    answer: Callable[[ModernCall, PooledSession, Message, CallState], Answer]


@dataclass(frozen=True, slots=True)
class BridgeSettings:
    ttl_s: float  # how long a parked exchange waits for its retry
    quiet_s: float  # gather questions until none arrived for this long...
    gather_max_s: float  # ...but no longer than this after the first
    replica: str  # this replica in sealed states: advertised base URL, or a local id


class Settled(enum.Enum):
    COMPLETED = "completed"  # the call's response went to the client
    PARKED = "parked"  # input_required went to the client
    ENDED = "ended"  # the exchange was ended (refusal, error); nothing left to do


@dataclass(slots=True)
class Turn:
    """One HTTP request's turn at an exchange."""

    call: ModernCall
    codec: Codec
    key: SessionKey
    upstream_caps: Mapping[str, Any]
    authorization: str | None
    state: CallState
    hop: bool
    settled: Settled | None = None
    caller: str = field(init=False)

    def __post_init__(self) -> None:
        self.caller = caller_digest(credential_hash(self.authorization))

    def log(self, event: str, *, warning: bool = False, **fields: Any) -> None:
        """One log line about this turn: ids, method and versions, never bodies."""
        emit = log.warning if warning else log.info
        emit(
            event,
            request_id=self.state.request_id,
            method=self.call.method,
            client_version=self.call.version.name,
            upstream_version=self.state.upstream_version,
            **fields,
        )

    @property
    def retried(self) -> bool:
        params = self.call.params
        return "inputResponses" in params or "requestState" in params


def _refusal(turn: Turn, message: str, reason: str) -> Frame:
    turn.state.outcome = "rejected"
    turn.settled = Settled.ENDED
    turn.log("mrtr_state_refused", reason=reason)
    rejection = Rejection(INVALID_PARAMS, message, turn.call.id)
    return Frame(rejection.to_message(), True, rejection.http_status)


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


class Bridge:
    def __init__(
        self,
        *,
        lanes: Lanes,
        sealer: Sealer,
        forwarder: ReplicaForwarder,
        settings: BridgeSettings,
        max_parked: int,
        shelter: Shelter | None = None,
    ) -> None:
        self._lanes = lanes
        self._sealer = sealer
        self._forwarder = forwarder
        self._settings = settings
        self._registry: ParkedRegistry[LiveExchange] = ParkedRegistry(
            max_parked=max_parked, on_expire=self._expired, shelter=shelter
        )
        self._background: set[asyncio.Task[None]] = set()

    @property
    def parked(self) -> int:
        return len(self._registry)

    @property
    def lanes(self) -> Lanes:
        return self._lanes

    @staticmethod
    def takes(call: ModernCall) -> bool:
        if call.method not in call.version.features.mrtr_methods:
            return False
        params = call.params
        return (
            "inputResponses" in params
            or "requestState" in params
            or capabilities.declares_input(call.client_capabilities)
        )

    async def run(
        self,
        call: ModernCall,
        codec: Codec,
        key: SessionKey,
        upstream_caps: Mapping[str, Any],
        authorization: str | None,
        state: CallState,
        *,
        hop: bool = False,
    ) -> AsyncGenerator[Frame, None]:
        refused = answers.check_params(call.id, call.params)
        if refused is not None:
            state.outcome = "rejected"
            yield Frame(refused.to_message(), True, refused.http_status)
            return
        turn = Turn(call, codec, key, upstream_caps, authorization, state, hop)
        flow = self._resume(turn) if "requestState" in call.params else self._first(turn)
        async with contextlib.aclosing(flow) as frames:
            async for frame in frames:
                yield frame

    # -- first call ---------------------------------------------------------------

    async def _first(self, turn: Turn) -> AsyncGenerator[Frame, None]:
        call = turn.call
        # Everything that can fail on the request alone happens before the lane is
        # taken; from the take on, one try/finally gives the lane back on every path.
        digest = params_digest(call.params)
        supplied = dict(call.params.get("inputResponses") or {})
        lane = await self._lanes.acquire(turn.key, turn.upstream_caps, turn.authorization)
        ex: LiveExchange | None = None
        try:
            ex = LiveExchange(
                pooled=lane.pooled,
                lane=lane,
                method=call.method,
                caller=turn.caller,
                digest=digest,
            )
            await self._send(ex, turn)
            async with contextlib.aclosing(self._drive(ex, turn, supplied)) as frames:
                async for frame in frames:
                    yield frame
        finally:
            if ex is None:
                self._spawn(self._lanes.release(lane, reusable=False))
            else:
                await self._settle(ex, turn)

    async def _send(self, ex: LiveExchange, turn: Turn) -> None:
        """Send the call on the exchange's lane; once more on a fresh lane if the
        upstream forgot the session (its handler never ran: not a second run)."""
        assert ex.lane is not None
        # Always ask for progress: a later turn (a retry carrying a progressToken)
        # gets the progress of the call it continues, whatever the first call asked.
        outbound = results.with_progress_token(turn.codec.outbound(turn.call, ex.pooled))
        try:
            upstream_id, exchange = await turn.codec.send(ex.pooled, outbound)
        except SessionExpired:
            # Not the exchange's any more while it is replaced: released exactly once.
            stale, ex.lane = ex.lane, None
            ex.lane = await self._lanes.replace(stale, turn.upstream_caps, turn.authorization)
            ex.pooled = ex.lane.pooled
            upstream_id, exchange = await turn.codec.send(ex.pooled, outbound)
        ex.attach(upstream_id, exchange)

    # -- retry --------------------------------------------------------------------

    async def _resume(self, turn: Turn) -> AsyncGenerator[Frame, None]:
        call = turn.call
        claims = self._sealer.open(call.params["requestState"])
        if claims is None:
            yield _refusal(
                turn, "Invalid params: requestState could not be verified", "unverifiable"
            )
            return
        if claims.expires_at <= time.time():
            yield _refusal(
                turn,
                "Invalid params: requestState has expired; send the request again without it",
                "expired",
            )
            return
        if (
            claims.caller != turn.caller
            or claims.method != call.method
            or claims.digest != params_digest(call.params)
        ):
            yield _refusal(
                turn, "Invalid params: requestState does not belong to this request", "mismatch"
            )
            return
        if claims.replica != self._settings.replica:
            async with contextlib.aclosing(self._forward(turn, claims)) as frames:
                async for frame in frames:
                    yield frame
            return

        ex = self._registry.peek(claims.exchange)
        if ex is None or ex.round != claims.round:
            yield _refusal(
                turn,
                "Invalid params: requestState is no longer valid (its exchange has ended or "
                "moved on); send the request again without it",
                "stale",
            )
            return
        supplied = dict(call.params.get("inputResponses") or {})
        for key, question in ex.pending.items():
            if key in supplied:
                reason = answers.check_answer(question.input_request, supplied[key])
                if reason is not None:
                    # Nothing was taken or fed: the same state can be retried.
                    turn.state.outcome = "rejected"
                    turn.settled = Settled.ENDED
                    rejection = results.answer_refused(call.id, key, reason)
                    turn.log("mrtr_answer_refused", exchange=ex.fingerprint, key=key)
                    yield Frame(rejection.to_message(), True, rejection.http_status)
                    return
        taken = self._registry.take(claims.exchange)
        assert taken is not None  # peeked above, no await since
        try:
            turn.log(
                "mrtr_resumed",
                exchange=ex.fingerprint,
                round=ex.round,
                answered=sum(1 for key in ex.pending if key in supplied),
                pending=len(ex.pending),
            )
            if ex.url_required is not None:
                async with contextlib.aclosing(
                    self._after_url_elicitation(ex, turn, supplied)
                ) as frames:
                    async for frame in frames:
                        yield frame
                return
            for key in [k for k in ex.pending if k in supplied]:
                lost = await self._feed(ex, ex.pending.pop(key), supplied.pop(key), turn)
                if lost is not None:
                    yield lost
                    return
            async with contextlib.aclosing(self._drive(ex, turn, supplied)) as frames:
                async for frame in frames:
                    yield frame
        finally:
            await self._settle(ex, turn)

    async def _forward(self, turn: Turn, claims: Claims) -> AsyncGenerator[Frame, None]:
        # Only a replica that advertised a URL can be reached; a request that
        # already hopped once is never sent on (no loops, whatever the config).
        if turn.hop or not reachable(claims.replica):
            yield _refusal(
                turn,
                "Invalid params: requestState is no longer valid here; send the request "
                "again without it",
                "other_replica",
            )
            return
        turn.settled = Settled.ENDED
        turn.state.outcome = "forwarded"
        turn.log("mrtr_forwarded", replica=claims.replica)
        async with contextlib.aclosing(
            self._forwarder.forward(turn.call, turn.authorization, claims.replica)
        ) as frames:
            async for frame in frames:
                yield frame

    async def _after_url_elicitation(
        self, ex: LiveExchange, turn: Turn, supplied: dict[str, Any]
    ) -> AsyncGenerator[Frame, None]:
        """The retry of a call that ended with -32042: once every URL was accepted,
        the call is sent again (what a legacy client does after the user went through
        the URLs; the first attempt ran nothing but the refusal)."""
        assert ex.url_required is not None
        answered = {k: supplied.pop(k) for k in list(ex.pending) if k in supplied}
        for key in answered:
            ex.pending.pop(key)
        if any(answer.get("action") != "accept" for answer in answered.values()):
            ex.ended = True
            turn.settled = Settled.ENDED
            error = {"jsonrpc": "2.0", "id": ex.upstream_id, "error": ex.url_required.error}
            out = turn.codec.answer(turn.call, ex.pooled, error, turn.state)
            yield Frame(out.message, True, out.status)
            return
        if ex.pending:
            yield await self._park(ex, turn)
            return
        ex.lane = await self._lanes.acquire(turn.key, turn.upstream_caps, turn.authorization)
        ex.pooled = ex.lane.pooled
        await self._send(ex, turn)
        async with contextlib.aclosing(self._drive(ex, turn, supplied)) as frames:
            async for frame in frames:
                yield frame

    # -- driving ------------------------------------------------------------------

    async def _drive(
        self, ex: LiveExchange, turn: Turn, supplied: dict[str, Any]
    ) -> AsyncGenerator[Frame, None]:
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
                yield await self._park(ex, turn)
                return

            if isinstance(event, StreamEnded):
                yield await self._upstream_lost(ex, turn, event)
                return
            if isinstance(event, ServerRequest):
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
                relayed = turn.codec.relay(call, ex.pooled, event, token, ex.upstream_id)
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
            await self._release_lane(ex, reusable=False)
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
            return await self._feed(ex, question, answer, turn)
        # No answer, or one that does not fit: the client is asked (again).
        ex.pending[key] = question
        return None

    async def _feed(
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
        await self._abandon(ex, "a response to the upstream's request could not be delivered")
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
                await self._release_lane(ex, reusable=True)
                for params in urls:
                    request = {"method": "elicitation/create", "params": params}
                    key = ex.keys.assign("elicitation/create", params)
                    ex.pending[key] = Question(
                        key,
                        request,
                        results.input_request(request, ex.pooled.version, call.version),
                        None,
                    )
                return await self._park(ex, turn)
        ex.upstream_finished()
        turn.settled = Settled.COMPLETED
        out = turn.codec.answer(call, ex.pooled, message, turn.state)
        answer = out.message
        if turn.retried and isinstance(answer.get("result"), dict):
            answer = {**answer, "result": results.do_not_cache(answer["result"], call.method)}
        turn.log("mrtr_completed", exchange=ex.fingerprint, rounds=ex.round)
        return Frame(answer, True, out.status)

    async def _upstream_lost(self, ex: LiveExchange, turn: Turn, event: StreamEnded) -> Frame:
        await self._abandon(ex, "upstream stream ended")
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

    # -- parking ------------------------------------------------------------------

    async def _park(self, ex: LiveExchange, turn: Turn) -> Frame:
        call = turn.call
        ttl = self._settings.ttl_s
        try:
            self._registry.park(ex.id, ex, ttl, new=ex.round == 0)
        except RegistryFull:
            await self._abandon(ex, "too many parked exchanges")
            turn.state.outcome = "parked_full"
            turn.settled = Settled.ENDED
            turn.log("mrtr_registry_full", warning=True, max_parked=self._registry.max_parked)
            rejection = Rejection(
                INTERNAL_ERROR,
                f"Internal error: the gateway already holds {self._registry.max_parked} "
                "exchanges waiting for client input (MCP_SHIM_MAX_PARKED); retry later",
                call.id,
                status=503,
            )
            return Frame(rejection.to_message(), True, rejection.http_status)
        ex.round += 1
        claims = Claims(
            exchange=ex.id,
            replica=self._settings.replica,
            caller=ex.caller,
            method=ex.method,
            digest=ex.digest,
            expires_at=int(time.time() + ttl),
            round=ex.round,
        )
        result = results.input_required(
            {key: q.input_request for key, q in ex.pending.items()},
            self._sealer.seal(claims),
            ex.pooled.server_info,
        )
        turn.state.outcome = "input_required"
        turn.settled = Settled.PARKED
        turn.log(
            "mrtr_parked",
            exchange=ex.fingerprint,
            round=ex.round,
            keys=len(ex.pending),
            parked=len(self._registry),
        )
        return Frame({"jsonrpc": "2.0", "id": call.id, "result": result}, True)

    # -- ending -------------------------------------------------------------------

    async def _settle(self, ex: LiveExchange, turn: Turn) -> None:
        """After a turn: keep what was parked, tidy what completed, end what was left."""
        if turn.settled is Settled.COMPLETED:
            try:
                await ex.close_stream(answered=True)
            finally:
                await self._release_lane(ex, reusable=True)
        elif turn.settled is None:
            # The client went away (or something broke) mid-turn: nobody will
            # finish this call. Cleanup must not be cut short by our own cancellation.
            turn.state.outcome = "cancelled"
            self._spawn(self._abandon(ex, "client closed the response stream"))

    async def _abandon(self, ex: LiveExchange, reason: str, *, timed_out: bool = False) -> None:
        if not ex.ended:
            log.info("mrtr_abandoned", exchange=ex.fingerprint, reason=reason, round=ex.round)
        try:
            await ex.abandon(reason, timed_out=timed_out)
        finally:
            await self._release_lane(ex, reusable=False)

    async def _release_lane(self, ex: LiveExchange, *, reusable: bool) -> None:
        lane, ex.lane = ex.lane, None
        if lane is not None:
            await self._lanes.release(lane, reusable=reusable)

    def _expired(self, ex: LiveExchange) -> None:
        self._spawn(self._abandon(ex, "no retry within MCP_SHIM_MRTR_TTL_S", timed_out=True))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def aclose(self) -> None:
        for ex in self._registry.drain():
            self._spawn(self._abandon(ex, "gateway shutting down"))
        for task in list(self._background):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 2.0)
        await self._lanes.aclose()


def build_bridge(settings: Settings, pool: SessionPool, replicas: Replicas) -> Bridge:
    """The bridge as configured by `MCP_SHIM_*` (app/config.py), its lanes started;
    its seal, name and relay are the replicas' (app/replicas.py)."""
    lanes = Lanes(pool, idle_s=settings.session_idle_s, listen_wait_s=settings.connect_timeout_s)
    lanes.start()
    return Bridge(
        lanes=lanes,
        sealer=replicas.sealer,
        forwarder=ReplicaForwarder(replicas.relay, settings.max_upstream_answer_bytes),
        settings=BridgeSettings(
            ttl_s=settings.mrtr_ttl_s,
            quiet_s=settings.mrtr_quiet_ms / 1000,
            gather_max_s=settings.mrtr_gather_max_ms / 1000,
            replica=replicas.me,
        ),
        max_parked=settings.max_parked,
        shelter=Shelter(),
    )
