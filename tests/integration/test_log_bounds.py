"""Log lines stay bounded whatever a call site passes (issue 19, found on the way):
a stdio server's exit line carried its whole stderr tail, 20 lines of up to 500
characters, past the 200-character limit every string field had."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import httpx

from tests import procs
from tests.integration import wire

# Writes 30 long stderr lines (the last one recognisable), then exits 3 before
# answering initialize.
NOISY = (
    "import sys\n"
    "for i in range(30): print(f'noise {i} ' + 'x' * 600, file=sys.stderr, flush=True)\n"
    "print('the last words', file=sys.stderr, flush=True)\n"
    "sys.exit(3)\n"
)


def test_a_stdio_servers_exit_line_is_bounded(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    port = procs.free_port()
    env = {
        "MCP_SHIM_UPSTREAM_COMMAND": shlex.join([sys.executable, "-c", NOISY]),
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_LOG_LEVEL": "info",
    }
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "app.serving.cli"]
    with procs.running(argv, base + "/healthz", env=env, log_path=log):
        message = wire.body("tools/call", {"name": "echo", "arguments": {}})
        with httpx.Client(timeout=30.0) as client:
            answer = wire.post(client, base + "/mcp", message, wire.headers_for(message))
        assert answer.status_code == 502, answer.text[:300]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "upstream_process_exited" not in log.read_text():
            time.sleep(0.1)
    raw = [line for line in log.read_text().splitlines() if "upstream_process_exited" in line]
    assert raw, "no exit line"
    for line in raw:
        assert len(line) < 1500, f"a {len(line)}-character log line"
    (exited, *_) = [
        line for line in wire.log_lines(log) if line.get("event") == "upstream_process_exited"
    ]
    # What is kept is the end of the tail, which tells why it exited.
    assert exited["exit_code"] == 3
    assert exited["stderr_tail"][-1] == "the last words"
    assert "earlier items cut" in exited["stderr_tail"][0]
