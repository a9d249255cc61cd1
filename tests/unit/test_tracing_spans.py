"""The gateway's spans (app/tracing/): when the OTEL_* variables turn export on,
what a span is named and carries, who its parent is, what traceparent goes
upstream; and that nothing of it runs or loads when export is off.

Spans are taken with the SDK's in-memory exporter here; the real export over
OTLP to a real receiver is tests/integration/test_tracing_otlp.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import structlog.testing
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from app import tracing
from app.config import Settings
from app.settings.check import unknown_variables
from app.tracing import export, spans
from tests import procs

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


class Headers(dict[str, str]):
    """The route's ScopeHeaders, as far as the spans read it."""

    def getlist(self, name: str) -> list[str]:
        return [self[name]] if name in self else []


@pytest.fixture
def finished() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.set_spans(spans.Spans(provider))
    try:
        yield memory
    finally:
        tracing.set_spans(None)
        provider.shutdown()


def attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


SCOPE = {"http_version": "1.1", "server": ("127.0.0.1", 8080)}


def test_server_span_in_the_clients_trace_and_upstream_span_under_it(
    finished: InMemorySpanExporter,
) -> None:
    headers = Headers(traceparent=TRACEPARENT, tracestate="rojo=1")
    tracing.bind(tracing.from_headers([TRACEPARENT], ["rojo=1"]))
    with tracing.serving(headers, SCOPE):
        tracing.describe("tools/call", 7, "2026-07-28", {"name": "echo", "arguments": {}})
        message = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo"}}
        with tracing.upstream_call(message, "2025-11-25", "s3cret", "http://up:9/mcp") as up:
            sent = up.headers()
            up.answered(200, "HTTP/1.1")
        tracing.event("mcp_shim.translate", {"mcp_shim.to": "2025-11-25"})
        tracing.note(outcome="ok", upstream_version="2025-11-25", status=200)
    upstream, server = finished.get_finished_spans()
    assert server.name == "tools/call echo" and server.kind == SpanKind.SERVER
    assert f"{server.context.trace_id:032x}" == TRACE_ID
    assert server.parent is not None and server.parent.span_id == 0x00F067AA0BA902B7
    assert attrs(server) == {
        "network.protocol.name": "http",
        "network.protocol.version": "1.1",
        "network.transport": "tcp",
        "server.address": "127.0.0.1",
        "server.port": 8080,
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": "7",
        "gen_ai.tool.name": "echo",
        "gen_ai.operation.name": "execute_tool",
        "mcp.protocol.version": "2026-07-28",
        "http.response.status_code": 200,
        "mcp_shim.outcome": "ok",
        "mcp_shim.upstream.protocol.version": "2025-11-25",
    }
    assert [e.name for e in server.events] == ["mcp_shim.translate"]
    assert upstream.kind == SpanKind.CLIENT and upstream.name == "tools/call echo"
    assert upstream.parent is not None and upstream.parent.span_id == server.context.span_id
    up_attrs = attrs(upstream)
    assert up_attrs["mcp.protocol.version"] == "2025-11-25"
    assert up_attrs["server.address"] == "up" and up_attrs["server.port"] == 9
    assert up_attrs["jsonrpc.request.id"] == "3"
    assert up_attrs["mcp.session.id"] == spans.session_digest("s3cret") != "s3cret"
    # The upstream is asked to continue from the client span; the client's tracestate goes on.
    assert sent == {
        "traceparent": f"00-{TRACE_ID}-{upstream.context.span_id:016x}-01",
        "tracestate": "rojo=1",
    }
    tracing.bind(None)


def test_a_gateway_error_and_an_upstream_failure_mark_their_spans(
    finished: InMemorySpanExporter,
) -> None:
    tracing.bind(None)
    with tracing.serving(Headers(), SCOPE):
        tracing.note(outcome="rejected", code=-32602)
        with pytest.raises(ConnectionError), tracing.upstream_call({}, None, None, "http://u/"):
            raise ConnectionError("refused")
    upstream, server = finished.get_finished_spans()
    assert server.parent is None  # no traceparent: the gateway starts the trace
    assert server.status.status_code == StatusCode.ERROR
    assert attrs(server)["rpc.response.status_code"] == "-32602"
    assert attrs(server)["error.type"] == "-32602"
    assert upstream.status.status_code == StatusCode.ERROR
    assert attrs(upstream)["error.type"] == "ConnectionError"


