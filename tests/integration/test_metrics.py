"""`/metrics` (docs/operations.md, "Metrics"): every series after a known sequence.

Real processes on loopback: the legacy fixture server (official Python SDK
mcp 1.x) and the gateway (`python -m app.serving.cli`), each test with its own so the
counts are exact. The sequence: plain calls (ok and an upstream JSON-RPC
error), one front refusal of each kind, a call refused inside the gateway
(Mcp-Param-*), a parked multi round-trip call and its retry, a listen stream,
and a call after the fixture was stopped (an upstream error).

Scrapes use a fresh connection each (`httpx.get`), and every client is closed
before the next scrape, so the connection gauges are exact too.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.metrics import BUCKETS, parse_exposition
from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import wire

pytestmark = pytest.mark.peers

Labels = frozenset[tuple[str, str]]
Series = dict[tuple[str, Labels], float]

MODERN_LABELS = {"client_era": "modern", "client_version": wire.MODERN}
UPSTREAM_KINDS = (
    "UpstreamUnavailable",
    "UpstreamTimeout",
    "UpstreamProtocolError",
    "UpstreamAnswerTooLarge",
    "UpstreamHttpError",
    "SessionExpired",
    "PoolExhausted",
    "SessionShareExceeded",
    "AnswerRoomFull",
    "StdioProcessExited",
    "EraInconclusive",
)
# The task gauges of a gateway that runs none (their counts: test_task_bounds.py).
NO_TASKS = {
    ("mcp_shim_tasks_live", frozenset()): 0.0,
    ("mcp_shim_task_upstream_sessions", frozenset()): 0.0,
    ("mcp_shim_task_upstream_connections", frozenset()): 0.0,
}
HISTOGRAMS = ("mcp_shim_call_duration_seconds", "mcp_shim_upstream_duration_seconds")


def key(name: str, **labels: str) -> tuple[str, Labels]:
    return name, frozenset(labels.items())


def scrape(url: str) -> tuple[httpx.Response, Series]:
    response = httpx.get(url, timeout=10.0)
    assert response.status_code == 200, response.text
    series: Series = {}
    for name, labels, value in parse_exposition(response.text):
        if name.startswith("mcp_shim_"):
            series[name, frozenset(labels.items())] = value
    return response, series


def gauges(series: Series) -> dict[str, float]:
    """The unlabelled live gauges and the lanes, by a short name."""
    return {
        "sessions": series[key("mcp_shim_upstream_sessions")],
        "lanes_busy": series[key("mcp_shim_mrtr_lanes", state="busy")],
        "lanes_idle": series[key("mcp_shim_mrtr_lanes", state="idle")],
        "parked": series[key("mcp_shim_mrtr_parked")],
        "listen": series[key("mcp_shim_listen_streams")],
        "connections": series[key("mcp_shim_client_connections")],
        "in_progress": series[key("mcp_shim_client_requests_in_progress")],
    }


def scrape_until(url: str, **expected: float) -> Series:
    """Scrape until the live gauges named show these values (a closed client's
    connection leaves the server's set a moment later), then return the scrape."""
    deadline = time.monotonic() + 10.0
    while True:
        _, series = scrape(url)
        seen = gauges(series)
        if all(seen[name] == value for name, value in expected.items()):
            return series
        if time.monotonic() > deadline:
            raise AssertionError(f"gauges {seen}, expected {expected}")
        time.sleep(0.05)


def split_histograms(series: Series) -> tuple[Series, dict[tuple[str, str], list[float]]]:
    """Plain series, and each histogram's buckets in `le` order, by (name, method)."""
    plain: Series = {}
    buckets: dict[tuple[str, str], dict[float, float]] = {}
    for (name, labels), value in series.items():
        base = name.removesuffix("_bucket")
        if base in HISTOGRAMS and name.endswith("_bucket"):
            label = dict(labels)
            le = float(label["le"])
            buckets.setdefault((base, label["method"]), {})[le] = value
        else:
            plain[name, labels] = value
    ordered = {k: [v[le] for le in sorted(v)] for k, v in buckets.items()}
    return plain, ordered


def check_histograms(series: Series, counts: dict[tuple[str, str], int], wall_s: float) -> Series:
    """Histograms: exactly these counts per (name, method), buckets cumulative and
    ending at the count, sums within the test's wall time. Returns the rest."""
    plain, buckets = split_histograms(series)
    assert set(buckets) == set(counts), (sorted(buckets), sorted(counts))
    for (name, method), count in counts.items():
        assert plain.pop(key(name + "_count", method=method)) == count, (name, method)
        total = plain.pop(key(name + "_sum", method=method))
        assert 0 < total <= wall_s * count, (name, method, total)
        values = buckets[name, method]
        assert len(values) == len(BUCKETS) + 1
        assert values == sorted(values) and values[-1] == count, (name, method, values)
    return plain


@dataclass
class Chain:
    gateway: str
    legacy: str
    stop_legacy: contextlib.ExitStack

    @property
    def mcp(self) -> str:
        return self.gateway + "/mcp"

    @property
    def metrics(self) -> str:
        return self.gateway + "/metrics"


@pytest.fixture
def chain(logs_dir: Path) -> Iterator[Chain]:
    with contextlib.ExitStack() as legacy_stack:
        legacy = legacy_stack.enter_context(
            procs.legacy_server(procs.free_port(), log_path=logs_dir / "metrics-legacy.log")
        )
        env = {"MCP_SHIM_MAX_BODY_BYTES": "4096", "MCP_SHIM_MRTR_QUIET_MS": "20"}
        with procs.gateway(
            legacy, procs.free_port(), env=env, log_path=logs_dir / "metrics-gateway.log"
        ) as base:
            yield Chain(base, legacy, legacy_stack)


def call(http: httpx.Client, url: str, method: str, params: dict[str, Any], **extra: Any) -> Any:
    message = wire.body(method, params)
    response = wire.post(http, url, message, wire.headers_for(message, **extra))
    return response.status_code, wire.answer_messages(response)[-1]


def refusals(url: str) -> None:
    """One front refusal of each kind; each checked against the status it must have."""
    good = wire.body("tools/call", {"name": "test_simple_text", "arguments": {}})
    with httpx.Client(timeout=10.0) as http:

        def post(message: Any, **extra: Any) -> int:
            return wire.post(http, url, message, wire.headers_for(good, **extra)).status_code

        def raw(content: bytes, **extra: Any) -> int:
            headers = wire.headers_for(good, **extra)
            return http.post(url, content=content, headers=headers).status_code

        assert post(good, host="evil.example") == 403
        assert post(good, content_type="text/plain") == 415
        assert raw(b'{"pad": "' + b"x" * 8192 + b'"}') == 413
        assert http.get(url).status_code == 405
        assert raw(b"{not json") == 400  # -32700
        assert post([good]) == 400  # -32600: batching was removed in 2025-06-18
        no_version = wire.body("tools/call", good["params"], meta={wire.META_VERSION: None})
        assert post(no_version) == 400  # -32602
        assert post(good, mcp_method="tools/list") == 400  # -32020
        old = wire.body("tools/call", good["params"], meta={wire.META_VERSION: "1999-01-01"})
        assert post(old, mcp_protocol_version="1999-01-01") == 400  # -32022
        bogus = wire.body("bogus/method", {})
        assert wire.post(http, url, bogus, wire.headers_for(bogus)).status_code == 404  # -32601
        listen = wire.body("subscriptions/listen", {"notifications": {}})
        headers = wire.headers_for(listen, accept="application/json")
        assert wire.post(http, url, listen, headers).status_code == 406


def test_every_series_after_a_known_sequence(chain: Chain) -> None:
    started = time.monotonic()
    # Fresh: only the constant series and the gauges; the scrape is the one
    # open connection and the one request in progress (once the start-up
    # probe's connection is gone).
    series = scrape_until(chain.metrics, connections=1)
    assert series == {
        key("mcp_shim_build_info", version=metadata.version("mcp-shim")): 1.0,
        **{key("mcp_shim_upstream_errors_total", kind=kind): 0.0 for kind in UPSTREAM_KINDS},
        key("mcp_shim_upstream_sessions"): 0.0,
        key("mcp_shim_mrtr_lanes", state="busy"): 0.0,
        key("mcp_shim_mrtr_lanes", state="idle"): 0.0,
        key("mcp_shim_mrtr_parked"): 0.0,
        key("mcp_shim_listen_streams"): 0.0,
        **NO_TASKS,
        key("mcp_shim_client_connections"): 1.0,
        key("mcp_shim_client_requests_in_progress"): 1.0,
    }

    # Plain calls: ok, an upstream JSON-RPC error, a refusal inside the gateway.
    with httpx.Client(timeout=30.0) as http:
        for _ in range(2):
            status, answer = call(
                http, chain.mcp, "tools/call", {"name": "test_simple_text", "arguments": {}}
            )
            assert status == 200 and "result" in answer, answer
        assert call(http, chain.mcp, "tools/list", {})[0] == 200
        assert call(http, chain.mcp, "server/discover", {})[0] == 200
        status, answer = call(http, chain.mcp, "prompts/get", {"name": "no-such-prompt"})
        assert status == 400 and answer["error"]["code"] == -32602, answer
        # x-mcp-header annotated argument without its Mcp-Param-Region header: -32020.
        status, answer = call(
            http,
            chain.mcp,
            "tools/call",
            {"name": "test_header_param", "arguments": {"region": "eu"}},
        )
        assert status == 400 and answer["error"]["code"] == -32020, answer
    refusals(chain.mcp)

    # A parked multi round-trip call: the lane and the parked entry are visible
    # while it waits, and gone (the lane idle) once the retry completes it.
    with httpx.Client(timeout=30.0) as http:
        first = mw.tool_call(http, chain.gateway, "test_input_required_result_elicitation")
        mw.check_input_required(first)
    parked = scrape_until(chain.metrics, connections=1)
    assert gauges(parked) == {
        "sessions": 2,  # the plain callers' session and the input-capable callers' one
        "lanes_busy": 1,
        "lanes_idle": 0,
        "parked": 1,
        "listen": 0,
        "connections": 1,
        "in_progress": 1,
    }
    with httpx.Client(timeout=30.0) as http:
        retry = mw.tool_call(
            http,
            chain.gateway,
            "test_input_required_result_elicitation",
            input_responses=mw.answers_for(first.requests),
            state=first.state,
        )
        assert retry.result["resultType"] == "complete", retry.final
    done = scrape_until(chain.metrics, connections=1)
    assert (gauges(done)["parked"], gauges(done)["lanes_busy"], gauges(done)["lanes_idle"]) == (
        0,
        0,
        1,
    )

    # A listen stream: counted while open (its connection too), then its call.
    listen = wire.body("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    with (
        httpx.Client(timeout=30.0) as http,
        http.stream(
            "POST", chain.mcp, content=json.dumps(listen).encode(), headers=wire.headers_for(listen)
        ) as stream,
    ):
        assert stream.status_code == 200
        # Read up to the ack without leaving the iterator: closing it would close
        # the stream.
        chunks = stream.iter_raw()
        buffer = b""
        while b"\n\n" not in buffer:
            buffer += next(chunks)
        assert b"notifications/subscriptions/acknowledged" in buffer, buffer
        open_stream = scrape_until(chain.metrics, connections=2)
        assert gauges(open_stream)["listen"] == 1
        assert gauges(open_stream)["in_progress"] == 2
    scrape_until(chain.metrics, listen=0, connections=1)

    # The upstream goes away: the next call ends with UpstreamUnavailable.
    chain.stop_legacy.close()
    with httpx.Client(timeout=30.0) as http:
        status, answer = call(
            http, chain.mcp, "tools/call", {"name": "test_simple_text", "arguments": {}}
        )
        assert status == 502 and answer["error"]["code"] == -32603, answer

    series = scrape_until(chain.metrics, connections=1, in_progress=1)
    wall_s = time.monotonic() - started
    rest = check_histograms(
        series,
        {
            # 2 ok, the Mcp-Param refusal, the parked turn, its retry, the upstream error.
            ("mcp_shim_call_duration_seconds", "tools/call"): 6,
            ("mcp_shim_call_duration_seconds", "tools/list"): 1,
            ("mcp_shim_call_duration_seconds", "server/discover"): 1,
            ("mcp_shim_call_duration_seconds", "prompts/get"): 1,
            ("mcp_shim_call_duration_seconds", "subscriptions/listen"): 1,
            # Only calls the upstream answered: the 2 ok and the retry (timed from
            # the answer fed upstream); not the refusal, the parked turn or the
            # call that never reached the upstream. discover is answered locally.
            ("mcp_shim_upstream_duration_seconds", "tools/call"): 3,
            ("mcp_shim_upstream_duration_seconds", "tools/list"): 1,
            ("mcp_shim_upstream_duration_seconds", "prompts/get"): 1,
        },
        wall_s,
    )

    def calls(method: str, outcome: str, status: str) -> tuple[str, Labels]:
        return key(
            "mcp_shim_calls_total", method=method, outcome=outcome, status=status, **MODERN_LABELS
        )

    def rejections(code: str, status: str) -> tuple[str, Labels]:
        return key("mcp_shim_rejections_total", code=code, status=status)

    assert rest == {
        key("mcp_shim_build_info", version=metadata.version("mcp-shim")): 1.0,
        calls("tools/call", "ok", "200"): 3.0,
        calls("tools/list", "ok", "200"): 1.0,
        calls("server/discover", "ok", "200"): 1.0,
        calls("prompts/get", "error", "400"): 1.0,
        calls("tools/call", "rejected", "400"): 1.0,
        calls("tools/call", "input_required", "200"): 1.0,
        calls("subscriptions/listen", "client_disconnected", "200"): 1.0,
        calls("tools/call", "UpstreamUnavailable", "502"): 1.0,
        key("mcp_shim_upstream_errors_total", kind="UpstreamUnavailable"): 1.0,
        **{
            key("mcp_shim_upstream_errors_total", kind=kind): 0.0
            for kind in UPSTREAM_KINDS
            if kind != "UpstreamUnavailable"
        },
        rejections("-32600", "403"): 1.0,
        rejections("-32600", "415"): 1.0,
        rejections("-32600", "413"): 1.0,
        rejections("none", "405"): 1.0,
        rejections("-32700", "400"): 1.0,
        rejections("-32600", "400"): 1.0,
        rejections("-32602", "400"): 1.0,
        rejections("-32020", "400"): 1.0,
        rejections("-32022", "400"): 1.0,
        rejections("-32601", "404"): 1.0,
        rejections("-32600", "406"): 1.0,
        key("mcp_shim_upstream_sessions"): 2.0,
        key("mcp_shim_mrtr_lanes", state="busy"): 0.0,
        key("mcp_shim_mrtr_lanes", state="idle"): 1.0,
        key("mcp_shim_mrtr_parked"): 0.0,
        key("mcp_shim_listen_streams"): 0.0,
        **NO_TASKS,
        key("mcp_shim_client_connections"): 1.0,
        key("mcp_shim_client_requests_in_progress"): 1.0,
    }


def test_a_separate_metrics_port(legacy_url: str, logs_dir: Path) -> None:
    main, metrics_port = procs.free_port(), procs.free_port()
    env = {"MCP_SHIM_METRICS_PORT": str(metrics_port)}
    with procs.gateway(legacy_url, main, env=env, log_path=logs_dir / "metrics-port.log") as base:
        # Not beside /mcp: the main port does not know the route.
        assert httpx.get(base + "/metrics").status_code == 404
        with httpx.Client(timeout=30.0) as http:
            status, _ = call(
                http, base + "/mcp", "tools/call", {"name": "test_simple_text", "arguments": {}}
            )
            assert status == 200
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        response, series = scrape(url)
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        calls = {
            dict(labels)["outcome"]: value
            for (name, labels), value in series.items()
            if name == "mcp_shim_calls_total"
        }
        assert calls == {"ok": 1.0}
        # The gauges are read from the gateway's live objects (on its event loop)
        # although the scrape is served by another thread; the scrape's own
        # connection is not one of the main port's.
        series = scrape_until(url, connections=0)
        assert gauges(series) == {
            "sessions": 1,
            "lanes_busy": 0,
            "lanes_idle": 0,
            "parked": 0,
            "listen": 0,
            "connections": 0,
            "in_progress": 0,
        }


def test_label_cardinality_stays_bounded(legacy_url: str, logs_dir: Path) -> None:
    """What a client chooses (methods, tool names, versions, ids) never becomes a label."""
    log = logs_dir / "metrics-cardinality.log"
    with (
        procs.gateway(legacy_url, procs.free_port(), log_path=log) as base,
        httpx.Client(timeout=30.0) as http,
    ):
        url = base + "/mcp"
        for i in range(200):
            message = wire.body(f"bogus/method-{i}", {}, rid=f"id-{i}")
            assert wire.post(http, url, message, wire.headers_for(message)).status_code == 404
        for i in range(50):
            status, answer = call(
                http, url, "tools/call", {"name": f"no-such-tool-{i}", "arguments": {}}
            )
            assert status == 400 and answer["error"]["code"] == -32602, answer
        for i in range(50):
            version = f"2099-01-{i:02d}"
            message = wire.body("tools/list", {}, meta={wire.META_VERSION: version})
            headers = wire.headers_for(message, mcp_protocol_version=version)
            assert wire.post(http, url, message, headers).status_code == 400
        text = httpx.get(base + "/metrics", timeout=10.0).text
        _, series = scrape(base + "/metrics")
    assert "bogus" not in text and "no-such-tool" not in text and "2099-01" not in text
    assert series[key("mcp_shim_rejections_total", code="-32601", status="404")] == 200
    assert series[key("mcp_shim_rejections_total", code="-32022", status="400")] == 50
    call_series = {labels for name, labels in series if name == "mcp_shim_calls_total"}
    assert call_series == {
        frozenset(
            {"method": "tools/call", "outcome": "error", "status": "400", **MODERN_LABELS}.items()
        )
    }
    assert [v for (name, _), v in series.items() if name == "mcp_shim_calls_total"] == [50]
    # Every mcp_shim series of this gateway: 1 build info, the error kinds, 2
    # rejections, 1 call, 2 histograms of 19 samples, 7 gauges and the 3 of tasks.
    expected = 1 + len(UPSTREAM_KINDS) + 2 + 1 + 2 * (len(BUCKETS) + 1 + 2) + 7 + len(NO_TASKS)
    assert len(series) == expected, sorted(series)


def _start_failure(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("MCP_SHIM_")}
    full |= {"MCP_SHIM_UPSTREAM_URL": f"http://127.0.0.1:{procs.free_port()}/mcp", **env}
    return subprocess.run(
        [sys.executable, "-m", "app.serving.cli"],
        env=full,
        capture_output=True,
        text=True,
        timeout=20,
        cwd=procs.ROOT,
    )


def test_the_metrics_port_must_differ_from_the_main_port() -> None:
    port = str(procs.free_port())
    proc = _start_failure({"MCP_SHIM_PORT": port, "MCP_SHIM_METRICS_PORT": port})
    assert proc.returncode == 2, proc.stderr
    assert "MCP_SHIM_METRICS_PORT: must differ from MCP_SHIM_PORT" in proc.stderr


def test_a_metrics_port_in_use_stops_start_up_naming_the_variable() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        proc = _start_failure(
            {"MCP_SHIM_PORT": str(procs.free_port()), "MCP_SHIM_METRICS_PORT": str(busy)}
        )
    assert proc.returncode == 2, proc.stderr
    assert f"MCP_SHIM_METRICS_PORT: cannot listen on 127.0.0.1:{busy}" in proc.stderr
    assert "Traceback" not in proc.stderr


def _legacy_calls(series: Series, version: str) -> float:
    return sum(
        value
        for (name, labels), value in series.items()
        if name == "mcp_shim_calls_total"
        and ("client_era", "legacy") in labels
        and ("client_version", version) in labels
    )


def test_legacy_clients_calls_are_counted(legacy_url: str, logs_dir: Path) -> None:
    """Issue 19: a legacy client's calls left mcp_shim_calls_total unchanged.
    Both legacy paths count: POST /mcp with a session, and HTTP+SSE's
    POST /messages (a real mcp 1.x client)."""
    log = logs_dir / "metrics-legacy.log"
    with procs.gateway(legacy_url, procs.free_port(), log_path=log) as base:
        with httpx.Client(timeout=15) as client:
            init = client.post(
                base + "/mcp",
                json=wire.legacy_initialize(),
                headers={"accept": "application/json, text/event-stream"},
            )
            assert init.status_code == 200, init.text
            headers = {
                "accept": "application/json, text/event-stream",
                "mcp-session-id": init.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            for i in range(1, 21):
                answer = client.post(
                    base + "/mcp",
                    json={"jsonrpc": "2.0", "id": i, "method": "tools/list", "params": {}},
                    headers=headers,
                )
                assert answer.status_code == 200, answer.text
        _, series = scrape(base + "/metrics")
        listed = key(
            "mcp_shim_calls_total",
            method="tools/list",
            client_era="legacy",
            client_version="2025-11-25",
            outcome="ok",
            status="200",
        )
        assert series.get(listed) == 20
        assert _legacy_calls(series, "2024-11-05") == 0
        procs.run_legacy_client("sse_tour.py", base + "/sse")
        _, series = scrape(base + "/metrics")
        assert _legacy_calls(series, "2024-11-05") > 0
