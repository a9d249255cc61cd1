"""One HTTP request's turn at a multi round-trip exchange (`Turn`), and the
bridge's settings (app/mrtr/bridge.py).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from app.call import CallState, ModernCall
from app.cluster.sealing import caller_digest
from app.upstream.sessions.pool import SessionKey, credential_hash

log = structlog.get_logger("mcp_shim.mrtr")


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
