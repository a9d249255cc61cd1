"""Modern calls and the gateway around a scripted upstream, for the seam's unit tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson

from app.call import CallState, ModernCall, Outgoing
from app.cluster.forwarding import ReplicaForwarder
from app.cluster.replicas import ReplicaRelay
from app.cluster.sealing import Sealer
from app.fronts.modern import checks as modern
from app.fronts.modern.gateway import Gateway
from app.mrtr.bridge import Bridge
from app.mrtr.forwarder import Forwarder
from app.mrtr.lanes import Lanes
from app.mrtr.turn import BridgeSettings
from app.upstream.sessions.pool import SessionPool
from tests.seam_fake import ScriptedTransport, drain
from translators.registry import get_version

MODERN = "2026-07-28"
OFFERED = get_version("2025-11-25")
assert OFFERED is not None
REPLICA = "local:seam-test"
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def modern_call(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    rid: Any = 1,
    caps: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> ModernCall:
    """A 2026-07-28 request as the modern front parses it (app/fronts/modern/checks.py)."""
    body_params = dict(params or {})
    body_params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps or {},
        **(meta or {}),
    }
    message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": body_params}
    headers = {"mcp-protocol-version": MODERN, "mcp-method": method}
    if method in NAMED:
        headers["mcp-name"] = str(body_params[NAMED[method]])
    parsed = modern.parse(orjson.dumps(message), headers)
    assert isinstance(parsed, ModernCall), parsed
    return parsed


@dataclass
class Rig:
    transport: ScriptedTransport
    pool: SessionPool
    gateway: Gateway
    bridge: Bridge | None
    sealer: Sealer

    async def run(
        self, call: ModernCall, authorization: str | None = None
    ) -> tuple[list[Outgoing], CallState]:
        state = CallState(request_id="seam-test")
        outs = await drain(self.gateway.run(call, authorization, state))
        assert outs and outs[-1].final, outs
        return outs, state


@asynccontextmanager
async def gateway_rig(
    transport: ScriptedTransport,
    *,
    bridged: bool = False,
    deadline_s: float = 30.0,
    quiet_s: float = 0.05,
) -> AsyncIterator[Rig]:
    """The gateway as app/serving/server.py builds it, on `transport`; with the MRTR bridge
    (and its lanes) when `bridged`."""
    pool = SessionPool(transport, max_sessions=8, idle_s=300)
    sealer = Sealer([os.urandom(32)])
    bridge = None
    relay = ReplicaRelay(connect_timeout_s=1.0, request_timeout_s=1.0)
    # One forwarder for the gateway and the bridge, as app/wiring.py builds them.
    forwarder = Forwarder(pool, ttl_ms=5000, cache_scope="private")
    if bridged:
        lanes = Lanes(pool, idle_s=300, listen_wait_s=2.0)
        bridge = Bridge(
            lanes=lanes,
            sealer=sealer,
            forwarder=ReplicaForwarder(relay),
            upstream=forwarder,
            settings=BridgeSettings(ttl_s=60, quiet_s=quiet_s, gather_max_s=1.0, replica=REPLICA),
            max_parked=8,
        )
    gateway = Gateway(
        pool,
        offered_version=OFFERED,
        ttl_ms=5000,
        cache_scope="private",
        bridge=bridge,
        call_deadline_s=deadline_s,
        forwarder=forwarder,
    )
    try:
        yield Rig(transport, pool, gateway, bridge, sealer)
    finally:
        if bridge is not None:
            await bridge.aclose()
        await gateway.aclose()
        await pool.aclose()
        await relay.aclose()
