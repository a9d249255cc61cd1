"""What a connection bound says when it is hit: to the client, `server_busy`'s
503; to the operator, one log line per kind of event and period
(`RateLimitedLog`), with how many times since the last one. Used by the
gateway's HTTP protocol (app/serving/http_protocol.py) and by the fronts and
the cluster, which bound what they hold themselves, so it sits below them all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from app.rejections import INTERNAL_ERROR, Rejection

log = structlog.get_logger("mcp_shim.connections")

_LOG_EVERY_S = 10.0


@dataclass(slots=True)
class _Counter:
    """Counts events of one kind; says when a log line is due (first event, then
    at most one per period), with the number since the previous line."""

    every_s: float = _LOG_EVERY_S
    pending: int = 0
    last: float = field(default=-1e18)

    def hit(self) -> int | None:
        self.pending += 1
        now = time.monotonic()
        if now - self.last < self.every_s:
            return None
        self.last = now
        count, self.pending = self.pending, 0
        return count


class RateLimitedLog:
    def __init__(self, every_s: float = _LOG_EVERY_S) -> None:
        self._every_s = every_s
        self._counters: dict[str, _Counter] = {}

    def event(self, event: str, **fields: Any) -> None:
        counter = self._counters.setdefault(event, _Counter(self._every_s))
        count = counter.hit()
        if count is not None:
            log.warning(event, count_since_last=count, **fields)


def server_busy(what: str) -> Rejection:
    """What a client gets at MCP_SHIM_MAX_CONNECTIONS, the bound on the requests it
    may have running or waiting: on `POST /mcp` each holds a connection, so the
    connections bound them; on an HTTP+SSE channel, whose `POST /messages` is
    answered 202 at once, the channel counts them itself (app/fronts/http_sse)."""
    return Rejection(
        INTERNAL_ERROR,
        f"Server busy: {what} (MCP_SHIM_MAX_CONNECTIONS); retry later",
        status=503,
    )
