"""The bridge's orchestration: a first call, a retry, each driven to its end.

The gateway hands the bridge every `tools/call`, `prompts/get` and
`resources/read` whose caller can receive input requests, or that carries
`inputResponses` / `requestState` (``Bridge.takes``). One HTTP request is a
*turn*:

- a first call (no `requestState`) takes a lane, sends the call upstream
  and drives it;
- a retry opens the sealed state, checks it against the request and the
  caller and its answers against the questions, takes the parked exchange
  out of the registry (or forwards the retry to the replica holding it),
  feeds the answers to the upstream and drives on.

*Driving* reads the exchange's events: notifications are relayed; a request
for input is answered at once from the turn's `inputResponses` when they
hold an answer that fits under its key, otherwise it waits for the client
(with the others that arrive within the quiet period); the call's response
ends the exchange. When questions wait, the exchange is parked and the turn
answers `input_required` with a fresh sealed state. docs/architecture.md
("Life of a parked exchange") walks through it step by step.

Here: which calls the bridge takes, a first call and a retry. The rest is
app/mrtr/turn.py's (a turn), driving.py's (sending and driving), parking.py's
(parking, settling, ending) and forwarder.py's (the translation, sending,
relaying and answering every modern call to a legacy upstream shares).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from app.call import CallState, ModernCall
from app.cluster.forwarding import ReplicaForwarder
from app.cluster.replicas import Replicas, reachable, same_route
from app.cluster.sealing import Sealer
from app.config import Settings
from app.mrtr import answers, capabilities, results
from app.mrtr.driving import Driver
from app.mrtr.exchange import LiveExchange
from app.mrtr.forwarder import Forwarder
from app.mrtr.lanes import Lanes
from app.mrtr.parking import Parking
from app.mrtr.results import Frame
from app.mrtr.shelter import Shelter
from app.mrtr.state import Claims, open_state, params_digest
from app.mrtr.turn import BridgeSettings, Settled, Turn
from app.rejections import INVALID_PARAMS, Rejection
from app.upstream.sessions.pool import SessionKey, SessionPool


def _refusal(turn: Turn, message: str, reason: str) -> Frame:
    turn.state.outcome = "rejected"
    turn.settled = Settled.ENDED
    turn.log("mrtr_state_refused", reason=reason)
    rejection = Rejection(INVALID_PARAMS, message, turn.call.id)
    return Frame(rejection.to_message(), True, rejection.http_status)


class Bridge:
    def __init__(
        self,
        *,
        lanes: Lanes,
        sealer: Sealer,
        forwarder: ReplicaForwarder,
        upstream: Forwarder,
        settings: BridgeSettings,
        max_parked: int,
        shelter: Shelter | None = None,
    ) -> None:
        self._lanes = lanes
        self._sealer = sealer
        self._forwarder = forwarder
        self._upstream = upstream
        self._settings = settings
        self._parking = Parking(
            lanes=lanes,
            sealer=sealer,
            settings=settings,
            max_parked=max_parked,
            shelter=shelter,
        )
        self._driver = Driver(
            lanes=lanes, settings=settings, parking=self._parking, upstream=upstream
        )

    @property
    def parked(self) -> int:
        return len(self._parking.registry)

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
        turn = Turn(call, key, upstream_caps, authorization, state, hop)
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
            await self._driver.send(ex, turn)
            async with contextlib.aclosing(self._driver.drive(ex, turn, supplied)) as frames:
                async for frame in frames:
                    yield frame
        finally:
            if ex is None:
                self._parking.spawn(self._lanes.release(lane, reusable=False))
            else:
                await self._parking.settle(ex, turn)

    # -- retry --------------------------------------------------------------------

    async def _resume(self, turn: Turn) -> AsyncGenerator[Frame, None]:
        call = turn.call
        claims = open_state(self._sealer, call.params["requestState"])
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

        ex = self._parking.registry.peek(claims.exchange)
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
        taken = self._parking.registry.take(claims.exchange)
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
                lost = await self._driver.feed(ex, ex.pending.pop(key), supplied.pop(key), turn)
                if lost is not None:
                    yield lost
                    return
            async with contextlib.aclosing(self._driver.drive(ex, turn, supplied)) as frames:
                async for frame in frames:
                    yield frame
        finally:
            await self._parking.settle(ex, turn)

    async def _forward(self, turn: Turn, claims: Claims) -> AsyncGenerator[Frame, None]:
        # Only a replica that advertised a URL can be reached; a request that
        # already hopped once is never sent on (no loops, whatever the config);
        # another server's state (app/servers) never reaches that server.
        mine = same_route(claims.replica, self._settings.replica)
        if turn.hop or not reachable(claims.replica) or not mine:
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
            out = self._upstream.answer(turn.call, ex.pooled, error, turn.state)
            yield Frame(out.message, True, out.status)
            return
        if ex.pending:
            yield await self._parking.park(ex, turn)
            return
        ex.lane = await self._lanes.acquire(turn.key, turn.upstream_caps, turn.authorization)
        ex.pooled = ex.lane.pooled
        await self._driver.send(ex, turn)
        async with contextlib.aclosing(self._driver.drive(ex, turn, supplied)) as frames:
            async for frame in frames:
                yield frame

    async def aclose(self) -> None:
        await self._parking.aclose()
        await self._lanes.aclose()


def build_bridge(
    settings: Settings, pool: SessionPool, replicas: Replicas, upstream: Forwarder
) -> Bridge:
    """The bridge as configured by `MCP_SHIM_*` (app/config.py), its lanes started;
    its seal, name and relay are the replicas' (app/cluster/replicas.py), its calls go
    upstream through `upstream`, the forwarder every modern call shares."""
    lanes = Lanes(pool, idle_s=settings.session_idle_s, listen_wait_s=settings.connect_timeout_s)
    lanes.start()
    return Bridge(
        lanes=lanes,
        sealer=replicas.sealer,
        forwarder=ReplicaForwarder(replicas.relay, settings.max_upstream_answer_bytes),
        upstream=upstream,
        settings=BridgeSettings(
            ttl_s=settings.mrtr_ttl_s,
            quiet_s=settings.mrtr_quiet_ms / 1000,
            gather_max_s=settings.mrtr_gather_max_ms / 1000,
            replica=replicas.me,
        ),
        max_parked=settings.max_parked,
        shelter=Shelter(),
    )