def test_the_answer_status_is_taken_from_the_asgi_send(finished: InMemorySpanExporter) -> None:
    sent: list[object] = []

    async def send(message: object) -> None:
        sent.append(message)

    async def answer() -> None:
        with tracing.serving(Headers(), SCOPE) as span:
            await span.watch(send)({"type": "http.response.start", "status": 503})

    asyncio.run(answer())
    (server,) = finished.get_finished_spans()
    assert sent and attrs(server)["http.response.status_code"] == 503
    assert server.status.status_code == StatusCode.ERROR


def test_off_every_hook_is_the_shared_no_op_and_the_clients_pair_goes_upstream() -> None:
    assert not tracing.exporting()
    tracing.bind(tracing.from_headers([TRACEPARENT], []))
    try:
        assert tracing.serving(Headers(), SCOPE) is tracing.OFF
        with tracing.upstream_call({}, None, None, "http://u/") as up:
            assert up is tracing.OFF
            assert up.headers() == {"traceparent": TRACEPARENT}
        tracing.describe("tools/list", 1, None, {})
        tracing.note(outcome="ok")
        tracing.event("x")
    finally:
        tracing.bind(None)


def test_long_names_from_a_client_are_cut() -> None:
    found = spans.call_attributes("tools/call", "i" * 999, {"name": "n" * 999})
    assert len(str(found["jsonrpc.request.id"])) == 256
    assert len(str(found["gen_ai.tool.name"])) == 256
    assert spans.call_attributes("tools/call", True, None) == {"mcp.method.name": "tools/call"}
    assert spans.call_attributes("resources/read", None, {"uri": "file:///a"}) == {
        "mcp.method.name": "resources/read",
        "mcp.resource.uri": "file:///a",
    }
    assert spans.span_name({"mcp.method.name": "prompts/get", "gen_ai.prompt.name": "p"}) == (
        "prompts/get p"
    )


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, (False, None)),
        ({"OTEL_SERVICE_NAME": "gw"}, (False, None)),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, (True, None)),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, (True, None)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, (True, None)),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_TRACES_EXPORTER": "none"},
            (False, None),
        ),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, (False, None)),
        (
            {"OTEL_TRACES_EXPORTER": "zipkin"},
            (False, "OTEL_TRACES_EXPORTER=zipkin: the gateway exports with otlp only"),
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            (False, "OTLP protocol 'grpc': the gateway exports with http/protobuf only"),
        ),
    ],
)
def test_export_is_on_only_when_the_otel_variables_ask(
    environ: dict[str, str], expected: tuple[bool, str | None]
) -> None:
    assert export.choice(environ) == expected


def test_exported_starts_and_stops_the_spans_of_the_process() -> None:
    async def life() -> list[bool]:
        seen = [tracing.exporting()]
        environ = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_BSP_EXPORT_TIMEOUT": "100"}
        async with export.exported(environ):
            seen.append(tracing.exporting())
        seen.append(tracing.exporting())
        return seen

    assert asyncio.run(life()) == [False, True, False]


def test_otel_variables_are_no_unknown_settings() -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SERVICE_NAME": "gw"}
    assert unknown_variables(environ, Settings.model_fields) == []


_IMPORTS = """
import json, sys
from app.serving.server import create_app
from app.settings.load import load_settings
create_app(load_settings())
print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))))
"""


def test_start_up_without_export_loads_no_sdk() -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ["MCP_SHIM_UPSTREAM_URL"] = "http://127.0.0.1:9/mcp"
    out = subprocess.run(
        [sys.executable, "-c", _IMPORTS],
        cwd=procs.ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_without_the_sdk_the_gateway_runs_unexported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The `otel` extra not installed: a warning naming the install, no export."""
    monkeypatch.setitem(sys.modules, "app.tracing.spans", None)  # import fails
    seen: list[bool] = []

    async def life() -> None:
        async with export.exported({"OTEL_TRACES_EXPORTER": "otlp"}):
            seen.append(tracing.exporting())

    with structlog.testing.capture_logs() as logs:
        asyncio.run(life())
    assert seen == [False]
    (warning,) = [line for line in logs if line["event"] == "tracing_not_exported"]
    assert export.EXTRA_HINT in warning["reason"]
