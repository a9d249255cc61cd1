"""The server processes a worker's balance weighs (app/serving/balance.py, ServerLoad)
are those that answered initialize: a process still starting is not load. A real
process, which answers initialize only once the test lets it."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from app.upstream.stdio.transport import StdioTransport
from tests.unit.stdio_spawn import until

# Reads initialize, waits for the file named in argv[1], answers with the same id,
# then reads on (notifications/initialized) until its stdin ends.
_SERVER = """
import json, os, sys, time
request = json.loads(sys.stdin.readline())
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
answer = {"jsonrpc": "2.0", "id": request["id"], "result": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "serverInfo": {"name": "slow-start", "version": "0"}}}
print(json.dumps(answer), flush=True)
for line in sys.stdin:
    pass
"""

# What the process is asked; it answers whatever the params (the process handling is
# under test, not MCP).
_INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}


async def test_a_server_counts_as_load_only_once_it_has_answered_initialize(
    tmp_path: Path,
) -> None:
    go = tmp_path / "go"
    transport = StdioTransport(
        [sys.executable, "-c", _SERVER, str(go)],
        env={"PATH": os.defpath},
        max_processes=1,
        start_timeout_s=10,
        slot_wait_s=5,
        request_timeout_s=5,
        liveness_s=30,
        stdin_grace_s=1,
        term_grace_s=1,
    )
    opening = asyncio.create_task(transport.open_session(_INITIALIZE, {}))
    try:
        await until(lambda: transport.processes == 1 and not transport._starting, 10, "a process")
        await asyncio.sleep(0.1)  # it is running, and reading initialize
        assert transport.server_pids() == []
        go.touch()
        session, result = await asyncio.wait_for(opening, 10)
        assert result["serverInfo"]["name"] == "slow-start"
        assert transport.server_pids() == [session.pid]
    finally:
        go.touch()
        await asyncio.gather(opening, return_exceptions=True)  # ended, whatever failed above
        await transport.aclose()
