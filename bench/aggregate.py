"""CPU per call through a servers file's named route and aggregated /mcp,
against a single-server gateway in front of the same server, driven by wrk.

    .venv/bin/python bench/aggregate.py [--seconds 8] [--passes 3] [--concurrency 8]
        [--workers 2]

Starts the fast upstream (bench/fast_upstream.py: a legacy server whose
`echo` costs next to nothing, so the gateway's own cost shows), a gateway in
front of it alone, a gateway with a servers file naming it twice (`a` and
`b`, so that /mcp aggregates), and the same servers file run by `--workers`
processes (MCP_SHIM_WORKERS). wrk (`-t1 -cC`, bench/call.lua) sends a
`tools/call` of `echo`, each row its own client era and path:

- the single-server gateway's `/mcp`;
- the named route `/servers/a/mcp`;
- the aggregated `/mcp`, tool `a__echo`, handed straight to the member's
  route: a modern client's call as it is (app/servers/aggregate/direct.py), a
  legacy client's in a session the gateway opened at the member's route for
  the client's session (direct_legacy.py);
- the same three with `--workers` processes (CPU of the whole process tree:
  supervisor and workers), against the single-server gateway run so.

Each cell runs `--passes` times, the rows' order reversed on every other
pass. Printed per row: req/s (the best pass), p50/p99, the gateway's CPU per
call from /proc (utime + stime over the calls wrk completed; the lowest and
highest pass) and its median over the passes against the single-server
gateway's of the same client era and process model.
"""

from __future__ import annotations

import json
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common, wrk


def _bodies(logs: Path, tool: str) -> dict[bool, Path]:
    """The call bodies of `tool` by era (`Route.modern`), as wrk.call_bodies writes them."""
    modern = json.loads(json.dumps(wrk.MODERN_CALL))
    legacy = json.loads(json.dumps(wrk.LEGACY_CALL))
    modern["params"]["name"] = legacy["params"]["name"] = tool
    out = {
        False: logs / f"aggregate-legacy-{tool}.json",
        True: logs / f"aggregate-modern-{tool}.json",
    }
    out[False].write_bytes(orjson.dumps(legacy))
    out[True].write_bytes(orjson.dumps(modern))
    return out


def _route(name: str, url: str, modern: bool, pid: int, tool: str) -> wrk.Route:
    headers = {**wrk.MODERN_HEADERS, "Mcp-Name": tool} if modern else wrk.legacy_session(url)
    return wrk.Route(name, url, "fast", modern, pid, headers)


def main() -> None:
    parser = wrk.matrix_parser(__doc__)
    parser.set_defaults(passes=3, concurrency="8")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    concurrencies, logs, _ = wrk.matrix_setup(args)
    n = args.workers
    tools = {"echo": _bodies(logs, "echo"), "a__echo": _bodies(logs, "a__echo")}
    with ExitStack() as stack:
        fast_url, fast = stack.enter_context(common.fast_upstream())
        servers = json.dumps({"mcpServers": {"a": {"url": fast_url}, "b": {"url": fast_url}}})
        single, one = stack.enter_context(common.gateway(fast_url, "bench-agg-single.log"))
        top, many = stack.enter_context(
            common.gateway(None, "bench-agg-many.log", MCP_SHIM_SERVERS=servers)
        )
        single_n, one_n = stack.enter_context(
            common.gateway(fast_url, "bench-agg-single-workers.log", MCP_SHIM_WORKERS=str(n))
        )
        top_n, by_n = stack.enter_context(
            common.gateway(
                None, "bench-agg-workers.log", MCP_SHIM_SERVERS=servers, MCP_SHIM_WORKERS=str(n)
            )
        )
        named = top.removesuffix("/mcp") + "/servers/a/mcp"
        named_n = top_n.removesuffix("/mcp") + "/servers/a/mcp"
        rows = []
        for era, modern in (("modern", True), ("legacy", False)):
            rows += [
                (_route(f"{era} -> single gateway", single, modern, one.pid, "echo"), "echo"),
                (_route(f"{era} -> named route", named, modern, many.pid, "echo"), "echo"),
                (_route(f"{era} -> aggregate /mcp", top, modern, many.pid, "a__echo"), "a__echo"),
                (
                    _route(f"{era} -> single, {n} workers", single_n, modern, one_n.pid, "echo"),
                    "echo",
                ),
                (_route(f"{era} -> named, {n} workers", named_n, modern, by_n.pid, "echo"), "echo"),
                (
                    _route(f"{era} -> aggregate, {n} workers", top_n, modern, by_n.pid, "a__echo"),
                    "a__echo",
                ),
            ]
        for route, _ in rows:
            route.upstream_pid = fast.pid
        for route, tool in rows:
            wrk.preflight(route, tools[tool][route.modern].read_bytes())
            wrk.run_wrk(route, 8, args.warmup, tools[tool])  # warm-up, not counted
        for p in range(args.passes):
            for c in concurrencies:
                for route, tool in rows if p % 2 == 0 else list(reversed(rows)):
                    result = wrk.run_wrk(route, c, args.seconds, tools[tool])
                    route.runs.setdefault(c, []).append(result)
                    print(
                        f"pass {p + 1} c{c} {route.name:<30} {result['rps']:>7,.0f} req/s "
                        f"CPU {result['cpu_us']:4.0f} us/call",
                        file=sys.stderr,
                        flush=True,
                    )
    _print(rows, concurrencies, args)


def _print(rows: list[tuple[wrk.Route, str]], concurrencies: list[int], args: object) -> None:
    print(f"tools/call echo, wrk -t1, {args.seconds:g} s x {args.passes} passes")  # type: ignore[attr-defined]
    print(
        f"{'path':<30} {'c':>3} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'CPU us/call':>13} {'median':>7} {'x single':>8}"
    )
    # Each row against the single-server gateway of its client era and process model.
    singles: dict[tuple[bool, bool, int], float] = {}
    for route, _ in rows:
        workers = "workers" in route.name
        for c in concurrencies:
            runs = route.runs[c]
            best = max(runs, key=lambda r: r["rps"])
            cpu = [r["cpu_us"] for r in runs]
            median = statistics.median(cpu)
            if "single" in route.name:
                singles[(route.modern, workers, c)] = median
            ratio = median / singles[(route.modern, workers, c)]
            print(
                f"{route.name:<30} {c:>3} {best['rps']:>7,.0f} {best['p50_ms']:>7.2f} "
                f"{best['p99_ms']:>7.2f} {min(cpu):>6.0f}-{max(cpu):<6.0f} {median:>7.0f} "
                f"{ratio:>7.2f}x"
            )


if __name__ == "__main__":
    main()
