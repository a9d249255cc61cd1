"""stdio upstreams (issue 11): published stdio MCP servers run by the gateway itself.

The servers are the real published ones, pinned in tests/peers/ and built by
scripts/setup_peers.sh: `@modelcontextprotocol/server-everything`,
`server-memory` and `server-filesystem` from npm (run with the pinned Node 22),
`mcp-server-time` from PyPI (in the legacy venv, mcp 1.x). The gateway starts
them from `MCP_SHIM_UPSTREAM_COMMAND`, one process per legacy session, and the
tests drive it with the official mcp 2.x client (tests/modern_client/
stdio_servers.py) and raw 2026-07-28 requests. Processes are counted from
/proc: the gateway's children and their process groups.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import everything as ev
from tests.integration import mrtr_wire as mw
from tests.integration import wire
from tests.integration.everything import (
    EVERYTHING,
    NPM,
    SAMPLING,
    call,
    node_command,
    sampled,
    text_of,
    wait_for,
)
from tests.integration.test_slow_clients import raw_request
from tests.procs import run_modern_client

pytestmark = pytest.mark.peers

MEMORY = NPM / "server-memory" / "dist" / "index.js"
FILESYSTEM = NPM / "server-filesystem" / "dist" / "index.js"


@contextmanager
def stdio_gateway(command: str, log_path: Path, **settings: str) -> Iterator[tuple[str, int]]:
    """A gateway whose upstream is `command`; yields its base URL and its pid."""
    port = procs.free_port()
    env = {
        "MCP_SHIM_UPSTREAM_COMMAND": command,
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_LOG_LEVEL": "info",
        **{f"MCP_SHIM_{k.upper()}": v for k, v in settings.items() if k.islower()},
        **{k: v for k, v in settings.items() if not k.islower()},
    }
    argv = [sys.executable, "-m", "app.serving.cli"]
    with procs.running(argv, f"http://127.0.0.1:{port}/healthz", env=env, log_path=log_path) as p:
        yield f"http://127.0.0.1:{port}", p.pid


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, process group) of a live process, None if it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[2])


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def children(pid: int) -> list[int]:
    return sorted(p for p in _all_pids() if (_stat(p) or (0, 0))[0] == pid)


def group_members(groups: set[int]) -> list[int]:
    return [p for p in _all_pids() if (_stat(p) or (0, 0))[1] in groups]


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60.0) as client:
        yield client


STATE_KEY = base64.b64encode(b"k" * 32).decode()


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, Path]]:
    log = tmp_path_factory.mktemp("stdio") / "gateway-everything.log"
    with stdio_gateway(
        node_command(EVERYTHING),
        log,
        upstream_env="SHIM_TEST_PASSED",
        state_key=STATE_KEY,
        SHIM_TEST_PASSED="passed-through",
        SHIM_TEST_NOT_LISTED="kept-out",
    ) as (base, pid):
        yield base, pid, log


# ---------------------------------------------------------------------------
# server-everything: what stdio alone has (its checks: test_contract.py)
# ---------------------------------------------------------------------------


def test_the_child_gets_a_minimal_environment(
    everything: tuple[str, int, Path], http: httpx.Client
) -> None:
    env_text = text_of(call(http, everything[0], "get-env"))
    assert '"SHIM_TEST_PASSED": "passed-through"' in env_text  # MCP_SHIM_UPSTREAM_ENV
    assert '"PATH"' in env_text
    for kept_out in ("SHIM_TEST_NOT_LISTED", "MCP_SHIM_STATE_KEY", STATE_KEY, "MCP_SHIM_PORT"):
        assert kept_out not in env_text


# ---------------------------------------------------------------------------
# Other published servers
# ---------------------------------------------------------------------------


def test_server_memory_create_then_read(tmp_path: Path) -> None:
    memory_file = tmp_path / "memory.jsonl"
    # `env VAR=value cmd`: the server's own setting, on the command line.
    command = f"env MEMORY_FILE_PATH={shlex.quote(str(memory_file))} " + node_command(MEMORY)
    with stdio_gateway(command, tmp_path / "gateway.log") as (base, _):
        doc = run_modern_client("stdio_servers.py", base + "/mcp", "memory", "Ada Lovelace")
    assert isinstance(doc, dict) and doc["adoptedVia"] == "discover"
    assert "create_entities" in doc["tools"] and "read_graph" in doc["tools"]
    assert "result" in doc["create"], doc["create"]
    graph = doc["graph"]["result"]
    assert "Ada Lovelace" in graph["content"][0]["text"]
    assert "Ada Lovelace" in memory_file.read_text()  # the server wrote where it was told


def test_mcp_server_time_from_pypi(tmp_path: Path) -> None:
    command = shlex.join([str(procs.LEGACY_PY), "-m", "mcp_server_time", "--local-timezone", "UTC"])
    with stdio_gateway(command, tmp_path / "gateway.log") as (base, _):
        doc = run_modern_client("stdio_servers.py", base + "/mcp", "time", "Asia/Tokyo")
    assert isinstance(doc, dict) and "get_current_time" in doc["tools"]
    text = doc["now"]["result"]["content"][0]["text"]
    assert '"timezone": "Asia/Tokyo"' in text and "+09:00" in text


def test_server_filesystem_reads_a_file(tmp_path: Path) -> None:
    root = tmp_path / "files"
    root.mkdir()
    (root / "note.txt").write_text("written by the test\n")
    command = node_command(FILESYSTEM, str(root))
    with stdio_gateway(command, tmp_path / "gateway.log") as (base, _):
        doc = run_modern_client(
            "stdio_servers.py", base + "/mcp", "filesystem", str(root / "note.txt")
        )
    assert isinstance(doc, dict) and "read_text_file" in doc["tools"]
    assert doc["read"]["result"]["content"][0]["text"].strip() == "written by the test"


# ---------------------------------------------------------------------------
# Failures, bounds, shutdown
# ---------------------------------------------------------------------------


def test_concurrent_calls_of_any_size_each_get_their_own_answer(
    everything: tuple[str, int, Path],
) -> None:
    # One process serves them all (one pool key): the lines of many calls go to
    # its stdin together, as the loop groups them (app/write_coalescer.py), and
    # lines past the coalescer's bound at once. Every answer is its own call's.
    base = everything[0]
    sizes = [1, 100, 5_000, 20_000, 70_000]
    messages = [f"m{n}-" + "x" * sizes[n % len(sizes)] for n in range(60)]
    with (
        httpx.Client(timeout=60.0, limits=httpx.Limits(max_connections=12)) as client,
        ThreadPoolExecutor(12) as pool,
    ):
        answers = list(
            pool.map(lambda m: text_of(call(client, base, "echo", {"message": m})), messages)
        )
    assert answers == [f"Echo: {m}" for m in messages]


def _raw_post(port: int, message: dict[str, Any], headers: dict[str, str]) -> bytes:
    payload = json.dumps(message).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (
        f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{head}"
        f"content-length: {len(payload)}\r\n\r\n".encode()
        + payload
    )


def _read_answers(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """`count` HTTP/1.1 answers read off `sock`, each framed by its content-length."""
    sock.settimeout(30)
    data, answers = b"", []
    while len(answers) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            status_line, *lines = data[:end].decode("latin-1").split("\r\n")
            fields = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines)}
            size = int(fields["content-length"])
            if len(data) >= end + 4 + size:
                answers.append(
                    (int(status_line.split()[1]), fields, data[end + 4 : end + 4 + size])
                )
                data = data[end + 4 + size :]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed after {len(answers)} of {count} answers"
        data += chunk
    return answers


def test_pipelined_requests_are_answered_in_order_and_the_connection_serves_on(
    everything: tuple[str, int, Path], http: httpx.Client
) -> None:
    # RFC 9112 section 9.3.2: a server MUST send its responses to pipelined
    # requests in the order the requests were received. A small JSON answer is
    # written whole by the protocol (ConnectionLink.write_whole), past uvicorn's
    # `send`, which is where uvicorn ends a request's turn: the next one on the
    # connection must still be served, for a modern client and a legacy one.
    base = everything[0]
    port = int(base.rsplit(":", 1)[1])
    first = {"content-type": "application/json", "accept": wire.ACCEPT_BOTH}
    opened = wire.post(http, base + "/mcp", wire.legacy_initialize(), first)
    session = {"mcp-session-id": opened.headers["mcp-session-id"]}
    in_session = {**first, **session, "mcp-protocol-version": "2025-11-25"}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert wire.post(http, base + "/mcp", initialized, in_session).status_code == 202
    json_only = {"accept": "application/json"}

    def modern(n: int) -> bytes:
        message = wire.body(
            "tools/call", {"name": "echo", "arguments": {"message": f"m{n}"}}, rid=n
        )
        return _raw_post(port, message, wire.headers_for(message, **json_only))

    def legacy(n: int) -> bytes:
        message = {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": f"l{n}"}},
        }
        return _raw_post(port, message, {**in_session, **json_only})

    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(modern(1) + legacy(2) + modern(3) + legacy(4))
        answers = _read_answers(sock, 4)
        sock.sendall(legacy(5))  # after the pipelined ones, on the same connection
        answers += _read_answers(sock, 1)
    texts = [json.loads(body)["result"]["content"][0]["text"] for _, _, body in answers]
    assert texts == ["Echo: m1", "Echo: l2", "Echo: m3", "Echo: l4", "Echo: l5"]
    assert [status for status, _, _ in answers] == [200] * 5
    assert len({fields["x-request-id"] for _, fields, _ in answers}) == 5


def test_a_server_killed_mid_call(tmp_path: Path, http: httpx.Client) -> None:
    log = tmp_path / "gateway.log"
    with stdio_gateway(node_command(EVERYTHING), log) as (base, gateway_pid):
        assert text_of(call(http, base, "echo", {"message": "up"})) == "Echo: up"
        (child,) = children(gateway_pid)
        worker, outcome = ev.call_in_background(
            base, "trigger-long-running-operation", {"duration": 20, "steps": 4}
        )
        time.sleep(1.0)
        os.kill(child, signal.SIGKILL)
        worker.join(30)
        answer: mw.Answer = outcome["answer"]
        # Its call fails at once, with the reason, not after the operation's 20 s.
        assert outcome["took"] < 10
        assert answer.status == 502
        assert answer.error["code"] == -32603
        assert "killed by signal 9" in answer.error["message"]
        # The next call gets a new process.
        assert text_of(call(http, base, "echo", {"message": "again"})) == "Echo: again"
        (replacement,) = children(gateway_pid)
        assert replacement != child
    exited = [
        line for line in wire.log_lines(log) if line.get("event") == "upstream_process_exited"
    ]
    assert exited and exited[0]["exit_code"] == -9 and exited[0]["pid"] == child
    assert any("STDIO" in line for line in exited[0]["stderr_tail"])  # its last stderr lines


def test_a_server_that_stops_answering(tmp_path: Path, http: httpx.Client) -> None:
    log = tmp_path / "gateway.log"
    with stdio_gateway(node_command(EVERYTHING), log, stdio_liveness_s="1") as (base, gateway_pid):
        assert text_of(call(http, base, "echo", {"message": "up"})) == "Echo: up"
        (child,) = children(gateway_pid)
        os.kill(child, signal.SIGSTOP)  # alive, but silent
        started = time.monotonic()
        answer = call(http, base, "echo", {"message": "anyone?"})
        assert time.monotonic() - started < 10
        assert answer.status == 502
        assert "did not answer a ping within 1s" in answer.error["message"]
        assert text_of(call(http, base, "echo", {"message": "again"})) == "Echo: again"
        wait_for(lambda: _stat(child) is None, what="the stopped process to be gone")


def test_process_bound_and_what_a_caller_gets_beyond_it(tmp_path: Path, http: httpx.Client) -> None:
    log = tmp_path / "gateway.log"
    with stdio_gateway(
        node_command(EVERYTHING),
        log,
        stdio_max_processes="2",
        # One caller here: the bound of all processes, not a caller's share of them.
        stdio_max_processes_per_credential="2",
        connect_timeout_s="3",
    ) as (base, gateway_pid):
        most = 0
        watching = True

        def watch() -> None:
            nonlocal most
            while watching:
                most = max(most, len(children(gateway_pid)))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            # Two parked calls hold two processes (their lanes); the session the pool
            # opened for their key was idle and made room.
            parked = [
                call(http, base, "trigger-sampling-request", {"prompt": p}, caps=SAMPLING)
                for p in ("a", "b")
            ]
            assert all(p.input_required for p in parked), [p.final for p in parked]
            # Beyond the bound: a call waits MCP_SHIM_CONNECT_TIMEOUT_S, then 503.
            refused = call(http, base, "echo", {"message": "no room"})
            assert refused.status == 503
            assert "MCP_SHIM_STDIO_MAX_PROCESSES" in refused.error["message"]
            # A parked call completes: its lane is idle, and is reclaimed for the next call.
            ((key, _),) = parked[0].requests.items()
            done = call(
                http,
                base,
                "trigger-sampling-request",
                {"prompt": "a"},
                caps=SAMPLING,
                input_responses={key: sampled("ok")},
                state=parked[0].state,
            )
            assert done.result["resultType"] == "complete", done.final
            assert text_of(call(http, base, "echo", {"message": "room"})) == "Echo: room"
        finally:
            watching = False
            watcher.join()
        assert most == 2


def test_no_process_outlives_the_gateway(tmp_path: Path, http: httpx.Client) -> None:
    log = tmp_path / "gateway.log"
    with stdio_gateway(node_command(EVERYTHING), log) as (base, gateway_pid):
        call(http, base, "echo", {"message": "one"})
        for prompt in ("x", "y"):  # parked at shutdown
            assert call(
                http, base, "trigger-sampling-request", {"prompt": prompt}, caps=SAMPLING
            ).input_required
        groups = set(children(gateway_pid))
        assert len(groups) >= 3
        assert group_members(groups)
    # procs.running sent SIGTERM and waited for the gateway to exit.
    assert group_members(groups) == []
    stopped = {
        line["pid"] for line in wire.log_lines(log) if line.get("event") == "upstream_process_ended"
    }
    assert stopped == groups


def test_no_process_outlives_a_killed_gateway(tmp_path: Path, http: httpx.Client) -> None:
    with stdio_gateway(node_command(EVERYTHING), tmp_path / "gateway.log") as (base, gateway_pid):
        call(http, base, "echo", {"message": "one"})
        assert call(
            http, base, "trigger-sampling-request", {"prompt": "z"}, caps=SAMPLING
        ).input_required
        groups = set(children(gateway_pid))
        assert len(groups) >= 2
        os.kill(gateway_pid, signal.SIGKILL)
        wait_for(lambda: group_members(groups) == [], timeout=10, what="the children to die")


def test_a_server_that_fails_to_start(tmp_path: Path, http: httpx.Client) -> None:
    """server-everything with an unknown transport argument prints its usage (to
    stderr, and a list to stdout, which is not JSON-RPC) and exits 1."""
    log = tmp_path / "gateway.log"
    with stdio_gateway(node_command(EVERYTHING, "bogus"), log) as (base, gateway_pid):
        for _ in range(3):
            answer = call(http, base, "echo", {"message": "x"})
            assert answer.status == 502
            assert "exited with code 1 during initialize" in answer.error["message"]
        assert children(gateway_pid) == []
    exits = [line for line in wire.log_lines(log) if line.get("event") == "upstream_process_exited"]
    assert len(exits) == 3 and all(e["exit_code"] == 1 for e in exits)
    assert "Unknown transport: bogus" in exits[0]["stderr_tail"]
    # Each failure in a row doubles the wait before the next start.
    backoff = [
        line["next_start_in_s"]
        for line in wire.log_lines(log)
        if line.get("event") == "upstream_process_backoff"
    ]
    assert backoff == [0.1, 0.2, 0.4]


@pytest.fixture(scope="module")
def fixture_over_stdio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway's own legacy fixture (mcp 1.x), run as its stdio upstream."""
    log = tmp_path_factory.mktemp("stdio") / "gateway-fixture.log"
    command = shlex.join([str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE), "--stdio"])
    with stdio_gateway(command, log) as (base, _):
        yield base


