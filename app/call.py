"""What the layers of one call hand each other: a JSON-RPC `Message`, a
validated 2026-07-28 request (`ModernCall`) or notification
(`ModernNotification`), its messages for the client (`Outgoing`), what is
logged of it (`CallState`), and the timing of its upstream part (`CallTiming`,
bound to the request's context by `start_call`).

Plain values at the bottom of the import graph: this module imports nothing of
the project but the request id and version values (app/rejections.py,
translators/registry.py), so the route, the fronts, the MRTR and tasks
bridges, subscriptions, the answer writer and the upstream transports all
import it, and none of them imports another to name a call's values
(docs/architecture.md, "Imports point down"). The modern front builds a
`ModernCall` (app/fronts/modern/checks.py); app/metrics.py turns a finished
call's timing into its series.

The upstream part of a call is timed through a small holder bound to a context
variable for the request (`start_call`): `upstream_sent` when the gateway sends
the call (or the MRTR bridge feeds an answer), `upstream_answered` when the
upstream's response to it arrives. The holder, not the variable, is updated,
so the time is seen whatever task the generator ran in.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.rejections import RequestId
from translators.registry import Version

# A parsed JSON-RPC message, as every layer passes it.
Message = dict[str, Any]

# 2026-07-28 server/utilities/logging, least severe first: a request's
# `io.modelcontextprotocol/logLevel` is one of them.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass(frozen=True, slots=True)
class ModernCall:
    """A validated 2026-07-28 request."""

    id: RequestId
    method: str
    params: dict[str, Any]
    message: Message
    version: Version
    client_capabilities: dict[str, Any]
    log_level: str | None
    # `Mcp-Param-*` headers as sent, by lower-cased name: checked against the
    # tool's `x-mcp-header` annotations once the tool list is known.
    param_headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ModernNotification:
    """A validated 2026-07-28 notification (accepted, nothing to answer)."""

    method: str
    message: Message


@dataclass(slots=True)
class Outgoing:
    """One message for the client. `final` marks the answer; `keepalive` is an
    SSE comment with no message (long-lived streams)."""

    message: Message
    final: bool = False
    status: int = 200
    keepalive: bool = False
    # Extra response headers of a JSON answer (an upstream's WWW-Authenticate).
    headers: tuple[tuple[str, str], ...] = ()
    # SSE event id (legacy clients: the upstream's, so Last-Event-ID resumes there).
    event_id: str | None = None


@dataclass(slots=True)
class CallState:
    """What the HTTP layer logs about a call once it ends."""

    upstream_version: str | None = None
    outcome: str = "pending"
    request_id: str | None = None
    # Forwarded by another replica to this one (app/cluster/forwarding.py): never again.
    hop: bool = False
    # The gateway's MCP URL for this request (app/fronts/shared/auth.py), None if it cannot be told.
    gateway_url: str | None = None


# -- the upstream part of one call ------------------------------------------------


class CallTiming:
    """When the gateway last sent something upstream for this call, and how long
    the upstream took to answer it (None: it never answered).

    With `timeline` (log level debug), also when each step of the call
    happened (`mark`): the route logs them as one `call_timeline` line, which
    is how the tail of a call is taken apart (bench/timeline.py). Off, a mark
    costs one attribute test."""

    __slots__ = ("marks", "sent", "upstream_s")

    def __init__(self, timeline: bool = False) -> None:
        self.sent: float | None = None
        self.upstream_s: float | None = None
        self.marks: list[tuple[str, float]] | None = [] if timeline else None

    def timeline(self, started: float) -> dict[str, float]:
        """Each mark's time since `started`, in ms. A repeated mark counts its
        last time: the call's own request, not the session's opening before it
        (`initialize` has an answer head too), nor an MRTR bridge's earlier rounds."""
        return {name + "_ms": round((at - started) * 1000, 3) for name, at in self.marks or ()}


_timing: contextvars.ContextVar[CallTiming | None] = contextvars.ContextVar(
    "mcp_shim_call_timing", default=None
)


def start_call(timeline: bool = False) -> CallTiming:
    """A fresh timing holder for the request running in this context."""
    timing = CallTiming(timeline)
    _timing.set(timing)
    return timing


def mark(step: str) -> None:
    """A step of the call's timeline (only recorded at log level debug)."""
    timing = _timing.get()
    if timing is not None and timing.marks is not None:
        timing.marks.append((step, time.perf_counter()))


def upstream_sent() -> None:
    """The call (or an answer of the MRTR bridge) was just sent upstream."""
    timing = _timing.get()
    if timing is not None:
        timing.sent = time.perf_counter()
        if timing.marks is not None:
            timing.marks.append(("upstream_sent", timing.sent))


def upstream_answered() -> None:
    """The upstream's response to the call just arrived."""
    timing = _timing.get()
    if timing is not None and timing.sent is not None:
        now = time.perf_counter()
        timing.upstream_s = now - timing.sent
        if timing.marks is not None:
            timing.marks.append(("answer_read", now))
