"""The gateway's idle memory: what start-up and a plain call load (issue 12's RSS target).

bench/memory.py measures where the idle RSS comes from. Three
libraries served only rare paths yet were loaded at every start: the
`cryptography` extension (requestState sealing, about 7 MB), httpx's own
transport with its CA bundle and httpcore (the replica forwarder's client,
about 3 MB) and `pydantic.v1` (FastAPI checked a declared path parameter
against it, 1.5 MB). They are now loaded by the first call that needs them.
So are the CA bundles of the TLS contexts toward the upstream (app/upstream/httpclient/tls.py,
2 MB): read by the first TLS handshake, none for a plain http upstream. And
aiohttp with httpx-aiohttp (about 6 MB with yarl, attrs, aiohappyeyeballs, ...):
on the default h1 transport a plain gateway's requests to a legacy upstream
(era probe, session POSTs, DELETE) all go through app/upstream/httpclient/h1.py
(bench/memory.py; docs/performance.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire

pytestmark = pytest.mark.peers

RARE = ("cryptography", "pydantic.v1", "httpcore", "aiohttp", "httpx_aiohttp")

# Start-up and one call in a process of its own (sys.modules is per process):
# the app, its lifespan, one tools/call through it to the real upstream; then
# one requestState sealed, to show the check sees a library when it is loaded.
_SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, json, ssl, sys
    import httpx
    from app.settings.load import load_settings
    from app.serving.server import create_app

    RARE = {rare!r}

    async def main() -> None:
        app = create_app(load_settings())
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                answer = await c.post("/mcp", content=sys.argv[1], headers=json.loads(sys.argv[2]))
            after_call = [m for m in RARE if m in sys.modules]
            gc.unfreeze()  # the lifespan froze start-up's objects out of gc's lists
            contexts = [o for o in gc.get_objects() if isinstance(o, ssl.SSLContext)]
            certificates = sum(c.cert_store_stats()["x509"] for c in contexts)
            from app.mrtr.state import Claims, seal_state
            from app.cluster.sealing import Sealer, generate_key
            seal_state(Sealer([generate_key()]), Claims("x", "r", "c", "tools/call", "d", 0, 1))
            after_seal = [m for m in RARE if m in sys.modules]
        # The lifespan's end closed the upstream session (DELETE).
        after_stop = [m for m in RARE if m in sys.modules and m not in after_seal]
        print(json.dumps({{"status": answer.status_code, "body": answer.json(),
                          "after_call": after_call, "after_seal": after_seal,
                          "after_stop": after_stop,
                          "contexts": len(contexts), "certificates": certificates}}))

    asyncio.run(main())
    """
)


def test_start_up_and_a_plain_call_load_no_rarely_used_library(legacy_url: str) -> None:
    message = wire.body("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    headers = wire.headers_for(message)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _SCRIPT.format(rare=RARE),
            json.dumps(message),
            json.dumps(headers),
        ],
        env={**os.environ, "MCP_SHIM_UPSTREAM_URL": legacy_url},
        cwd=procs.ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["status"] == 200, report
    assert report["body"]["result"]["content"][0]["text"] == "hi", report
    assert report["after_call"] == [], report
    assert report["after_stop"] == [], report
    # The check sees a library once something needs it.
    assert "cryptography" in report["after_seal"], report
    # The transport's TLS context exists (h1's, shared with aiohttp's transport
    # when one is made), but it has read no CA bundle: the upstream is plain
    # http (app/upstream/httpclient/tls.py).
    assert report["contexts"] >= 1, report
    assert report["certificates"] == 0, report


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


# VmRSS in MiB after one call, measured on the development image (Python 3.11,
# the dev venv): 59.8 in the working tree, 60.2 in a fresh clone's CI run;
# 62.9-63.0 with aiohttp loaded at start, 78-80 MB with the three libraries
# above loaded at start (bench/memory.py, bench/soak.py; docs/performance.md).
# The bound sits under the aiohttp figure, so loading it at start still fails.
IDLE_RSS_BOUND_MB = 61


