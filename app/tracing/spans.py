"""The gateway's spans, made with the OpenTelemetry SDK and exported over OTLP.

Imported only when the `OTEL_*` variables ask for export (app/tracing/export.py):
without it the gateway never loads the SDK (tests/unit/test_start_up_imports.py).

Names and attributes follow OpenTelemetry's semantic conventions for MCP
(development status): a span is named `{mcp.method.name} {target}` with the
tool or prompt name as target; `mcp.method.name`, `mcp.protocol.version`,
`jsonrpc.request.id`, `gen_ai.tool.name`, `gen_ai.prompt.name`,
`mcp.resource.uri`, `rpc.response.status_code` and `error.type` as the
conventions define them; `mcp.session.id` is a digest of the session id,
never the id itself (it is a credential of the session). The server span's
`mcp.protocol.version` is the client's revision, the client span's the
upstream's; the `mcp_shim.*` attributes are the gateway's own.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.trace.span import TraceState

from app import tracing

SpanVar = contextvars.ContextVar[Any]

_SESSION_HEADER = "mcp-session-id"
_VERSION_HEADER = "mcp-protocol-version"
# The methods whose params name a resource (the conventions' `mcp.resource.uri`).
_RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})
# Bounds on what a client's message can put into an exported attribute.
_MAX_NAME = 256
_MAX_URI = 2048


def session_digest(session_id: str) -> str:
    """What `mcp.session.id` carries: the session id's digest (the id itself is
    the session's bearer: whoever has it speaks in the session)."""
    return hashlib.blake2b(session_id.encode(), digest_size=16).hexdigest()


def call_attributes(method: str, request_id: Any, params: Any) -> dict[str, Any]:
    """The conventions' attributes of one MCP request, from its method and params."""
    attributes: dict[str, Any] = {"mcp.method.name": method[:_MAX_NAME]}
    if request_id is not None and not isinstance(request_id, bool):
        attributes["jsonrpc.request.id"] = str(request_id)[:_MAX_NAME]
    if not isinstance(params, Mapping):
        return attributes
    name = params.get("name")
    if isinstance(name, str):
        if method == "tools/call":
            attributes["gen_ai.tool.name"] = name[:_MAX_NAME]
            attributes["gen_ai.operation.name"] = "execute_tool"
        elif method == "prompts/get":
            attributes["gen_ai.prompt.name"] = name[:_MAX_NAME]
    uri = params.get("uri")
    if method in _RESOURCE_METHODS and isinstance(uri, str):
        attributes["mcp.resource.uri"] = uri[:_MAX_URI]
    return attributes


def span_name(attributes: Mapping[str, Any]) -> str:
    """`{mcp.method.name} {target}`: the tool or prompt, else the method alone."""
    method = attributes.get("mcp.method.name", "mcp")
    target = attributes.get("gen_ai.tool.name") or attributes.get("gen_ai.prompt.name")
    return f"{method} {target}" if target else str(method)


def _failed(span: Span, error_type: str, message: str | None = None) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, message))


def _answered(span: Span, status: int) -> None:
    """The HTTP status of the gateway's answer (an answer written whole bypasses
    the ASGI send: the route reports it then)."""
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        _failed(span, str(status))


