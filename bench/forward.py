"""Forwarding cost: tools/call straight to the legacy fixture and through the
gateway, side by side in one run.

    .venv/bin/python bench/forward.py [--requests 3000] [--concurrency 8]

Starts the legacy fixture server (mcp 1.x, .peers/legacy) and two gateways in
front of it, with the aiohttp transport under httpx (httpx's own transport,
measured here before, is no longer an option: bench/JOURNAL.md, "Why each HTTP
stack remains"). Prints requests/s and p50/p99 latency for each,
and the CPU time each process spent per request (from /proc): the fixture is
slower than the gateway, so throughput alone would hide the cost of the hop.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common

# A caller that can answer input requests is served by the MRTR bridge (a lane:
# an upstream session of its own per call in flight), one that cannot by the
# shared session. Both paths are measured.
INPUT_CAPS = {"elicitation": {}, "sampling": {}, "roots": {}}


def _target(
    name: str, url: str, gateway: int | None, fixture: int, concurrency: int, caps: Any = None
) -> tuple[str, common.Drive, Any, Any]:
    def make(i: int, _n: int) -> tuple[bytes, dict[str, str]]:
        if gateway is None:
            return common.legacy_call(i), {}
        return common.modern_call(i, caps=caps)

    async def drive(total: int) -> dict[str, float]:
        return await common.closed_loop(url, total, concurrency, make, legacy=gateway is None)

    return name, drive, lambda: [gateway] if gateway else [], lambda: [fixture]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    c = args.concurrency
    with (
        common.upstream("legacy") as (upstream, fixture),
        common.gateway(upstream, "bench-gw-aiohttp.log") as (via_aio, gw_aio),
    ):
        targets = [
            _target("direct to legacy fixture", upstream, None, fixture.pid, c),
            _target("gateway (httpx + aiohttp transport)", via_aio, gw_aio.pid, fixture.pid, c),
            _target(
                "gateway, caller declares input caps", via_aio, gw_aio.pid, fixture.pid, c,
                INPUT_CAPS,
            ),
        ]  # fmt: skip
        results = asyncio.run(common.interleaved(targets, args.requests, args.rounds, 300))
    common.print_best(
        f"tools/call 'echo', {args.requests} requests x {args.rounds} rounds, concurrency {c}",
        results,
    )


if __name__ == "__main__":
    main()
