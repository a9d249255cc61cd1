"""Sealing `requestState`: what the gateway needs on a retry, under AES-GCM.

2026-07-28 basic/patterns/mrtr: `requestState` is attacker-controlled input;
its integrity MUST be protected, and it SHOULD bind the principal, a short
expiry and the originating request (method and a digest of its parameters).
The claims sealed here are exactly those, plus the parked exchange's id, the
replica that holds it and the round it belongs to (a state from an earlier
round is stale: every round gets a fresh state, so they differ).

The token's layout, the keys and their rotation are the cluster's sealing
(app/cluster/sealing.py), shared with the other sealed ids. Pure: no clock
(callers pass `now`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from app import jsonio
from app.cluster.sealing import Sealer, b64url

# Parameters that change between the first call and its retries, or are
# per-request metadata: not part of "the same request".
_UNBOUND_PARAMS: Final = frozenset({"_meta", "inputResponses", "requestState"})


@dataclass(frozen=True, slots=True)
class Claims:
    """What a sealed `requestState` says."""

    exchange: str  # id of the parked exchange
    replica: str  # the replica holding it: its advertised base URL, or a local id
    caller: str  # digest of the caller's credentials
    method: str
    digest: str  # params_digest of the original request
    expires_at: int  # unix seconds
    round: int  # which input_required answer of the exchange issued it

    def to_json(self) -> dict[str, Any]:
        return {
            "x": self.exchange,
            "r": self.replica,
            "c": self.caller,
            "m": self.method,
            "d": self.digest,
            "e": self.expires_at,
            "n": self.round,
        }

    @staticmethod
    def from_json(data: Any) -> Claims | None:
        if not isinstance(data, dict):
            return None
        strings = [data.get(k) for k in ("x", "r", "c", "m", "d")]
        numbers = [data.get(k) for k in ("e", "n")]
        if not all(isinstance(s, str) for s in strings):
            return None
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            return None
        return Claims(
            exchange=data["x"],
            replica=data["r"],
            caller=data["c"],
            method=data["m"],
            digest=data["d"],
            expires_at=data["e"],
            round=data["n"],
        )


def params_digest(params: Mapping[str, Any]) -> str:
    """Digest of the request's own parameters (name/uri and arguments), order-free."""
    bound = {k: v for k, v in params.items() if k not in _UNBOUND_PARAMS}
    return b64url(hashlib.sha256(jsonio.dumps_sorted(bound)).digest()[:16])


def seal_state(sealer: Sealer, claims: Claims) -> str:
    """A `requestState` naming `claims`."""
    return sealer.seal_bytes(jsonio.dumps(claims.to_json()))


def open_state(sealer: Sealer, token: object) -> Claims | None:
    """The claims, or None for anything that is not a state we sealed, unaltered.

    Expiry and binding are the caller's checks (it knows the clock and the
    request); one None for every failure keeps attackers guessing.
    """
    plain = sealer.open_bytes(token)
    if plain is None:
        return None
    try:
        return Claims.from_json(jsonio.loads(plain))
    except jsonio.JSONDecodeError:
        return None
