"""Legacy clients that leave their sessions without `DELETE`, in front of a stdio
upstream: a full credential share ends the least recently used idle one.

Most clients end a session by dropping the connection (CLIs, crashed
editors, notebooks). Each legacy session over stdio owns a server process,
and one credential (all anonymous callers together) holds at most
MCP_SHIM_STDIO_MAX_PROCESSES_PER_CREDENTIAL of them: once the share was full
of sessions their clients had left, every new `initialize` of that credential
got 429 "... all busy" until the 300 s idle timeout, although none was busy.
Now the least recently used idle one is ended (its client gets 404 and
initialises again, 2025-11-25 streamable-http "Session Management"), and only
a share whose sessions are all busy is refused, with a message saying with
what.

Real clients of others: the MCP Inspector CLI (SDK 1.x) run more times than
the share, then mcp-remote (a stdio-to-HTTP proxy), in front of npm's
server-everything over stdio, at the default bounds.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from tests import procs
from tests.integration import wire
from tests.integration.everything import EVERYTHING, NPM, node_command
from tests.integration.test_legacy_clients import call, headers, initialize
from tests.integration.test_stdio import stdio_gateway

pytestmark = pytest.mark.peers

INSPECTOR = NPM / "inspector" / "cli" / "build" / "cli.js"
MCP_REMOTE = procs.PEERS / "node" / "node_modules" / "mcp-remote" / "dist" / "proxy.js"
VERSION = "2025-06-18"
# The default share of the default 8 processes, per worker.
SHARE = Settings(upstream_command="true").stdio_process_share()  # type: ignore[call-arg]


def inspector_echo(url: str, text: str, home: Path) -> str:
    """One run of the Inspector CLI: `initialize`, one `tools/call`, exit (no DELETE)."""
    argv = [
        str(procs.require_peer(procs.NODE)),
        str(procs.require_peer(INSPECTOR)),
        "--cli",
        url,
        "--method",
        "tools/call",
        "--tool-name",
        "echo",
        "--tool-arg",
        f"message={text}",
    ]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home)}
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=home)
    assert run.returncode == 0, f"Inspector CLI failed ({run.returncode}): {run.stderr[-2000:]}"
    return run.stdout


class StdioClient:
    """Newline-delimited JSON-RPC on a child's stdin and stdout, read by a thread."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            with contextlib.suppress(ValueError):
                self._lines.put(json.loads(line))
        self._lines.put(None)

    def send(self, message: dict[str, Any]) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(message).encode() + b"\n")
        self._proc.stdin.flush()

    def answer(self, request_id: int, timeout: float = 30.0) -> dict[str, Any] | None:
        """The response to `request_id`; None if the child ended or said nothing."""
        while True:
            try:
                message = self._lines.get(timeout=timeout)
            except queue.Empty:
                return None
            if message is None:
                self._lines.put(None)
                return None
            if message.get("id") == request_id and "method" not in message:
                return message


@contextlib.contextmanager
def mcp_remote(url: str, home: Path) -> Iterator[StdioClient]:
    argv = [
        str(procs.require_peer(procs.NODE)),
        str(procs.require_peer(MCP_REMOTE)),
        url,
        "--transport",
        "http-only",
    ]
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "MCP_REMOTE_CONFIG_DIR": str(home / "mcp-auth"),
    }
    with (home / "mcp-remote.log").open("wb") as stderr:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=home
        )
        try:
            yield StdioClient(proc)
        finally:
            assert proc.stdin is not None
            with contextlib.suppress(OSError):
                proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# Ten steps of a client session through mcp-remote, each a request and a check
# of its result.
STEPS: list[tuple[str, dict[str, Any] | None, str]] = [
    (
        "initialize",
        {
            "protocolVersion": VERSION,
            "capabilities": {},
            "clientInfo": {"name": "steps", "version": "0"},
        },
        "mcp-servers/everything",
    ),
    ("tools/list", None, '"echo"'),
    ("tools/call", {"name": "echo", "arguments": {"message": "one"}}, "Echo: one"),
    ("tools/call", {"name": "get-sum", "arguments": {"a": 2, "b": 3}}, "The sum of 2 and 3 is 5"),
    ("prompts/list", None, "simple-prompt"),
    ("prompts/get", {"name": "simple-prompt"}, '"messages"'),
    ("resources/list", None, '"resources"'),
    ("resources/templates/list", None, '"resourceTemplates"'),
    ("ping", None, "{}"),
    ("tools/call", {"name": "echo", "arguments": {"message": "ten"}}, "Echo: ten"),
]