def test_a_caller_gone_while_the_server_starts_leaves_the_start_to_the_next(
    tmp_path: Path, http: httpx.Client
) -> None:
    """The first call starts the server process; its caller disconnects before the
    process has answered initialize, while a second caller of the same session
    key waits for it. The start was the first caller's task, cancelled with it,
    and the second got the CancelledError: a plain-text 500."""
    command = shlex.join([str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE), "--stdio"])
    with stdio_gateway(command, tmp_path / "gateway.log") as (base, _):
        message = wire.body("tools/call", {"name": "echo", "arguments": {"text": "first"}})
        port = int(base.rsplit(":", 1)[1])
        with raw_request(port, message) as first, ThreadPoolExecutor(1) as pool:
            time.sleep(0.05)
            second = pool.submit(call, http, base, "echo", {"text": "second"})
            time.sleep(0.05)
            first.close()  # gone while its server process starts (a Python one: ~0.5 s)
            answer = second.result(60)
        assert answer.status == 200, answer.messages
        assert text_of(answer) == "second"


def test_a_server_request_for_a_capability_the_caller_lacks(
    fixture_over_stdio: str, http: httpx.Client
) -> None:
    """The fixture samples without checking what its client declared. The request
    arrives on stdout with nothing tying it to the call but being the one call in
    flight on that process; the caller declared no sampling."""
    answer = call(http, fixture_over_stdio, "test_missing_capability")
    # 2026-07-28 basic/index: a server MUST return MissingRequiredClientCapabilityError
    # (-32021) when processing needs a capability the client did not declare; HTTP 400.
    assert answer.status == 400
    assert answer.error["code"] == -32021
    assert answer.error["data"]["requiredCapabilities"] == {"sampling": {}}


