"""Where the default's extra CPU per call goes when the machine is shared:
user and kernel CPU, and context switches, per call, one worker against the
default.

    .venv/bin/python bench/preempt.py [--concurrency 8] [--rounds 3] [--seconds 3]
        [--workers 1,2] [--nice 19]

In front of bench/fast_upstream.py (about 10 us a call), wrk (bench/call.lua,
2026-07-28 `tools/call echo`) drives each gateway for a warm-up second, then
`--seconds` measured: the gateway's workers' utime and stime (/proc/<pid>/stat)
and their threads' voluntary and involuntary context switches
(/proc/<pid>/task/*/status), each divided by the calls of that window (wrk's
rate over its whole run times the window: wrk counts no window of its own).
The rows alternate, round by round; the medians of the rounds close.

An involuntary switch is the scheduler taking the CPU from a worker that
could run on: on a machine whose cores the load generator and the upstream
share with the gateway, a worker that is not saturated is taken off its core
at the others' wakes. Results and reading in bench/JOURNAL.md ("Fifth session").
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import orjson

from bench.common import ROOT, cpu_split, fast_upstream, gateway, tree
from bench.wrk import MODERN_CALL, MODERN_HEADERS

FIELDS = ("calls/s", "user us", "sys us", "CPU us", "voluntary", "involuntary")


def switches(pids: list[int]) -> tuple[int, int]:
    """Voluntary and involuntary context switches of every thread of `pids`."""
    voluntary = involuntary = 0
    for pid in pids:
        tasks = Path(f"/proc/{pid}/task")
        for task in tasks.iterdir() if tasks.exists() else []:
            try:
                status = (task / "status").read_text()
            except OSError:
                continue  # a thread that ended
            voluntary += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M)[1])  # type: ignore[index]
            involuntary += int(re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", status)[1])  # type: ignore[index]
    return voluntary, involuntary


def wrk(
    url: str, concurrency: int, seconds: float, env: dict[str, str], nice: int
) -> subprocess.Popen[str]:
    argv = ["wrk", "-t1", f"-c{concurrency}", f"-d{seconds:g}s", "-s", "bench/call.lua", url]
    if nice:
        argv = ["nice", "-n", str(nice), *argv]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)


def measure(
    url: str, pids: list[int], args: argparse.Namespace, env: dict[str, str]
) -> dict[str, float]:
    run = wrk(url, args.concurrency, 1 + args.seconds + 1, env, args.nice)
    time.sleep(1)
    user0, sys0 = cpu_split(*pids)
    vol0, invol0 = switches(pids)
    start = time.monotonic()
    time.sleep(args.seconds)
    user1, sys1 = cpu_split(*pids)
    vol1, invol1 = switches(pids)
    window = time.monotonic() - start
    out = run.communicate()[0]
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if found is None:
        raise RuntimeError(f"wrk printed no rate:\n{out}")
    rate = float(found[1])
    calls = rate * window
    return {
        "calls/s": rate,
        "user us": (user1 - user0) / calls * 1e6,
        "sys us": (sys1 - sys0) / calls * 1e6,
        "CPU us": (user1 - user0 + sys1 - sys0) / calls * 1e6,
        "voluntary": (vol1 - vol0) / calls,
        "involuntary": (invol1 - invol0) / calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--workers", default="1,2", help="comma-separated MCP_SHIM_WORKERS values")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run wrk and the upstream at this niceness: the gateway's workers then take "
        "the CPU from them rather than they from the workers",
    )
    args = parser.parse_args()
    counts = args.workers.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        body = Path(tmp) / "body.json"
        body.write_bytes(orjson.dumps(MODERN_CALL))
        headers = "".join(f"{k}: {v}\n" for k, v in MODERN_HEADERS.items())
        env = {"PATH": "/usr/bin:/bin", "BENCH_BODY": str(body), "BENCH_HEADERS": headers}
        rows: dict[str, list[dict[str, float]]] = {count: [] for count in counts}
        with fast_upstream() as (upstream_url, upstream_proc):
            if args.nice:
                os.setpriority(os.PRIO_PROCESS, upstream_proc.pid, args.nice)
            for round_ in range(args.rounds):
                for count in counts if round_ % 2 == 0 else reversed(counts):
                    log = f"preempt-{count}.log"
                    with gateway(upstream_url, log, MCP_SHIM_WORKERS=count) as (url, proc):
                        # A second of load first: sessions open, workers settle.
                        wrk(url, args.concurrency, 1, env, args.nice).communicate()
                        pids = [p for p in tree(proc.pid) if p != proc.pid] or [proc.pid]
                        figures = measure(url, pids, args, env)
                    rows[count].append(figures)
                    shown = "  ".join(f"{k} {figures[k]:,.2f}" for k in FIELDS)
                    print(f"round {round_} workers {count}: {shown}", flush=True)
    rounds = f"medians of {args.rounds} rounds of {args.seconds:g} s"
    print(f"\nc{args.concurrency}, fast upstream, {rounds}")
    print("workers | " + " | ".join(FIELDS))
    for count, figures in rows.items():
        medians = [statistics.median(f[k] for f in figures) for k in FIELDS]
        print(f"{count:>7} | " + " | ".join(f"{m:,.2f}" for m in medians))


if __name__ == "__main__":
    main()
