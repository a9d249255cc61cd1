"""The server processes a worker's balance weighs (app/serving/balance.py, ServerLoad)
are those that answered initialize: a process still starting is not load. A real
process, which answers initialize only once the test lets it."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from app.upstream.stdio.transport import StdioTransport
from tests.waiting import until

# Reads initialize, then waits until the test closes the FIFO named in argv[1],
# answers with the same id, then reads on (notifications/initialized) until its
# stdin ends.
_SERVER = """
import json, sys
request = json.loads(sys.stdin.readline())
with open(sys.argv[1]) as go:
    go.read()
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
    os.mkfifo(go)
    writer: list[int] = []

    def the_server_waits() -> bool:
        """The FIFO opened for writing, which succeeds only once the server has
        it open for reading: it has read initialize and waits."""
        try:
            writer.append(os.open(go, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no reader yet
            return False
        return True

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
        await until(the_server_waits, timeout_s=10, what="the server to read initialize")
        assert transport.processes == 1
        assert transport.server_pids() == []
        os.close(writer.pop())  # the server reads the end of the FIFO and answers
        session, result = await asyncio.wait_for(opening, 10)
        assert result["serverInfo"]["name"] == "slow-start"
        assert transport.server_pids() == [session.pid]
    finally:
        for fd in writer:
            os.close(fd)
        opening.cancel()
        await asyncio.gather(opening, return_exceptions=True)  # ended, whatever failed above
        await transport.aclose()
