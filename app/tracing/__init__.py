"""W3C Trace Context (https://www.w3.org/TR/trace-context/), and the gateway's spans.

The gateway checks a client's `traceparent` (and `tracestate`) against the W3C
format; an invalid one is dropped, never forwarded. The pair travels in a
context variable set by the route, so the transport adds it to the requests
of this call only (each request runs in its own task and context copy)
without every layer in between passing it along.

Without export (the default) the gateway creates no spans and sends the
client's valid pair upstream unchanged. With export asked for by the
standard `OTEL_*` variables (app/tracing/export.py), each POST /mcp is a
server span whose parent is the client's traceparent, each upstream request a
client span under it, and the upstream gets that client span's traceparent
(app/tracing/spans.py, which alone imports the OpenTelemetry SDK). The hooks
below are what the rest of the gateway calls: off, each costs a global or a
context variable read (bench/tracing_cpu.py).
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# version "-" trace-id "-" parent-id "-" trace-flags, lowercase hex (W3C 3.2.2).
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(.*)$")
_ZERO_TRACE = "0" * 32
_ZERO_PARENT = "0" * 16
# tracestate list members (W3C 3.3.1): key "=" value, at most 32 of them.
_TRACESTATE_KEY = re.compile(
    r"^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})$"
)
_TRACESTATE_VALUE = re.compile(
    r"^[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$"
)
_MAX_MEMBERS = 32
# Version 00 is 55 characters; later versions may add fields, not kilobytes.
_MAX_TRACEPARENT = 512
# W3C 3.3.1.5: vendors propagate at least 512 characters; far longer is junk.
_MAX_TRACESTATE = 8192


@dataclass(frozen=True, slots=True)
class TraceContext:
    traceparent: str
    tracestate: str | None

    @property
    def trace_id(self) -> str:
        return self.traceparent[3:35]

    def headers(self) -> dict[str, str]:
        out = {"traceparent": self.traceparent}
        if self.tracestate is not None:
            out["tracestate"] = self.tracestate
        return out


def parse_traceparent(value: str) -> str | None:
    """The header value if it is a valid traceparent (W3C 3.2), else None."""
    if len(value) > _MAX_TRACEPARENT:
        return None
    match = _TRACEPARENT.match(value.strip())
    if match is None:
        return None
    version, trace_id, parent_id, _flags, rest = match.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or parent_id == _ZERO_PARENT:
        return None
    # Version 00 has exactly four fields; a later version may append fields
    # after a dash, which a version-00 reader leaves alone (W3C 3.2.4).
    if version == "00" and rest:
        return None
    if rest and not rest.startswith("-"):
        return None
    return value.strip()


def parse_tracestate(values: Sequence[str]) -> str | None:
    """The combined tracestate if every list member is well formed (W3C 3.3), else None."""
    combined = ",".join(v for v in values if v.strip())
    if not combined or len(combined) > _MAX_TRACESTATE:
        return None
    members = [m.strip() for m in combined.split(",")]
    members = [m for m in members if m]  # empty members are allowed and ignored
    if not members or len(members) > _MAX_MEMBERS:
        return None
    keys: set[str] = set()
    for member in members:
        key, sep, val = member.partition("=")
        if not sep or not _TRACESTATE_KEY.match(key) or not _TRACESTATE_VALUE.match(val):
            return None
        if key in keys:  # W3C 3.3.1.1: a key appears at most once
            return None
        keys.add(key)
    return ",".join(members)


def from_headers(traceparents: Sequence[str], tracestates: Sequence[str]) -> TraceContext | None:
    """The client's trace context, or None when it is absent or invalid. More than
    one traceparent is invalid; an invalid tracestate is dropped on its own."""
    if len(traceparents) != 1:
        return None
    parent = parse_traceparent(traceparents[0])
    if parent is None:
        return None
    return TraceContext(parent, parse_tracestate(tracestates) if tracestates else None)


_current: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar(
    "mcp_shim_trace", default=None
)


def bind(context: TraceContext | None) -> None:
    """Make `context` the trace of this task (the route's request and what it spawns)."""
    _current.set(context)


def current() -> TraceContext | None:
    """The client's trace context bound to this task, if any."""
    return _current.get()


def outgoing_headers() -> dict[str, str]:
    """Headers for an upstream request made on behalf of the current call: the
    current span's traceparent when exporting, else the client's pair."""
    span = _span.get()
    if span is not None and _spans is not None:
        return _spans.headers(span)
    context = _current.get()
    return context.headers() if context is not None else {}


# -- spans: no-ops unless app/tracing/export.py started the export ---------------


class Spans(Protocol):
    """What app/tracing/spans.py's `Spans` does for the hooks below."""

    def headers(self, span: Any) -> dict[str, str]: ...

    def server(self, headers: Any, scope: Mapping[str, Any], var: SpanVar) -> Any: ...

    def client(
        self,
        message: Mapping[str, Any],
        version: str | None,
        session_id: str | None,
        url: Any,
        var: SpanVar,
    ) -> Any: ...

    def describe(
        self, span: Any, method: str, request_id: Any, version: str | None, params: Any
    ) -> None: ...

    def note(
        self,
        span: Any,
        outcome: str | None,
        upstream_version: str | None,
        code: int | None,
        status: int | None,
    ) -> None: ...


SpanVar = contextvars.ContextVar[Any]

# The live exporter of this process (one per worker), or None.
_spans: Spans | None = None
# The current call's span: its server span, or inside an upstream request the client span.
_span: SpanVar = contextvars.ContextVar("mcp_shim_span", default=None)

Send = Callable[[Any], Any]


class _Off:
    """What every span hook returns when nothing is exported: one shared object."""

    __slots__ = ()

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def watch(self, send: Send) -> Send:
        return send

    def headers(self) -> dict[str, str]:
        return outgoing_headers()

    def answered(self, status: int, http_version: str | None = None) -> None:
        return None


OFF = _Off()


def set_spans(spans: Spans | None) -> None:
    """Start (or, with None, stop) the spans of this process (app/tracing/export.py)."""
    global _spans
    _spans = spans


def exporting() -> bool:
    return _spans is not None


def serving(headers: Mapping[str, str], scope: Mapping[str, Any]) -> Any:
    """The server span of one POST /mcp, as a context manager whose `watch(send)`
    records the answer's status; `OFF` when not exporting."""
    spans = _spans
    if spans is None:
        return OFF
    return spans.server(headers, scope, _span)


def upstream_call(
    message: Mapping[str, Any], version: str | None, session_id: str | None, url: Any
) -> Any:
    """A client span around one upstream request, as a context manager with
    `headers()` (the trace headers to send) and `answered(status)`; `OFF` when
    not exporting, whose `headers()` are `outgoing_headers()`."""
    spans = _spans
    if spans is None:
        return OFF
    return spans.client(message, version, session_id, url, _span)


def describe(method: str, request_id: Any, version: str | None, params: Any) -> None:
    """The client's call, once parsed: the server span's MCP attributes and name."""
    span = _span.get()
    if span is not None and _spans is not None:
        _spans.describe(span, method, request_id, version, params)


def note(
    *,
    outcome: str | None = None,
    upstream_version: str | None = None,
    code: int | None = None,
    status: int | None = None,
) -> None:
    """How the call ended: its outcome, the upstream's protocol version, the
    JSON-RPC error code and the HTTP status of the gateway's answer."""
    span = _span.get()
    if span is not None and _spans is not None:
        _spans.note(span, outcome, upstream_version, code, status)


def event(name: str, attributes: Mapping[str, str | int] | None = None) -> None:
    """A step of the current call (translation, an MRTR round, a task step)."""
    span = _span.get()
    # Not recording: not sampled, or ended while a task the call started goes on.
    if span is not None and span.is_recording():
        span.add_event(name, attributes)
