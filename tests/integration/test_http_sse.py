"""HTTP+SSE upstreams (2024-11-05 transport, issue 11): the published
`@modelcontextprotocol/server-everything` in its `sse` mode (official TypeScript
SDK's SSEServerTransport: GET /sse, POST /message?sessionId=...) behind the
gateway, found by the detection 2025-03-26 basic/transports "Backwards
Compatibility" describes, and driven with raw 2026-07-28 requests.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import wire
from tests.schema import MODERN

pytestmark = pytest.mark.peers

EVERYTHING = (
    procs.PEERS
    / "node"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-everything"
    / "dist"
    / "index.js"
)
SAMPLING: dict[str, Any] = {"sampling": {}}
NO_CAPS: dict[str, Any] = {}


@contextlib.contextmanager
def everything_sse(port: int, log_path: Path) -> Iterator[str]:
    """server-everything over HTTP+SSE on `port` (its PORT variable); yields the SSE URL."""
    argv = [str(procs.require_peer(procs.NODE)), str(procs.require_peer(EVERYTHING)), "sse"]
    # GET /sse never ends; GET /message is a quick 404 once the server listens.
    with procs.running(
        argv, f"http://127.0.0.1:{port}/message", env={"PORT": str(port)}, log_path=log_path
    ):
        yield f"http://127.0.0.1:{port}/sse"


@pytest.fixture(scope="module")
def sse_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    logs = tmp_path_factory.mktemp("sse")
    with (
        everything_sse(procs.free_port(), logs / "everything.log") as sse_url,
        procs.gateway(
            sse_url, procs.free_port(), {"MCP_SHIM_STATE_KEY": STATE_KEY}, logs / "gateway.log"
        ) as base,
    ):
        yield base, sse_url, logs / "gateway.log"


STATE_KEY = "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s="  # 32 bytes, base64


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60.0) as client:
        yield client


def call(
    http: httpx.Client,
    base: str,
    name: str,
    arguments: dict[str, Any] | None = None,
    caps: dict[str, Any] | None = None,
    **kwargs: Any,
) -> mw.Answer:
    return mw.tool_call(
        http, base, name, arguments, caps=NO_CAPS if caps is None else caps, **kwargs
    )


def text_of(answer: mw.Answer) -> str:
    return "".join(c.get("text", "") for c in answer.result.get("content", []))


def test_discover_list_and_calls_over_http_sse(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    base, _, log = sse_gateway
    discover = mw.send(http, base, mw.message_for("server/discover", {}, caps=NO_CAPS))
    assert discover.status == 200, discover.final
    info = discover.result["_meta"]["io.modelcontextprotocol/serverInfo"]
    assert info["name"] == "mcp-servers/everything"
    assert MODERN in discover.result["supportedVersions"]
    assert discover.result["resultType"] == "complete"

    tools = mw.send(http, base, mw.message_for("tools/list", {}, caps=NO_CAPS))
    assert tools.status == 200, tools.final
    assert {"echo", "get-sum"} <= {tool["name"] for tool in tools.result["tools"]}

    echo = call(http, base, "echo", {"message": "hi over HTTP+SSE"})
    assert echo.status == 200 and text_of(echo) == "Echo: hi over HTTP+SSE"
    assert echo.result["resultType"] == "complete"
    total = call(http, base, "get-sum", {"a": 2, "b": 3})
    assert text_of(total) == "The sum of 2 and 3 is 5."
    # Detected once: Streamable HTTP was refused (POST /sse: 404), HTTP+SSE worked.
    detected = [
        line for line in wire.log_lines(log) if line.get("event") == "upstream_transport_detected"
    ]
    assert [line["transport"] for line in detected] == ["sse"]


def test_concurrent_calls_share_the_stream(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    """Responses come back on the one GET stream and reach their own calls by id."""
    import concurrent.futures

    base = sse_gateway[0]

    def one(n: int) -> str:
        with httpx.Client(timeout=60.0) as client:
            return text_of(call(client, base, "echo", {"message": f"n{n}"}))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(one, range(24)))
    assert texts == [f"Echo: n{n}" for n in range(24)]


def test_sampling_round_trip_over_http_sse(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    """server-everything's sampling request, sent on the SSE stream during the call,
    becomes input_required; the retry's answer goes back by POST."""
    base = sse_gateway[0]
    args = {"prompt": "Capital of France?"}
    first = call(http, base, "trigger-sampling-request", args, caps=SAMPLING)
    assert first.input_required, first.final
    ((key, question),) = first.requests.items()
    assert question["method"] == "sampling/createMessage"
    answer = {
        "role": "assistant",
        "content": {"type": "text", "text": "Paris"},
        "model": "test-model",
        "stopReason": "endTurn",
    }
    done = call(
        http,
        base,
        "trigger-sampling-request",
        args,
        caps=SAMPLING,
        input_responses={key: answer},
        state=first.state,
    )
    assert done.status == 200 and done.result["resultType"] == "complete", done.final
    assert '"Paris"' in text_of(done)