def run_steps(client: StdioClient) -> list[str]:
    """The steps that went through (stopped at the first that did not), by method."""
    done: list[str] = []
    for number, (method, params, expected) in enumerate(STEPS, start=1):
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": number, "method": method}
        if params is not None:
            message["params"] = params
        client.send(message)
        answer = client.answer(number)
        if answer is None or "result" not in answer or expected not in json.dumps(answer):
            break
        done.append(method)
        if method == "initialize":
            client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return done


def events(log: Path, name: str) -> list[dict[str, Any]]:
    return [line for line in wire.log_lines(log) if line.get("event") == name]


@pytest.mark.slow
def test_clients_that_leave_never_lock_their_credential_out(tmp_path: Path) -> None:
    """The Inspector CLI run more times than the share, then mcp-remote: every
    run is served; the session left first is the one ended (404, then a new
    `initialize` serves it)."""
    log = tmp_path / "gateway.log"
    with (
        stdio_gateway(node_command(EVERYTHING), log, workers="1") as (base, _),
        httpx.Client(timeout=30.0) as http,
    ):
        url = base + "/mcp"
        # A session its client leaves after one call: the least recently used.
        left, _ = initialize(http, url, VERSION)
        echo = {"name": "echo", "arguments": {"message": "before"}}
        assert call(http, url, left, VERSION, "tools/call", echo).status_code == 200
        for run in range(SHARE + 1):
            assert f"Echo: run {run}" in inspector_echo(url, f"run {run}", tmp_path)
        # The clients left without DELETE: these sessions are what the share held.
        ended = events(log, "legacy_session_ended")
        assert not [e for e in ended if e.get("reason") == "client_deleted"], ended
        assert [e.get("reason") for e in ended] == ["reclaimed"] * 2, ended
        assert not events(log, "stdio_process_share_exceeded")

        # The client back on the session ended first: 404, as for any expired
        # session; a new initialize serves it.
        again = call(http, url, left, VERSION, "tools/call", echo)
        assert again.status_code == 404, again.text[:300]
        assert again.json()["error"]["code"] == -32600
        fresh, _ = initialize(http, url, VERSION)
        assert call(http, url, fresh, VERSION, "ping").status_code == 200

        with mcp_remote(url, tmp_path) as remote:
            done = run_steps(remote)
        assert done == [method for method, _, _ in STEPS], (
            f"mcp-remote: {len(done)} of {len(STEPS)} steps; gateway log {log}, "
            f"mcp-remote log {tmp_path / 'mcp-remote.log'}"
        )
        http.delete(url, headers=headers(fresh, VERSION))


@pytest.mark.slow
def test_a_share_all_busy_is_refused_saying_with_what(tmp_path: Path) -> None:
    """Two processes per credential: one session with a GET stream open, one
    with a call in flight. A third `initialize` is refused, naming both."""
    log = tmp_path / "gateway.log"
    with (
        stdio_gateway(
            node_command(EVERYTHING),
            log,
            workers="1",
            stdio_max_processes_per_credential="2",
            connect_timeout_s="1",
        ) as (base, _),
        httpx.Client(timeout=30.0) as http,
    ):
        url = base + "/mcp"
        streaming, _ = initialize(http, url, VERSION)
        calling, _ = initialize(http, url, VERSION)
        # Progress after 3 s, the answer after 6: the first progress event says
        # the call is in flight on its process.
        slow = {
            "name": "trigger-long-running-operation",
            "arguments": {"duration": 6, "steps": 2},
            "_meta": {"progressToken": "slow"},
        }
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": slow}
        stream_headers = headers(streaming, VERSION, accept="text/event-stream")
        with (
            http.stream("GET", url, headers=stream_headers) as stream,
            http.stream("POST", url, json=message, headers=headers(calling, VERSION)) as slow_call,
        ):
            assert stream.status_code == 200
            assert slow_call.status_code == 200
            lines = slow_call.iter_lines()
            assert any("notifications/progress" in line for line in lines)
            refused = http.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {"protocolVersion": VERSION, "capabilities": {}},
                },
                headers=headers(),
            )
            assert any('"result"' in line for line in lines)
        assert refused.status_code == 429, refused.text[:300]
        message = refused.json()["error"]["message"]
        assert "already hold 2 stdio upstream processes, all busy: " in message, message
        assert "1 with a call in flight, 1 with a stream open" in message, message
        assert "MCP_SHIM_STDIO_MAX_PROCESSES_PER_CREDENTIAL" in message, message
        # Neither was taken: both still serve their clients.
        assert call(http, url, calling, VERSION, "ping").status_code == 200
        assert call(http, url, streaming, VERSION, "ping").status_code == 200
