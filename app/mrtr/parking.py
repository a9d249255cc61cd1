"""Parking a multi round-trip exchange, and ending one.

When questions wait for the client, the exchange goes into the registry of
parked exchanges (app/mrtr/parked.py) and the turn answers `input_required`
with a fresh sealed `requestState` (`Parking.park`). After each turn,
`Parking.settle` keeps what was parked, tidies what completed and ends what
was left; an exchange not retried within its TTL, or still parked at
shutdown, is abandoned (the upstream's questions answered, the call
cancelled, its lane closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from typing import Any

import structlog

from app.cluster.sealing import Sealer
from app.mrtr import results
from app.mrtr.exchange import LiveExchange
from app.mrtr.lanes import Lanes
from app.mrtr.parked import ParkedRegistry, RegistryFull
from app.mrtr.results import Frame
from app.mrtr.shelter import Shelter
from app.mrtr.state import Claims, seal_state
from app.mrtr.turn import BridgeSettings, Settled, Turn
from app.rejections import INTERNAL_ERROR, Rejection

log = structlog.get_logger("mcp_shim.mrtr")


class Parking:
    def __init__(
        self,
        *,
        lanes: Lanes,
        sealer: Sealer,
        settings: BridgeSettings,
        max_parked: int,
        shelter: Shelter | None = None,
    ) -> None:
        self._lanes = lanes
        self._sealer = sealer
        self._settings = settings
        self.registry: ParkedRegistry[LiveExchange] = ParkedRegistry(
            max_parked=max_parked, on_expire=self._expired, shelter=shelter
        )
        self._background: set[asyncio.Task[None]] = set()

    async def park(self, ex: LiveExchange, turn: Turn) -> Frame:
        """Park `ex` until its retry: `input_required` with a fresh sealed state;
        a new exchange beyond MCP_SHIM_MAX_PARKED is abandoned instead (503)."""
        call = turn.call
        ttl = self._settings.ttl_s
        try:
            self.registry.park(ex.id, ex, ttl, new=ex.round == 0)
        except RegistryFull:
            await self.abandon(ex, "too many parked exchanges")
            turn.state.outcome = "parked_full"
            turn.settled = Settled.ENDED
            turn.log("mrtr_registry_full", warning=True, max_parked=self.registry.max_parked)
            rejection = Rejection(
                INTERNAL_ERROR,
                f"Internal error: the gateway already holds {self.registry.max_parked} "
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
            seal_state(self._sealer, claims),
            ex.pooled.server_info,
        )
        turn.state.outcome = "input_required"
        turn.settled = Settled.PARKED
        turn.log(
            "mrtr_parked",
            exchange=ex.fingerprint,
            round=ex.round,
            keys=len(ex.pending),
            parked=len(self.registry),
        )
        return Frame({"jsonrpc": "2.0", "id": call.id, "result": result}, True)

    async def settle(self, ex: LiveExchange, turn: Turn) -> None:
        """After a turn: keep what was parked, tidy what completed, end what was left."""
        if turn.settled is Settled.COMPLETED:
            try:
                await ex.close_stream(answered=True)
            finally:
                await self.release_lane(ex, reusable=True)
        elif turn.settled is None:
            # The client went away (or something broke) mid-turn: nobody will
            # finish this call. Cleanup must not be cut short by our own cancellation.
            turn.state.outcome = "cancelled"
            self.spawn(self.abandon(ex, "client closed the response stream"))

    async def abandon(self, ex: LiveExchange, reason: str, *, timed_out: bool = False) -> None:
        """End a call nobody will finish (`LiveExchange.abandon`); its lane closed."""
        if not ex.ended:
            log.info("mrtr_abandoned", exchange=ex.fingerprint, reason=reason, round=ex.round)
        try:
            await ex.abandon(reason, timed_out=timed_out)
        finally:
            await self.release_lane(ex, reusable=False)

    async def release_lane(self, ex: LiveExchange, *, reusable: bool) -> None:
        lane, ex.lane = ex.lane, None
        if lane is not None:
            await self._lanes.release(lane, reusable=reusable)

    def _expired(self, ex: LiveExchange) -> None:
        self.spawn(self.abandon(ex, "no retry within MCP_SHIM_MRTR_TTL_S", timed_out=True))

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def aclose(self) -> None:
        """Shutdown: every parked exchange abandoned; each task left, up to 2 s."""
        for ex in self.registry.drain():
            self.spawn(self.abandon(ex, "gateway shutting down"))
        for task in list(self._background):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 2.0)