def test_fixture_sampling_round_trip_over_stdio(
    fixture_over_stdio: str, http: httpx.Client
) -> None:
    first = call(http, fixture_over_stdio, "ask_sampling", {"prompt": "Capital?"}, caps=SAMPLING)
    assert first.input_required, first.final
    mw.check_input_required(first)
    ((key, _),) = first.requests.items()
    done = call(
        http,
        fixture_over_stdio,
        "ask_sampling",
        {"prompt": "Capital?"},
        caps=SAMPLING,
        input_responses={key: sampled("Paris")},
        state=first.state,
    )
    assert done.result["resultType"] == "complete", done.final
    assert "Paris" in text_of(done)


def test_logs_of_the_fixture_reach_its_caller(fixture_over_stdio: str, http: httpx.Client) -> None:
    logged = call(http, fixture_over_stdio, "test_logging_tool", meta={wire.META_LOG_LEVEL: "info"})
    lines = [m for m in logged.messages if m.get("method") == "notifications/message"]
    assert [line["params"]["data"] for line in lines] == ["Diagnostic trace logging activated"]
    quiet = call(http, fixture_over_stdio, "test_logging_tool")
    assert [m for m in quiet.messages if m.get("method")] == []


def test_an_unprompted_roots_request_is_answered(
    everything: tuple[str, int, Path], http: httpx.Client
) -> None:
    """The server's stderr is read into the gateway's log (`upstream_stderr`)."""
    log = everything[2]

    def stderr() -> Iterator[str]:
        for line in wire.log_lines(log):
            if line.get("event") == "upstream_stderr":
                yield str(line.get("line", ""))

    ev.check_an_unprompted_roots_request_is_answered(http, everything[0], stderr)
