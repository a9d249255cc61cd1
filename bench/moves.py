"""What moving connections between workers buys: the default against
MCP_SHIM_MOVE_CONNECTIONS=false and against one worker, side by side,
alternating rounds.

    .venv/bin/python bench/moves.py [--upstream legacy|fast|python-stdio|everything]
                                    [--client modern|legacy]
                                    [--rows moved,not-moved,one,one-again] [--concurrency 1,8,32]
                                    [--seconds 3] [--rounds 6]

Gateways in front of the same upstream (the mcp 1.x fixture over Streamable
HTTP, whose ~1.3 ms a call leaves the workers mostly idle,
bench/fast_upstream.py, or `python-stdio`: the mcp 1.x fixture as each
gateway's stdio server, a process per worker and per legacy session, whose
CPU is left out of the gateway's, or `everything`: npm's server-everything,
bench/peers.py's, the same way): `moved` (the default: 2 workers moving connections),
`not-moved` (2 workers, MCP_SHIM_MOVE_CONNECTIONS=false), `one` (1 worker)
and `one-again` (a second, identical 1-worker gateway: the control, whose
ratio to `one` is what the machine's noise alone makes of two equal rows).
wrk -t1 sends `tools/call echo` (bench/call.lua) to each in turn, their order
reversed every round: 2026-07-28 calls, or with `--client legacy` 2025-11-25
calls on one session per gateway. Per round and gateway: calls/s, gateway
CPU per call (the process tree's utime + stime from /proc over wrk's calls),
the gateway's involuntary context switches per call (preemptions: another
task took a core while the gateway had work) and the machine's idle CPU time
per call (both cores summed: what the run left unused), and the connections
moved so far by reason (`mcp_shim_connections_moved_total`,
from each gateway's metrics port). At the end, the median of the rounds per
gateway and concurrency, and each row's medians against the `one` row's when
it ran: the same rounds, so a slow minute of the machine weighs on both; and
the median and range of the rounds' own ratios (each row against the one
worker's run of the same round).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from app.metrics import parse_exposition  # noqa: E402
from bench import common, peers  # noqa: E402
from bench.wrk import LEGACY_CALL, MODERN_CALL, MODERN_HEADERS, legacy_session  # noqa: E402
from tests import procs  # noqa: E402

# --upstream of a stdio server: its bench/peers.py server.
STDIO_SERVERS = {"python-stdio": "python", "everything": "everything"}

# One gateway's round: calls/s, CPU per call (us), preemptions per call, machine
# idle per call (us).
Round = tuple[float, float, float, float]

GATEWAYS = {
    "moved": {"MCP_SHIM_WORKERS": "2"},
    "not-moved": {"MCP_SHIM_WORKERS": "2", "MCP_SHIM_MOVE_CONNECTIONS": "false"},
    "one": {"MCP_SHIM_WORKERS": "1"},
    "one-again": {"MCP_SHIM_WORKERS": "1"},
}


def wrk(
    url: str, body: Path, headers: dict[str, str], concurrency: int, seconds: int
) -> dict[str, float]:
    env = {
        **os.environ,
        "BENCH_BODY": str(body),
        "BENCH_HEADERS": "\n".join(f"{k}: {v}" for k, v in headers.items()),
    }
    argv = ["wrk", "-t1", f"-c{concurrency}", f"-d{seconds}s", "-s", str(ROOT / "bench/call.lua")]
    out = subprocess.run([*argv, url], env=env, capture_output=True, text=True, check=True)
    line = next(x for x in out.stdout.splitlines() if x.startswith("BENCH "))
    return dict(orjson.loads(line[6:]))


def moved(metrics: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for name, labels, value in parse_exposition(httpx.get(metrics, timeout=5).text):
        if name == "mcp_shim_connections_moved_total":
            counts[labels["reason"]] = counts.get(labels["reason"], 0.0) + value
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--upstream", choices=("legacy", "fast", *STDIO_SERVERS), default="legacy")
    parser.add_argument("--concurrency", default="32")
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--client", choices=("modern", "legacy"), default="modern")
    parser.add_argument("--rows", default="moved,not-moved", help=", ".join(GATEWAYS))
    args = parser.parse_args()
    rows = args.rows.split(",")
    if unknown := set(rows) - set(GATEWAYS):
        parser.error(f"unknown rows {sorted(unknown)}; known: {', '.join(GATEWAYS)}")
    legacy = args.client == "legacy"
    figures: dict[tuple[str, int], list[Round]] = {}
    with contextlib.ExitStack() as stack:
        body = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "call.json"
        upstream: str | None = None
        extra: dict[str, str] = {}
        # The stdio server's processes are left out of the gateway's CPU.
        marker = peers.NO_STDIO
        if args.upstream in STDIO_SERVERS:
            server = peers.servers()[STDIO_SERVERS[args.upstream]]
            extra["MCP_SHIM_UPSTREAM_COMMAND"] = shlex.join(server.argv)
            marker = server.marker
            body.write_bytes(orjson.dumps(peers.call_body(server, args.client)))
        else:
            upstream, _ = stack.enter_context(common.upstream(args.upstream))
            body.write_bytes(orjson.dumps(LEGACY_CALL if legacy else MODERN_CALL))
        gateways = {}
        for name in rows:
            port = str(procs.free_port())
            url, proc = stack.enter_context(
                common.gateway(
                    upstream,
                    f"moves-{name}.log",
                    MCP_SHIM_METRICS_PORT=port,
                    **GATEWAYS[name],
                    **extra,
                )
            )
            headers = legacy_session(url) if legacy else MODERN_HEADERS
            gateways[name] = (url, headers, proc.pid, f"http://127.0.0.1:{port}/metrics")
        for c in (int(x) for x in args.concurrency.split(",")):
            for r in range(args.rounds):
                for name in rows[:: 1 if r % 2 == 0 else -1]:
                    url, headers, pid, metrics = gateways[name]
                    own = peers.split_tree(pid, marker)[0]
                    before = common.cpu_seconds(*own)
                    switches = common.context_switches(*own)[1]
                    idle = common.machine_idle_seconds()
                    run = wrk(url, body, headers, c, args.seconds)
                    cpu = common.cpu_seconds(*own) - before
                    calls = max(run["requests"], 1)
                    preempted = (common.context_switches(*own)[1] - switches) / calls
                    idle_us = (common.machine_idle_seconds() - idle) / calls * 1e6
                    rps = run["requests"] / (run["duration_us"] / 1e6)
                    cpu_us = cpu / calls * 1e6
                    figures.setdefault((name, c), []).append((rps, cpu_us, preempted, idle_us))
                    print(
                        f"c{c:<3} round {r} {name:9} {rps:8,.0f} calls/s "
                        f"{cpu_us:6.0f} us/call {preempted:5.2f} preempted/call "
                        f"idle {idle_us:5.0f} us/call  moved so far {moved(metrics)}",
                        flush=True,
                    )
    print("\nmedian of the rounds")
    medians = {
        key: tuple(statistics.median(x[i] for x in runs) for i in range(4))
        for key, runs in figures.items()
    }
    for (name, c), (rps, cpu_us, preempted, idle_us) in medians.items():
        line = (
            f"c{c:<3} {name:9} {rps:8,.0f} calls/s {cpu_us:6.0f} us/call "
            f"{preempted:5.2f} preempted/call idle {idle_us:5.0f} us/call"
        )
        if name != "one" and (one := medians.get(("one", c))):
            line += f"   vs one worker: {rps / one[0]:.2f}x calls/s, {cpu_us / one[1]:.2f}x CPU"
            line += paired(figures[(name, c)], figures[("one", c)])
        print(line)


def paired(row: list[Round], one: list[Round]) -> str:
    """The row's figures over the one worker's of the same round (run next to
    each other), their median and range: a slow minute of the machine moves
    both of a pair, where it moves the medians of the rounds apart."""
    shown = []
    for i, name in enumerate(("calls/s", "CPU")):
        ratios = sorted(r[i] / o[i] for r, o in zip(row, one, strict=True))
        mid = statistics.median(ratios)
        shown.append(f"{mid:.2f}x {name} ({ratios[0]:.2f}-{ratios[-1]:.2f})")
    return "; per round: " + ", ".join(shown)


if __name__ == "__main__":
    main()
