"""MCP_SHIM_WORKERS side by side: calls/s of the gateway with 1, 2 and 4 workers
in front of the fast upstream, in one run.

    .venv/bin/python bench/workers.py [--seconds 8] [--passes 2] [--concurrency 1,8,32]
        [--workers 1,2,4]

Rows: the fast upstream direct (a legacy session), then mcp-shim with each
worker count (2026-07-28 requests), all started here on free loopback ports.
wrk and the cells are bench/wrk.py's (closed loop, `-t1`, `tools/call echo`,
passes alternating the row order, the better pass shown); CPU per call is the
gateway's whole process tree (supervisor and workers). "cores used" is calls/s
times CPU per call, the most of any cell: what the machine gave the gateway
(a row cannot scale past it). "busiest worker" is the share of the workers' CPU
the busiest one used at the highest concurrency: 1/N is an even spread, 100%
means one worker did everything.
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import cpu_seconds, rss_mb
from bench.common import tree as _tree
from bench.wrk import (
    BENCH,
    MODERN_HEADERS,
    Route,
    legacy_session,
    matrix_parser,
    matrix_setup,
    preflight,
    run_wrk,
    table,
)
from tests import procs


def main() -> None:
    parser = matrix_parser(__doc__)
    parser.add_argument("--workers", default="1,2,4")
    args = parser.parse_args()
    concurrencies, logs, bodies = matrix_setup(args)
    counts = [int(n) for n in args.workers.split(",")]
    load0 = os.getloadavg()
    busiest: dict[str, float] = {}
    cores: dict[str, float] = {}  # CPU the gateway got: calls/s x CPU per call
    with ExitStack() as stack:
        port = procs.free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        upstream = stack.enter_context(
            procs.running(
                [sys.executable, str(BENCH / "fast_upstream.py"), "--port", str(port)],
                url,
                log_path=logs / "workers-up.log",
            )
        )
        paths = [Route("fast upstream (JSON, ~10 us) direct", url, "fast", False, None)]
        for count in counts:
            sport = procs.free_port()
            env = {
                "MCP_SHIM_UPSTREAM_URL": url,
                "MCP_SHIM_PORT": str(sport),
                "MCP_SHIM_HOST": "127.0.0.1",
                "MCP_SHIM_LOG_LEVEL": "info",  # as deployed: one JSON line per call
                "MCP_SHIM_WORKERS": str(count),
            }
            shim = stack.enter_context(
                procs.running(
                    [sys.executable, "-m", "app.serving.cli"],
                    f"http://127.0.0.1:{sport}/healthz",
                    env=env,
                    log_path=logs / f"workers-shim-{count}.log",
                )
            )
            name = f"  mcp-shim, {count} worker{'s' if count > 1 else ''}"
            paths.append(Route(name, f"http://127.0.0.1:{sport}/mcp", "fast", True, shim.pid))
            paths[-1].headers = dict(MODERN_HEADERS)
        for p in paths:
            p.upstream_pid = upstream.pid
        for p in paths:
            if not p.modern:
                p.headers = legacy_session(p.url)
            preflight(p)
        for p in paths:
            # A worker's first calls open its upstream session: warm every one.
            run_wrk(p, 8, args.warmup, bodies)
            p.rss_idle = rss_mb(*_tree(p.pid)) if p.pid else 0.0
        top = concurrencies[-1]
        for n in range(args.passes):
            for c in concurrencies:
                for p in paths if n % 2 == 0 else list(reversed(paths)):
                    children = [q for q in _tree(p.pid) if q != p.pid] if p.pid else []
                    before = {q: cpu_seconds(q) for q in children}
                    result = run_wrk(p, c, args.seconds, bodies)
                    p.runs.setdefault(c, []).append(result)
                    used = [cpu_seconds(q) - before[q] for q in children]
                    cores[p.name] = max(
                        cores.get(p.name, 0.0), result["rps"] * result["cpu_us"] / 1e6
                    )
                    if c == top and len(used) > 1 and sum(used) > 0:
                        busiest[p.name] = max(busiest.get(p.name, 0.0), max(used) / sum(used))
                    print(
                        f"pass {n + 1} c{c:<3} {p.name.strip():<36} "
                        f"{result['rps']:>9,.0f} req/s  p99 {result['p99_ms']:6.1f} ms  "
                        f"CPU {result['cpu_us']:5.0f} us/call",
                        file=sys.stderr,
                        flush=True,
                    )
    print(
        f"\nwrk -t1, closed loop, tools/call echo; {args.passes} alternating passes of "
        f"{args.seconds:g} s per cell; req/s of the better pass (x: against direct); CPU per "
        f"call: the gateway's process tree, range over all cells; load average {load0[0]:.1f} "
        f"at start, {os.getloadavg()[0]:.1f} at end; {os.cpu_count()} CPUs, "
        f"{len(os.sched_getaffinity(0))} usable"
    )
    print(table(paths, concurrencies))
    for name, most in cores.items():
        share = (
            f"; busiest worker {busiest[name]:.0%} of the workers' CPU at c{top}"
            if name in busiest
            else ""
        )
        print(f"{name.strip()}: at most {most:.2f} cores used in a cell{share}")


if __name__ == "__main__":
    main()
