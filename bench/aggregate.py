"""CPU per call through the aggregated /mcp against a single-server gateway in
front of the same server.

    .venv/bin/python bench/aggregate.py [--requests 2000] [--concurrency 8] [--rounds 2]
        [--workers 2]

Starts the fast upstream (bench/fast_upstream.py: a legacy server whose
`echo` costs next to nothing, so the gateway's own cost shows), a gateway in
front of it alone, and a gateway with a servers file naming it twice (`a`
and `b`, so that /mcp aggregates), and measures a `tools/call` of `echo`:

- modern and legacy clients through the single-server gateway (`/mcp`);
- a modern client on the named route (`/servers/a/mcp`);
- modern and legacy clients through the aggregate (`/mcp`, tool `a__echo`):
  the top-level graph, the aggregate's endpoint on loopback and the named
  route, all in the one gateway process (app/servers/aggregate/);
- modern and legacy clients on the named route of the same servers file run
  by `--workers` processes (MCP_SHIM_WORKERS, default 2; its CPU the whole
  process tree's: supervisor and workers), against the one-process rows.

Prints requests/s, p50/p99 latency and the CPU time the gateway process and
the upstream spent per request (from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common


def _target(
    name: str,
    url: str,
    era: str,
    tool: str,
    gateway: int,
    upstream: int,
    c: int,
    whole: bool = False,
) -> Any:
    """`whole`: the gateway's CPU is its process tree's (a supervisor and its workers)."""

    def make(i: int, _n: int) -> tuple[bytes, dict[str, str]]:
        if era == "legacy":
            return common.legacy_call(i, tool, {"text": "hi"}), {}
        return common.modern_call(i, tool, {"text": "hi"})

    async def drive(total: int) -> dict[str, float]:
        return await common.closed_loop(url, total, c, make, legacy=era == "legacy")

    gateways = (lambda: common.tree(gateway)) if whole else (lambda: [gateway])
    return name, drive, gateways, lambda: [upstream]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    c, n = args.concurrency, args.workers
    with common.fast_upstream() as (fast_url, fast):
        servers = json.dumps({"mcpServers": {"a": {"url": fast_url}, "b": {"url": fast_url}}})
        with (
            common.gateway(fast_url, "bench-agg-single.log") as (single, gw_single),
            common.gateway(None, "bench-agg-many.log", MCP_SHIM_SERVERS=servers) as (top, gw_many),
            common.gateway(
                None, "bench-agg-workers.log", MCP_SHIM_SERVERS=servers, MCP_SHIM_WORKERS=str(n)
            ) as (top_n, gw_n),
        ):
            named = top.removesuffix("/mcp") + "/servers/a/mcp"
            named_n = top_n.removesuffix("/mcp") + "/servers/a/mcp"
            one, many, up = gw_single.pid, gw_many.pid, fast.pid
            by_n = f"named route, {n} workers"
            targets = [
                _target("modern -> single gateway", single, "modern", "echo", one, up, c),
                _target("modern -> named route", named, "modern", "echo", many, up, c),
                _target("modern -> aggregate /mcp", top, "modern", "a__echo", many, up, c),
                _target("legacy -> single gateway", single, "legacy", "echo", one, up, c),
                _target("legacy -> aggregate /mcp", top, "legacy", "a__echo", many, up, c),
                _target("modern -> " + by_n, named_n, "modern", "echo", gw_n.pid, up, c, True),
                _target("legacy -> named route", named, "legacy", "echo", many, up, c),
                _target("legacy -> " + by_n, named_n, "legacy", "echo", gw_n.pid, up, c, True),
            ]  # fmt: skip
            results = asyncio.run(common.interleaved(targets, args.requests, args.rounds, 200))
    common.print_best(
        f"tools/call echo, {args.requests} requests x {args.rounds} rounds, concurrency {c}",
        results,
    )


if __name__ == "__main__":
    main()