def test_stream_loss_fails_calls_and_the_next_session_reconnects(
    tmp_path: Path, http: httpx.Client
) -> None:
    port = procs.free_port()
    log = tmp_path / "gateway.log"
    with procs.gateway(f"http://127.0.0.1:{port}/sse", procs.free_port(), log_path=log) as base:
        with everything_sse(port, tmp_path / "everything-1.log"):
            assert text_of(call(http, base, "echo", {"message": "one"})) == "Echo: one"
            outcome: dict[str, Any] = {}

            def long_call() -> None:
                with httpx.Client(timeout=60.0) as client:
                    started = time.monotonic()
                    args = {"duration": 20, "steps": 20}
                    outcome["answer"] = call(client, base, "trigger-long-running-operation", args)
                    outcome["after"] = time.monotonic() - started

            worker = threading.Thread(target=long_call)
            worker.start()
            time.sleep(1.5)
        # The server is gone, and its stream with it: the call in flight fails at
        # once, not after its 20 s.
        worker.join(15)
        assert not worker.is_alive()
        assert outcome["answer"].status == 502, outcome["answer"].final
        assert outcome["after"] < 10
        assert any(line.get("event") == "upstream_sse_stream_ended" for line in wire.log_lines(log))
        # Nothing to connect to now.
        assert call(http, base, "echo", {"message": "two"}).status == 502
        with everything_sse(port, tmp_path / "everything-2.log"):
            # A new session on a new stream, without restarting the gateway.
            assert text_of(call(http, base, "echo", {"message": "three"})) == "Echo: three"


def test_forced_streamable_http_does_not_fall_back(
    sse_gateway: tuple[str, str, Path], tmp_path: Path, http: httpx.Client
) -> None:
    sse_url = sse_gateway[1]
    env = {"MCP_SHIM_UPSTREAM_TRANSPORT": "streamable-http"}
    with procs.gateway(sse_url, procs.free_port(), env, tmp_path / "gateway.log") as base:
        answer = call(http, base, "echo", {"message": "x"})
    assert answer.status == 502
    assert "HTTP 404" in answer.error["message"]
    assert "HTTP+SSE" not in answer.error["message"]


def probe(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_SHIM_")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "probe", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=procs.ROOT,
    )


@pytest.mark.parametrize("mode", ["auto", "sse"])
def test_probe_reports_sse(sse_gateway: tuple[str, str, Path], mode: str) -> None:
    sse_url = sse_gateway[1]
    started = time.monotonic()
    done = probe("--json", MCP_SHIM_UPSTREAM_URL=sse_url, MCP_SHIM_UPSTREAM_TRANSPORT=mode)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["transport"] == "sse"
    assert report["server"]["name"] == "mcp-servers/everything"
    assert "echo" in report["tools"]
    assert time.monotonic() - started < 30


def test_a_url_that_is_neither_transport(legacy_url: str) -> None:
    """The fixture's /nowhere: POST 404, then GET 404 too; both are named."""
    done = probe(MCP_SHIM_UPSTREAM_URL=legacy_url.removesuffix("/mcp") + "/nowhere")
    assert done.returncode == 4
    assert "upstream refused initialize with HTTP 404" in done.stderr
    assert "no HTTP+SSE stream either (upstream answered the SSE GET with HTTP 404)" in done.stderr
