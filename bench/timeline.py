"""Where a call's time goes, from the gateway's own `call_timeline` log lines.

    bash bench/wrk.sh --only legacy --concurrency 8,32 --shim-env MCP_SHIM_LOG_LEVEL=debug
    .venv/bin/python bench/timeline.py results/bench/shim-legacy-0.log

At log level debug the gateway logs, after each call, when each of its steps
happened (ms since the request reached the route; app/metrics.py `mark`):
the body read, the call sent upstream, the upstream's answer head (status
and headers), its answer read (the JSON body, or the SSE event carrying the
response), the answer written to the client, and the call done (the upstream
exchange closed: an SSE stream drained). This script cuts each call into the
segments between those steps and prints, for all calls and for the slowest
1% (the p99 tail), each segment's p50, p99 and mean: the segment that grows
in the tail is where the tail comes from.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import orjson

STEPS = [
    ("body_read_ms", "request read (route start -> body read)"),
    ("upstream_sent_ms", "gateway before the upstream (parse, pool lease)"),
    ("answer_head_ms", "upstream: POST -> answer head"),
    ("answer_read_ms", "upstream: answer head -> answer read"),
    ("answer_written_ms", "gateway: answer read -> written to the client"),
    ("done_ms", "after the answer (exchange closed / drained)"),
]


def segments(line: dict[str, float]) -> list[float] | None:
    previous = 0.0
    out = []
    for key, _ in STEPS:
        at = line.get(key)
        if not isinstance(at, int | float):
            return None
        out.append(at - previous)
        previous = at
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def report(calls: list[list[float]], title: str) -> None:
    total = [sum(c) for c in calls]
    print(f"{title}: {len(calls)} calls, total p50 {_pct(total, 0.5):.2f} ms, "
          f"p99 {_pct(total, 0.99):.2f} ms, max {max(total):.1f} ms")  # fmt: skip
    print(f"  {'segment':<50} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'share':>6}")
    whole = sum(total) or 1.0
    for n, (_, label) in enumerate(STEPS):
        values = [c[n] for c in calls]
        print(
            f"  {label:<50} {_pct(values, 0.5):>8.2f} {_pct(values, 0.99):>8.2f} "
            f"{statistics.fmean(values):>8.2f} {sum(values) / whole * 100:>5.1f}%"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("log", type=Path, help="a gateway log written at level debug")
    parser.add_argument("--skip", type=int, default=200, help="first calls left out (warm-up)")
    args = parser.parse_args()
    calls = []
    for raw in args.log.read_bytes().splitlines():
        if b'"call_timeline"' not in raw:
            continue
        cut = segments(orjson.loads(raw))
        if cut is not None:
            calls.append(cut)
    calls = calls[args.skip :]
    if not calls:
        raise SystemExit(f"no call_timeline lines in {args.log} (log level debug?)")
    report(calls, "all calls")
    slowest = sorted(calls, key=sum)[-max(1, len(calls) // 100) :]
    report(slowest, "slowest 1%")


if __name__ == "__main__":
    main()
