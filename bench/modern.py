"""The modern pass-through path, side by side with the direct call and with the
legacy-upstream path, in one run.

    .venv/bin/python bench/modern.py [--requests 2000] [--concurrency 8] [--rounds 2]

Starts the modern fixture (mcp 2.x, 2026-07-28 only, .peers/modern), the legacy
fixture (mcp 1.x, .peers/legacy), one gateway in front of each, and measures a
`tools/call` of an echo tool:

- a modern client straight to the modern fixture (no gateway);
- a modern client through the gateway to the modern fixture: passed through,
  nothing translated (app/fronts/modern/passthrough.py);
- a modern client through the gateway to the legacy fixture: validated,
  translated, sent on a pooled legacy session (the path of the earlier issues);
- a legacy client straight to the legacy fixture (for scale);
- a legacy client through the gateway to the modern fixture: the gateway's
  own session, each request sent stateless (app/upstream/modern/session.py).

Prints requests/s, p50/p99 latency, and the CPU time the gateway and the
upstream spent per request (from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
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
    gateway: int | None,
    upstream: int,
    concurrency: int,
) -> tuple[str, common.Drive, Any, Any]:
    arguments = {"text": "hi"}

    def make(i: int, _n: int) -> tuple[bytes, dict[str, str]]:
        if era == "legacy":
            return common.legacy_call(i, tool, arguments), {}
        return common.modern_call(i, tool, arguments)

    async def drive(total: int) -> dict[str, float]:
        legacy = era == "legacy"
        return await common.closed_loop(url, total, concurrency, make, legacy=legacy)

    return name, drive, lambda: [gateway] if gateway else [], lambda: [upstream]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    c = args.concurrency
    with (
        common.upstream("modern") as (modern_url, modern),
        common.upstream("legacy") as (legacy_url, legacy),
        common.gateway(modern_url, "bench-gw-modern.log") as (via_modern, gw_modern),
        common.gateway(legacy_url, "bench-gw-legacy.log") as (via_legacy, gw_legacy),
    ):
        targets = [
            _target("modern client -> modern fixture (direct)", modern_url, "modern",
                    "test_echo", None, modern.pid, c),
            _target("modern client -> gateway -> modern (pass)", via_modern, "modern",
                    "test_echo", gw_modern.pid, modern.pid, c),
            _target("modern client -> gateway -> legacy", via_legacy, "modern",
                    "echo", gw_legacy.pid, legacy.pid, c),
            _target("legacy client -> legacy fixture (direct)", legacy_url, "legacy",
                    "echo", None, legacy.pid, c),
            _target("legacy client -> gateway -> modern", via_modern, "legacy",
                    "test_echo", gw_modern.pid, modern.pid, c),
        ]  # fmt: skip
        results = asyncio.run(common.interleaved(targets, args.requests, args.rounds, 200))
    common.print_best(
        f"tools/call echo, {args.requests} requests x {args.rounds} rounds, concurrency {c}",
        results,
    )


if __name__ == "__main__":
    main()
