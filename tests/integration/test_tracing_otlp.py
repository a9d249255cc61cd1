"""Trace export over OTLP, received by a real OTLP receiver.

The official mcp 2.x client calls a tool through the gateway, in front of the
legacy fixture server (behind a recording proxy), with a W3C `traceparent` on
every request. The gateway exports with the OpenTelemetry SDK's OTLP/HTTP
exporter, configured by the standard `OTEL_*` variables only, to oteltap (an
OTLP/HTTP protobuf receiver built by others, installed by scripts/setup_peers.sh
into .peers/otel/, which prints every span it receives as one JSON line). The
receiver must get the call's server span in the client's trace and, under it,
the client span of the upstream request, whose traceparent the upstream got.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import procs
from tests.integration.recording_proxy import RecordingProxy

OTELTAP = procs.PEERS / "otel" / "bin" / "oteltap"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"
SERVER, CLIENT = 2, 3  # OTLP's SpanKind values


class Receiver:
    """oteltap on a free loopback port; its stdout (one JSON span a line) in a file."""

    def __init__(self, out: Path) -> None:
        self.port = procs.free_port()
        self.out = out
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def spans(self) -> list[dict[str, Any]]:
        found = []
        for line in self.out.read_text().splitlines():
            if line.startswith("{"):
                found.append(json.loads(line))
        return found

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 20.0
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            spans = self.spans()
            if predicate(spans):
                return spans
            time.sleep(0.1)
        raise AssertionError(f"the receiver did not get the spans; it got: {self.spans()}")


@contextmanager
def receiver(logs_dir: Path) -> Iterator[Receiver]:
    """The receiver, up once it listens; a missing peer fails here, never skips."""
    tap = Receiver(logs_dir / "oteltap.out")
    with open(tap.out, "wb") as out:
        proc = subprocess.Popen(
            [str(procs.require_peer(OTELTAP)), "--port", str(tap.port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 20
            while not procs.port_open(tap.port):
                assert proc.poll() is None, f"oteltap exited: {tap.out.read_text()}"
                assert time.monotonic() < deadline, "oteltap did not listen within 20 s"
                time.sleep(0.05)
            yield tap
        finally:
            proc.terminate()
            proc.wait(10)


@dataclass
class Chain:
    gateway: str
    back: RecordingProxy
    tap: Receiver


@pytest.fixture(scope="module")
def chain(legacy_url: str, logs_dir: Path) -> Iterator[Chain]:
    with receiver(logs_dir) as tap, RecordingProxy(legacy_url) as back:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": tap.endpoint,
            "OTEL_SERVICE_NAME": "mcp-shim-under-test",
            # Export within a tenth of a second (the SDK's default waits 5 s).
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        log = logs_dir / "gateway-otlp.log"
        with procs.gateway(back.url, procs.free_port(), env=env, log_path=log) as gateway:
            yield Chain(gateway, back, tap)


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    """OTLP's key/value list as a dict of plain values."""
    out = {}
    for item in span["attributes"]:
        ((_kind, value),) = item["value"].items()
        out[item["key"]] = value
    return out


def test_server_span_in_the_clients_trace_and_client_span_under_it(chain: Chain) -> None:
    mark = chain.back.mark()
    document = procs.run_modern_client("traced_call.py", chain.gateway + "/mcp", TRACEPARENT)
    assert document["echo"]["result"]["content"][0]["text"] == "traced", document  # type: ignore[index]

    def called(span: dict[str, Any]) -> bool:
        return span["name"] == "tools/call echo"

    spans = chain.tap.wait_for(
        lambda spans: (
            any(called(s) and s["kind"] == CLIENT for s in spans)
            and any(called(s) and s["kind"] == SERVER for s in spans)
        )
    )
    (server,) = [s for s in spans if called(s) and s["kind"] == SERVER]
    assert server["traceId"] == TRACE_ID
    assert server["parentSpanId"] == CLIENT_SPAN_ID
    served = attributes(server)
    assert served["mcp.method.name"] == "tools/call"
    assert served["gen_ai.tool.name"] == "echo"
    assert served["gen_ai.operation.name"] == "execute_tool"
    assert served["mcp.protocol.version"] == "2026-07-28"
    assert served["mcp_shim.upstream.protocol.version"].startswith("2025-")
    assert served["network.protocol.name"] == "http"
    assert served["network.protocol.version"] == "1.1"
    assert served["http.response.status_code"] == "200"  # OTLP JSON: int64 as a string
    assert "jsonrpc.request.id" in served

    (upstream,) = [s for s in spans if called(s) and s["kind"] == CLIENT]
    assert upstream["traceId"] == TRACE_ID
    assert upstream["parentSpanId"] == server["spanId"]
    sent = attributes(upstream)
    assert sent["mcp.method.name"] == "tools/call"
    assert sent["gen_ai.tool.name"] == "echo"
    assert sent["mcp.protocol.version"] == served["mcp_shim.upstream.protocol.version"]
    assert sent["server.address"] == "127.0.0.1"
    assert sent["http.response.status_code"] == "200"
    # The upstream's session id only as its digest: never the id itself.
    session = sent["mcp.session.id"]
    assert len(session) == 32
    (record,) = [r for r in chain.back.since(mark) if r.method == "tools/call"]
    assert record.headers["traceparent"] == f"00-{TRACE_ID}-{upstream['spanId']}-01"
    assert session != record.headers.get("mcp-session-id")
    assert server["events"][0]["name"] == "mcp_shim.translate"


def test_a_call_without_trace_context_is_a_root_span(chain: Chain) -> None:
    """No traceparent: the gateway starts the trace, and the upstream is still in it."""
    mark = chain.back.mark()
    procs.run_modern_client("discover_and_list.py", chain.gateway + "/mcp")

    def listed(span: dict[str, Any]) -> bool:  # not the traced call's own tools/list
        named = span["name"] == "tools/list" and span["kind"] == SERVER
        return named and span["traceId"] != TRACE_ID

    roots = [s for s in chain.tap.wait_for(lambda spans: any(map(listed, spans))) if listed(s)]
    assert all(s["parentSpanId"] == "" for s in roots), roots
    traces = {s["traceId"] for s in roots}
    sent = [r for r in chain.back.since(mark) if r.method == "tools/list"]
    assert sent and all(r.headers["traceparent"][3:35] in traces for r in sent), sent
