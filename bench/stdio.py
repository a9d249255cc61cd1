"""Calls per second through a stdio upstream with 1, 4 and 8 processes, side by side.

    .venv/bin/python bench/stdio.py [--requests 2000] [--concurrency 16] [--rounds 2]

Starts one gateway whose upstream is `@modelcontextprotocol/server-everything`
over stdio (MCP_SHIM_UPSTREAM_COMMAND, Node 22 from .peers/node) and sends
`tools/call echo` from `--concurrency` clients. The number of server processes
is set by how many pool keys the clients use: each client sends one of N
`Authorization` values, and the gateway keeps one process per key (callers
with different credentials never share a session), so N = 1, 4, 8 processes
serve the same load. Rounds interleave the three. Prints requests/s, p50/p99
latency, and CPU ms per request of the gateway and of all its server
processes together (from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common
from tests import procs

EVERYTHING = (
    procs.PEERS
    / "node"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-everything"
    / "dist"
    / "index.js"
)


def _target(
    keys: int, url: str, gateway: int, concurrency: int
) -> tuple[str, common.Drive, Any, Any]:
    def make(i: int, n: int) -> tuple[bytes, dict[str, str]]:
        body, headers = common.modern_call(i, "echo", {"message": "hi"})
        return body, {**headers, "authorization": f"Bearer bench-{n % keys}"}

    async def drive(total: int) -> dict[str, float]:
        return await common.closed_loop(url, total, concurrency, make)

    # The server processes, read after each warm-up (the gateway starts them).
    return str(keys), drive, lambda: [gateway], lambda: common.children(gateway)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    command = shlex.join([str(procs.require_peer(procs.NODE)), str(procs.require_peer(EVERYTHING))])
    env = {"MCP_SHIM_UPSTREAM_COMMAND": command, "MCP_SHIM_STDIO_MAX_PROCESSES": "8"}
    with common.gateway(None, "bench-stdio.log", **env) as (url, gw):
        targets = [_target(n, url, gw.pid, args.concurrency) for n in (1, 4, 8)]
        results = asyncio.run(common.interleaved(targets, args.requests, args.rounds, 400))
    common.print_best(
        f"tools/call 'echo' via stdio, {args.requests} requests x {args.rounds} rounds, "
        f"concurrency {args.concurrency}",
        {
            f"{name} (seen {max(r['processes'] for r in runs):.0f})": runs
            for name, runs in results.items()
        },
        first="processes",
    )


if __name__ == "__main__":
    main()
