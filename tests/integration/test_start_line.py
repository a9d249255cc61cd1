"""The gateway's one readable start line: where it listens, what it fronts, and
what the first probe learned, once per gateway (not once per worker).

It is the `message` of a `gateway_listening` JSON log line, so the stream stays
JSON lines only; a terminal gets it as plain text as well (tests/unit/test_start_line.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests import procs


def listening_lines(log: Path, count: int = 1, timeout: float = 15) -> list[dict[str, Any]]:
    """The `gateway_listening` lines once `count` `gateway_started` lines are in."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        started = [x for x in lines if x.get("event") == "gateway_started"]
        if len(started) >= count or time.monotonic() > deadline:
            assert len(started) == count, log.read_text()[-3000:]
            return [x for x in lines if x.get("event") == "gateway_listening"]
        time.sleep(0.1)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_start_line_names_both_ends_once_per_gateway(tmp_path: Path, workers: str) -> None:
    up, port = procs.free_port(), procs.free_port()
    log = tmp_path / "gateway.log"
    with (
        procs.legacy_server(up) as upstream,
        procs.gateway(upstream, port, {"MCP_SHIM_WORKERS": workers}, log_path=log),
    ):
        found = listening_lines(log, count=int(workers))
    assert [x["message"] for x in found] == [
        f"mcp-shim listening on http://127.0.0.1:{port}/mcp -> http://127.0.0.1:{up}/mcp (legacy)"
    ], found


def test_a_stdio_upstream_is_named_by_its_program_alone(tmp_path: Path) -> None:
    port = procs.free_port()
    log = tmp_path / "gateway.log"
    server = procs.ROOT / "tests" / "fixtures" / "stdio_orphan_server.py"
    command = f"{sys.executable} {server} --token=s3cret"
    env = {
        "MCP_SHIM_UPSTREAM_COMMAND": command,
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_WORKERS": "1",
    }
    argv = [sys.executable, "-m", "app.serving.cli"]
    with procs.running(argv, f"http://127.0.0.1:{port}/healthz", env, log_path=log):
        found = listening_lines(log)
    assert len(found) == 1, found
    message = found[0]["message"]
    assert message.startswith(
        f"mcp-shim listening on http://127.0.0.1:{port}/mcp -> stdio: {sys.executable} ... ("
    ), message
    assert "s3cret" not in log.read_text()