def test_idle_rss_of_a_gateway_process(legacy_url: str, logs_dir: Path) -> None:
    log = logs_dir / "memory-gateway.log"
    # One process that serves: with more than one worker the process started is
    # the supervisor (38 MB, app/serving/workers.py), and its RSS says nothing of a gateway's.
    env = {"MCP_SHIM_WORKERS": "1"}
    with (
        procs.gateway_process(legacy_url, procs.free_port(), env, log_path=log) as (base, proc),
        httpx.Client(timeout=30.0) as http,
    ):
        message = wire.body("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        answer = wire.post(http, base + "/mcp", message, wire.headers_for(message))
        assert answer.status_code == 200, answer.text
        rss = _rss_mb(proc.pid)
    assert rss <= IDLE_RSS_BOUND_MB, f"idle gateway RSS {rss:.1f} MB (bench/memory.py)"


@pytest.mark.slow
def test_an_mcp1_client_session_loads_no_aiohttp_in_the_gateway(
    legacy_url: str, logs_dir: Path
) -> None:
    # The mcp 1.x client opens a GET stream after `notifications/initialized`,
    # which the gateway relays to the upstream session's (app/fronts/legacy/front.py),
    # and its tour has the server's sampling and elicitation requests (MRTR
    # lanes, with their GET streams) and a DELETE: every one of them on h1.
    # aiohttp's compiled parser and yarl's are mapped once aiohttp is imported.
    log = logs_dir / "memory-mcp1-gateway.log"
    env = {"MCP_SHIM_WORKERS": "1"}
    with procs.gateway_process(legacy_url, procs.free_port(), env, log_path=log) as (base, proc):
        out: Any = procs.run_legacy_client("tour.py", base + "/mcp", "2025-11-25")
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert out["initialize"]["protocolVersion"] == "2025-11-25", out
    assert "GET" in log.read_text()  # the client's GET stream reached the gateway
    assert "/aiohttp/" not in maps and "/yarl/" not in maps


# Task results nobody polls: TASK_OWNERS credentials, one result of about
# RESULT_MB each, kept MCP_SHIM_TASK_TTL_MS.
TASK_OWNERS = 20
RESULT_MB = 2
TASK_TTL_MS = 3000


def _start_task(http: httpx.Client, url: str, owner: int) -> str:
    arguments = {"ms": 10, "steps": 1, "text": "x" * (RESULT_MB * 1024 * 1024 - 4096)}
    message = wire.body(
        "tools/call",
        {"name": "slow_echo", "arguments": arguments},
        meta={wire.META_CAPABILITIES: {"extensions": {"io.modelcontextprotocol/tasks": {}}}},
    )
    headers = wire.headers_for(message, authorization=f"Bearer unpolled-{owner}")
    answer = wire.post(http, url, message, headers)
    assert answer.status_code == 200, answer.text[:300]
    created = wire.answer_messages(answer)[-1]["result"]
    assert created["resultType"] == "task", created
    return str(created["taskId"])


def _swept(log: Path) -> int:
    """Task records the memory store's sweep dropped, from its log lines."""
    lines = wire.log_lines(log)
    return sum(line["records"] for line in lines if line["event"] == "task_records_expired")


@pytest.mark.slow
def test_task_results_nobody_polls_leave_memory_at_their_ttl(
    legacy_url: str, logs_dir: Path
) -> None:
    # The memory store expired an owner's records only on that owner's next
    # use: 20 credentials' 2 MB results never polled held about 47 MB after their
    # TTL, until each owner called again. Now a sweep drops them by time.
    log = logs_dir / "memory-tasks-gateway.log"
    env = {
        "MCP_SHIM_WORKERS": "1",
        "MCP_SHIM_TASK_TOOLS": "slow_echo",
        "MCP_SHIM_TASK_TTL_MS": str(TASK_TTL_MS),
    }
    with (
        procs.gateway_process(legacy_url, procs.free_port(), env, log_path=log) as (base, proc),
        httpx.Client(timeout=30.0) as http,
    ):
        before = _rss_mb(proc.pid)
        for owner in range(TASK_OWNERS):
            _start_task(http, base + "/mcp", owner)
        # No owner comes back. The results are filed as the tasks settle (memory
        # peaks), then dropped at their TTL by the sweep.
        peak = _rss_mb(proc.pid)
        deadline = time.monotonic() + TASK_TTL_MS / 1000 + 15
        while _swept(log) < TASK_OWNERS and time.monotonic() < deadline:
            peak = max(peak, _rss_mb(proc.pid))
            time.sleep(0.05)
        after = _rss_mb(proc.pid)
    # Measured: 58 MB before, 105 at the peak; 68 after the TTL (108 when kept).
    assert peak - before > TASK_OWNERS * RESULT_MB / 2, (before, peak)
    assert after < peak - TASK_OWNERS * RESULT_MB / 2, (before, peak, after)
    assert _swept(log) == TASK_OWNERS


# -- a large answer ---------------------------------------------------------------

ANSWER_BYTES = 50 * 1000 * 1000
# Peak RSS growth while one answer passes, as a multiple of the answer: the
# upstream's bytes once, and what the writer and the allocator hold around them
# (bench/answers.py measures 1.0-1.06x at 10 and 50 MB on the development image;
# 3x as JSON and 4x as SSE before the answer was parsed as its skeleton,
# app/splice.py).
ANSWER_GROWTH_BOUND = 1.5


def _peak_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field}")


def _large_call(
    http: httpx.Client, url: str, client: str, accept: str, size: int = ANSWER_BYTES
) -> httpx.Response:
    arguments = {"bytes": size}
    if client == "modern":
        message = wire.body("tools/call", {"name": "large_result", "arguments": arguments})
        return http.post(url, json=message, headers={**wire.headers_for(message), "accept": accept})
    base = {"content-type": "application/json", "accept": accept}
    opened = http.post(url, json=wire.legacy_initialize(), headers=base)
    assert opened.status_code == 200, opened.text[:300]
    session = {
        **base,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": wire.answer_messages(opened)[-1]["result"]["protocolVersion"],
    }
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert http.post(url, json=note, headers=session).status_code == 202
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "large_result", "arguments": arguments},
    }
    return http.post(url, json=call, headers=session)


