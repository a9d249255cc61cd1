"""/readyz apart from /healthz, with the legacy fixture up, stopped, and back.

Readiness is "the upstream answered recently": traffic counts, and when there
was none for MCP_SHIM_READY_MAX_AGE_S the check probes with an `initialize`
on a session of its own (closed after), at most one probe at a time and its
outcome reused for a few seconds.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import httpx

from tests import procs
from tests.integration import wire
from tests.integration.recording_proxy import RecordingProxy
from tests.waiting import until_sync

MAX_AGE_S = 1.0


def readyz(base: str) -> httpx.Response:
    return httpx.get(base + "/readyz", timeout=30.0)


def wait_for_status(base: str, status: int, timeout: float = 20.0) -> httpx.Response:
    def answered() -> httpx.Response | None:
        response = readyz(base)
        return response if response.status_code == status else None

    return until_sync(answered, timeout_s=timeout, interval=0.2, what=f"/readyz to answer {status}")


def test_readyz_follows_the_upstream_down_and_back(logs_dir: Path) -> None:
    port = procs.free_port()
    upstream = f"http://127.0.0.1:{port}/mcp"
    env = {"MCP_SHIM_READY_MAX_AGE_S": str(MAX_AGE_S)}
    # The gateway connects lazily: it can start before its upstream.
    with procs.gateway(
        upstream, procs.free_port(), env, log_path=logs_dir / "gateway-ready.log"
    ) as base:
        with procs.legacy_server(port, log_path=logs_dir / "legacy-ready-1.log"):
            up = readyz(base)
            assert up.status_code == 200, up.text
            body: dict[str, Any] = up.json()
            assert body["status"] == "ready"
            assert body["upstream"]["era"] == "legacy"
            assert body["upstream"]["protocol_version"] == "2025-11-25"
            assert body["upstream"]["source"] == "probe"
            # A call's answer counts as the upstream answering: no probe needed.
            message = wire.body("tools/list")
            with httpx.Client(timeout=30.0) as client:
                answered = wire.post(client, base + "/mcp", message, wire.headers_for(message))
            assert answered.is_success
            assert readyz(base).json()["upstream"]["source"] == "traffic"
        # Upstream stopped: once the last answer is older than the max age, the
        # probe fails and readiness says why; liveness is unaffected.
        down = wait_for_status(base, 503)
        assert down.status_code == 503, down.text
        assert down.json()["status"] == "not_ready"
        assert "unreachable" in down.json()["reason"]
        assert httpx.get(base + "/healthz", timeout=10.0).status_code == 200
        with procs.legacy_server(port, log_path=logs_dir / "legacy-ready-2.log"):
            back = wait_for_status(base, 200)
            assert back.status_code == 200, back.text
            assert back.json()["upstream"]["protocol_version"] == "2025-11-25"


def test_a_probe_storm_costs_the_upstream_one_initialize(legacy_url: str, logs_dir: Path) -> None:
    # A fresh gateway has heard nothing from its upstream: the first checks probe.
    env = {"MCP_SHIM_READY_MAX_AGE_S": "30"}
    with (
        RecordingProxy(legacy_url) as back,
        procs.gateway(
            back.url, procs.free_port(), env, log_path=logs_dir / "gateway-ready-storm.log"
        ) as base,
    ):
        mark = back.mark()
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            statuses = list(pool.map(lambda _: readyz(base).status_code, range(40)))
        assert statuses == [200] * 40
        back.wait_for(lambda r: r.http_method == "DELETE", since=mark)
        seen = back.since(mark)
        # One handshake, closed after; nothing with a side effect.
        assert [r.method or r.http_method for r in seen] == [
            "initialize",
            "notifications/initialized",
            "DELETE",
        ]


def test_a_failed_call_turns_readyz_503_at_once(logs_dir: Path) -> None:
    """With the default max age (30 s) the last answer stays recent long after
    the upstream died; a call that cannot reach it makes /readyz ask it at once."""
    port = procs.free_port()
    upstream = f"http://127.0.0.1:{port}/mcp"
    message = wire.body("tools/list")
    with (
        procs.gateway(
            upstream, procs.free_port(), log_path=logs_dir / "gateway-ready-fail.log"
        ) as base,
        httpx.Client(timeout=30.0) as client,
    ):
        with procs.legacy_server(port, log_path=logs_dir / "legacy-ready-fail.log"):
            answered = wire.post(client, base + "/mcp", message, wire.headers_for(message))
            assert answered.is_success, answered.text
            assert readyz(base).json()["upstream"]["source"] == "traffic"
        failed = wire.post(client, base + "/mcp", message, wire.headers_for(message))
        assert failed.status_code >= 500, failed.text
        down = readyz(base)
        assert down.status_code == 503, down.text
        assert "unreachable" in down.json()["reason"]
