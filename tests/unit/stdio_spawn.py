"""One stdio server process started the way the gateway starts it (app/upstream/
stdio/transport.py), around a plain program (cat, sh) rather than an MCP server: for the unit
tests of routing, stderr and stopping, where what is checked is the process
handling, not MCP."""

from __future__ import annotations

import os

from app.upstream.stdio.session import StdioSession
from app.upstream.stdio.transport import StdioTransport


async def spawned(
    argv: list[str], *, grace_s: float, max_processes: int = 1
) -> tuple[StdioTransport, StdioSession]:
    """A transport with short timeouts and one process of `argv` started in it;
    `grace_s` is both the stdin and the SIGTERM grace of its stop."""
    transport = StdioTransport(
        argv,
        env={"PATH": os.defpath},
        max_processes=max_processes,
        start_timeout_s=5,
        slot_wait_s=5,
        request_timeout_s=5,
        liveness_s=5,
        stdin_grace_s=grace_s,
        term_grace_s=grace_s,
    )
    await transport._take_slot()
    return transport, await transport._spawn()
