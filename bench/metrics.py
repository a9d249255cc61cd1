"""The per-call cost of the metrics, in process: what one call adds to the hot path.

Each iteration does what one forwarded call does (app/routes/mcp.py `McpRoutes.post` and
`done`, app/fronts/modern/gateway.py `_send` and `_answer`): a timing holder for the request,
the upstream part marked sent and answered, then the counter increment and the
two histogram observations of `Metrics.call_done`. Several methods and outcomes
rotate so the label-child cache is exercised as in real traffic. An empty loop
of the same shape is subtracted.

    .venv/bin/python bench/metrics.py --iterations 100000 --rounds 5
"""

from __future__ import annotations

import argparse
import time

from app import call, metrics
from translators.registry import get_version

MIXES = [
    ("tools/call", "ok", 200),
    ("tools/list", "ok", 200),
    ("resources/read", "error -32602", 400),
    ("tools/call", "input_required", 200),
]


def per_call(iterations: int) -> tuple[float, float]:
    """(seconds for the loop with the metric work, seconds for the empty loop)."""
    registry = metrics.Metrics(process=False)
    version = get_version("2026-07-28")
    assert version is not None
    mixes = [MIXES[i % len(MIXES)] for i in range(iterations)]

    started = time.perf_counter()
    for method, outcome, status in mixes:
        timing = call.start_call()
        call.upstream_sent()
        call.upstream_answered()
        registry.call_done(method, version, outcome, status, 0.0123, timing.upstream_s)
    work = time.perf_counter() - started

    started = time.perf_counter()
    for method, outcome, status in mixes:
        timing = call.CallTiming()
        _ = (method, version, outcome, status, 0.0123, timing.upstream_s)
    empty = time.perf_counter() - started
    return work, empty


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = []
    for _ in range(args.rounds):
        work, empty = per_call(args.iterations)
        results.append((work - empty) / args.iterations)
    best = min(results)
    print(
        f"{args.iterations} calls x {args.rounds} rounds: per-call metric work "
        f"best {best * 1e6:.2f} us, median {sorted(results)[len(results) // 2] * 1e6:.2f} us"
    )


if __name__ == "__main__":
    main()