@pytest.fixture(scope="module", params=["json", "sse"])
def answer_form(request: pytest.FixtureRequest, logs_dir: Path) -> Iterator[tuple[str, str]]:
    """The SDK's legacy server answering in JSON (`--json-response`) or on SSE."""
    extra = ["--json-response"] if request.param == "json" else []
    log = logs_dir / f"memory-large-{request.param}-upstream.log"
    with procs.legacy_server(procs.free_port(), *extra, log_path=log) as upstream:
        yield request.param, upstream


@pytest.mark.parametrize("client", ["modern", "legacy"])
def test_a_50_mb_answer_costs_the_gateway_at_most_one_and_a_half_times_its_size(
    answer_form: tuple[str, str], client: str, logs_dir: Path
) -> None:
    """JSON: the upstream answers in JSON, the gateway too. SSE: the upstream
    answers on SSE and the client accepts only SSE, so the gateway frames the
    answer as an event. Checked failing before the answer was parsed as its
    skeleton: +143 MiB (JSON) and +191 MiB (SSE) for the 47.7 MiB answer."""
    form, upstream = answer_form
    accept = wire.ACCEPT_BOTH if form == "json" else "text/event-stream"
    log = logs_dir / f"memory-large-{form}-{client}-gateway.log"
    env = {"MCP_SHIM_WORKERS": "1"}
    with (
        procs.gateway_process(upstream, procs.free_port(), env, log_path=log) as (base, proc),
        httpx.Client(timeout=120.0) as http,
    ):
        # What any call loads, loaded first.
        small = wire.body("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        assert wire.post(http, base + "/mcp", small, wire.headers_for(small)).status_code == 200
        before = _peak_kib(proc.pid, "VmRSS")
        answer = _large_call(http, base + "/mcp", client, accept)
        grown_mib = (_peak_kib(proc.pid, "VmHWM") - before) / 1024
    assert answer.status_code == 200, answer.text[:300]
    expected_type = "application/json" if form == "json" else "text/event-stream"
    assert answer.headers["content-type"].startswith(expected_type)
    text = wire.answer_messages(answer)[-1]["result"]["content"][0]["text"]
    assert len(text) == ANSWER_BYTES
    answer_mib = ANSWER_BYTES / (1024 * 1024)
    print(f"{form} {client}: +{grown_mib:.1f} MiB peak ({grown_mib / answer_mib:.2f}x)")
    assert grown_mib <= ANSWER_GROWTH_BOUND * answer_mib, f"+{grown_mib:.1f} MiB"


@pytest.mark.parametrize("client", ["modern", "legacy"])
def test_answers_beyond_the_bytes_in_flight_wait_then_get_503(
    client: str, legacy_url: str, logs_dir: Path
) -> None:
    """An answer held by a client that does not read it (the whole bound's
    worth, let in alone) leaves no room: a second large answer waits 5 s, then
    its caller gets 503 with Retry-After and the setting's name; small answers
    are not counted. Once the first is read, the second comes through."""
    log = logs_dir / f"memory-room-{client}-gateway.log"
    env = {"MCP_SHIM_WORKERS": "1", "MCP_SHIM_MAX_ANSWER_BYTES_IN_FLIGHT": str(1024 * 1024)}
    with (
        procs.gateway_process(legacy_url, procs.free_port(), env, log_path=log) as (base, _),
        httpx.Client(timeout=120.0) as http,
    ):
        url = base + "/mcp"
        held = {"name": "large_result", "arguments": {"bytes": 40 * 1000 * 1000}}
        message = wire.body("tools/call", held)
        # Larger than loopback's socket buffers: most of it stays in the gateway.
        with http.stream("POST", url, json=message, headers=wire.headers_for(message)) as first:
            assert first.status_code == 200
            started = time.monotonic()
            second = _large_call(http, url, client, wire.ACCEPT_BOTH, 2 * 1000 * 1000)
            waited = time.monotonic() - started
            small = wire.body("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            echo = wire.post(http, url, small, wire.headers_for(small))
            assert echo.status_code == 200, echo.text[:300]
            first.read()
            answer = wire.answer_messages(first)[-1]
        assert len(answer["result"]["content"][0]["text"]) == 40 * 1000 * 1000
        assert second.status_code == 503, second.text[:300]
        assert second.headers["retry-after"] == "5"
        error = wire.answer_messages(second)[-1]["error"]
        assert "MCP_SHIM_MAX_ANSWER_BYTES_IN_FLIGHT" in error["message"], error
        assert waited >= 5
        again = _large_call(http, url, client, wire.ACCEPT_BOTH, 2 * 1000 * 1000)
        assert again.status_code == 200, again.text[:300]
    refused = [e for e in wire.log_lines(log) if e.get("event") == "answer_room_full"]
    assert refused and refused[0]["setting"] == "MCP_SHIM_MAX_ANSWER_BYTES_IN_FLIGHT"