def _remote_parent(context: tracing.TraceContext | None) -> Any:
    """The client's trace context as the parent of the gateway's span, or None (a root)."""
    if context is None:
        return None
    value = context.traceparent
    state = TraceState.from_header([context.tracestate]) if context.tracestate else None
    parent = SpanContext(
        trace_id=int(value[3:35], 16),
        span_id=int(value[36:52], 16),
        is_remote=True,
        trace_flags=TraceFlags(int(value[53:55], 16)),
        trace_state=state,
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


class Serving:
    """The server span of one POST /mcp: current while the call runs, ended
    when the answer was written (or the call failed)."""

    __slots__ = ("_token", "_var", "span")

    def __init__(self, span: Span, var: SpanVar) -> None:
        self.span = span
        self._var = var
        self._token: contextvars.Token[Any] | None = None

    def __enter__(self) -> Serving:
        self._token = self._var.set(self.span)
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.span.record_exception(exc)
            _failed(self.span, type(exc).__qualname__)
        if self._token is not None:
            self._var.reset(self._token)
        self.span.end()

    def watch(self, send: Any) -> Any:
        span = self.span

        async def watched(message: Any) -> None:
            if message["type"] == "http.response.start":
                _answered(span, int(message["status"]))
            await send(message)

        return watched


class Upstream:
    """The client span of one upstream request: from its send to its answer's head."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def __enter__(self) -> Upstream:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.span.record_exception(exc)
            _failed(self.span, type(exc).__qualname__, str(exc)[:_MAX_URI])
        self.span.end()

    def headers(self) -> dict[str, str]:
        return headers_of(self.span)

    def answered(self, status: int, http_version: str | None = None) -> None:
        self.span.set_attribute("http.response.status_code", status)
        if http_version:
            self.span.set_attribute("network.protocol.version", http_version.removeprefix("HTTP/"))
        if status >= 400:
            _failed(self.span, str(status))


def headers_of(span: Span) -> dict[str, str]:
    """The W3C pair that makes `span` the parent of what the upstream does."""
    context = span.get_span_context()
    flags = int(context.trace_flags)
    out = {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"}
    if context.trace_state:
        out["tracestate"] = context.trace_state.to_header()
    return out


def _server_address(url: Any) -> dict[str, Any]:
    if isinstance(url, str):
        parts = urlsplit(url)
        host, port, scheme = parts.hostname, parts.port, parts.scheme
    else:  # httpx.URL
        host, port, scheme = url.host, url.port, url.scheme
    if not host:
        return {}
    return {"server.address": host, "server.port": port or (443 if scheme == "https" else 80)}


class Spans:
    """This process's tracer and its exporter; one per worker process."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        # Not the global provider: FastAPI's own telemetry turns itself on when a
        # global one is set, and would add spans of its own to every route.
        self._tracer = provider.get_tracer("mcp-shim")

    @classmethod
    def from_environment(cls) -> Spans:
        """The SDK's OTLP/HTTP exporter and sampler, configured by the `OTEL_*` variables."""
        resource = Resource.create()
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: "mcp-shim"}))
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider)

    def shutdown(self) -> None:
        """Export what is left, then stop (blocking: run it in a thread)."""
        self._provider.shutdown()

    def headers(self, span: Span) -> dict[str, str]:
        return headers_of(span)

    def server(self, headers: Any, scope: Mapping[str, Any], var: SpanVar) -> Serving:
        parent = tracing.from_headers(headers.getlist("traceparent"), headers.getlist("tracestate"))
        attributes: dict[str, Any] = {
            "network.protocol.name": "http",
            "network.protocol.version": str(scope.get("http_version", "1.1")),
            "network.transport": "tcp",
        }
        server = scope.get("server")
        if server and server[1] is not None:
            attributes["server.address"], attributes["server.port"] = server[0], int(server[1])
        session_id = headers.get(_SESSION_HEADER)
        if session_id:
            attributes["mcp.session.id"] = session_digest(session_id)
        version = headers.get(_VERSION_HEADER)
        if version:
            attributes["mcp.protocol.version"] = version[:_MAX_NAME]
        span = self._tracer.start_span(
            "mcp", context=_remote_parent(parent), kind=SpanKind.SERVER, attributes=attributes
        )
        return Serving(span, var)

    def client(
        self,
        message: Mapping[str, Any],
        version: str | None,
        session_id: str | None,
        url: Any,
        var: SpanVar,
    ) -> Upstream:
        method = message.get("method")
        if isinstance(method, str):
            attributes = call_attributes(method, message.get("id"), message.get("params"))
        else:  # the answer to a request of the upstream's
            attributes = {"mcp.method.name": "response"}
            if message.get("id") is not None:
                attributes["jsonrpc.request.id"] = str(message.get("id"))[:_MAX_NAME]
        attributes.update(_server_address(url))
        attributes["network.protocol.name"] = "http"
        attributes["network.transport"] = "tcp"
        if version is not None:
            attributes["mcp.protocol.version"] = version
        if session_id is not None:
            attributes["mcp.session.id"] = session_digest(session_id)
        current = var.get()
        if current is not None:
            parent = trace.set_span_in_context(current)
        else:  # a request of no POST /mcp (an HTTP+SSE client's, a stream's)
            parent = _remote_parent(tracing.current())
        span = self._tracer.start_span(
            span_name(attributes), context=parent, kind=SpanKind.CLIENT, attributes=attributes
        )
        return Upstream(span)

    def describe(
        self, span: Span, method: str, request_id: Any, version: str | None, params: Any
    ) -> None:
        if not span.is_recording():
            return
        attributes = call_attributes(method, request_id, params)
        if version is not None:
            attributes["mcp.protocol.version"] = version
        span.set_attributes(attributes)
        span.update_name(span_name(attributes))

    def note(
        self,
        span: Span,
        outcome: str | None,
        upstream_version: str | None,
        code: int | None,
        status: int | None,
    ) -> None:
        if not span.is_recording():
            return
        if status is not None:
            _answered(span, status)
        # One set: the SDK checks and locks once per call of set_attribute(s).
        noted = {
            "mcp_shim.outcome": outcome,
            "mcp_shim.upstream.protocol.version": upstream_version,
        }
        span.set_attributes({k: v for k, v in noted.items() if v is not None})
        if code is not None:
            span.set_attribute("rpc.response.status_code", str(code))
            _failed(span, str(code))
