"""RSS soak: the gateway under wrk for N minutes, its RSS every 30 s and the growth per call.

    .venv/bin/python bench/soak.py [--minutes 10] [--concurrency 32] [--interval 30]
                                   [--upstream fast|legacy]

Starts bench/fast_upstream.py (or the mcp 1.x legacy fixture, `--upstream
legacy`) and one gateway in front of it (log level `info`,
as deployed: one JSON line per call, written to /dev/null unless `--log`),
makes one checked call, reads the idle RSS, then runs one wrk (`-t1`, closed
loop, `tools/call echo` in 2026-07-28 form, bench/call.lua) for the whole
soak. Every `--interval` seconds it reads the gateway's RSS from /proc and
the calls completed so far from the gateway's own counter (`mcp_shim_calls`
on GET /metrics), and prints them. At the end: the slope of RSS against calls
(least squares, KB per 1,000 calls) over all samples under load and over the
second half alone (after warm-up), wrk's summary, and the RSS once the load
has stopped. Any non-2xx answer or socket error in wrk's run fails the soak.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from app.metrics import parse_exposition  # noqa: E402 - the repository root is on sys.path only now
from bench import common  # noqa: E402
from bench import wrk as bench_wrk  # noqa: E402
from tests import procs  # noqa: E402

# The gateway's entry point, from the given source tree whatever the working directory.
_RUN = "import sys; sys.path.insert(0, sys.argv.pop(1))\n" + common.RUN_MAIN


def calls_so_far(base: str) -> float:
    """Calls the gateway has counted (every outcome), from its /metrics."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return sum(v for name, _, v in parse_exposition(text) if name == "mcp_shim_calls_total")


def slope_kb_per_1000(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of RSS (MB) against calls, as KB per 1,000 calls."""
    n = len(samples)
    if n < 2:
        return float("nan")
    mx = sum(c for c, _ in samples) / n
    my = sum(r for _, r in samples) / n
    sxx = sum((c - mx) ** 2 for c, _ in samples)
    if sxx == 0:
        return float("nan")
    sxy = sum((c - mx) * (r - my) for c, r in samples)
    return sxy / sxx * 1000 * 1000  # MB per call -> KB per 1,000 calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter that runs the gateway (e.g. a venv with the runtime dependencies only)",
    )
    parser.add_argument(
        "--shim-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the gateway",
    )
    parser.add_argument(
        "--source",
        type=Path,
        default=ROOT,
        help="source tree the gateway runs from (e.g. an export of an earlier commit, "
        "for a before/after figure); the fast upstream and the bench stay this tree's",
    )
    parser.add_argument(
        "--upstream",
        choices=("fast", "legacy"),
        default="fast",
        help="bench/fast_upstream.py, or the mcp 1.x legacy fixture (tests/fixtures)",
    )
    parser.add_argument("--log", action="store_true", help="keep the gateway's log lines")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install wrk (bench/wrk.sh installs it)")
    out = ROOT / "results" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    body = out / "modern-call.json"
    body.write_bytes(orjson.dumps(bench_wrk.MODERN_CALL))
    seconds = max(1, round(args.minutes * 60))
    # Byte-compiled as an installed wheel is (pip compiles at install): a source
    # tree under PYTHONDONTWRITEBYTECODE compiles every module at each start,
    # which leaves about 2 MB more RSS.
    subprocess.run(
        [args.python, "-m", "compileall", "-q", "app", "translators"], cwd=args.source, check=True
    )
    with ExitStack() as stack:
        port = procs.free_port()
        upstream = f"http://127.0.0.1:{port}/mcp"
        if args.upstream == "legacy":
            upstream = stack.enter_context(procs.legacy_server(port))
        else:
            stack.enter_context(
                procs.running(
                    [
                        sys.executable,
                        str(bench_wrk.BENCH / "fast_upstream.py"),
                        "--port",
                        str(port),
                    ],
                    upstream,
                )
            )
        sport = procs.free_port()
        base = f"http://127.0.0.1:{sport}"
        env = {
            "MCP_SHIM_UPSTREAM_URL": upstream,
            "MCP_SHIM_PORT": str(sport),
            "MCP_SHIM_HOST": "127.0.0.1",
            "MCP_SHIM_LOG_LEVEL": "info",
            "MCP_SHIM_WORKERS": "1",  # one process's RSS: bench/workers.py measures more
            **dict(item.split("=", 1) for item in args.shim_env),
        }
        shim = stack.enter_context(
            procs.running(
                [args.python, "-c", _RUN, str(args.source.resolve())],
                f"{base}/healthz",
                env=env,
                log_path=out / "soak-gateway.log" if args.log else None,
            )
        )
        pids = common.tree(shim.pid)
        started = common.rss_mb(*pids)
        route = bench_wrk.Route(
            "mcp-shim", f"{base}/mcp", args.upstream, True, shim.pid, dict(bench_wrk.MODERN_HEADERS)
        )
        bench_wrk.preflight(route)
        time.sleep(2)
        idle = common.rss_mb(*pids)
        print(
            f"gateway {shim.pid}: RSS {started:.1f} MB once up, {idle:.1f} MB idle after one call",
            flush=True,
        )
        wrk_env = {
            **os.environ,
            "BENCH_BODY": str(body),
            "BENCH_HEADERS": "\n".join(f"{k}: {v}" for k, v in route.headers.items()),
        }
        argv = [
            "wrk",
            "-t1",
            f"-c{args.concurrency}",
            f"-d{seconds}s",
            "--timeout",
            "10s",
            "--latency",
            "-s",
            str(bench_wrk.BENCH / "call.lua"),
            route.url,
        ]
        calls0 = calls_so_far(base)
        cpu0 = common.cpu_seconds(*pids)
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env=wrk_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        samples: list[tuple[float, float]] = []
        print(f"{'t s':>6} {'calls':>10} {'req/s':>8} {'RSS MB':>7}", flush=True)
        last_t, last_calls = 0.0, 0.0
        k = 1
        while True:
            due = t0 + k * args.interval
            if due > t0 + seconds - 1:
                break
            time.sleep(max(0.0, due - time.monotonic()))
            if proc.poll() is not None:
                break
            t = time.monotonic() - t0
            calls = calls_so_far(base) - calls0
            rss = common.rss_mb(*pids)
            samples.append((calls, rss))
            rate = (calls - last_calls) / (t - last_t)
            print(f"{t:6.0f} {calls:10,.0f} {rate:8,.0f} {rss:7.1f}", flush=True)
            last_t, last_calls = t, calls
            k += 1
        text, _ = proc.communicate(timeout=seconds + 60)
        cpu = common.cpu_seconds(*pids) - cpu0
        total = calls_so_far(base) - calls0
        line = next((x for x in text.decode().splitlines() if x.startswith("BENCH ")), None)
        if proc.returncode != 0 or line is None:
            sys.exit(f"wrk failed:\n{text.decode()}")
        summary = json.loads(line[6:])
        errors = sum(summary[k] for k in ("non2xx", "connect", "read", "write", "timeout"))
        time.sleep(5)
        after = common.rss_mb(*pids)
    rss_values = [r for _, r in samples] or [float("nan")]
    half = samples[len(samples) // 2 :]
    print(
        f"\nwrk -t1 -c{args.concurrency}, {seconds} s: {summary['requests']:,} calls, "
        f"{summary['requests'] / (summary['duration_us'] / 1e6):,.0f} req/s, "
        f"p50 {summary['p50_us'] / 1000:.2f} ms, p99 {summary['p99_us'] / 1000:.1f} ms, "
        f"{errors} errors; gateway CPU {cpu * 1e6 / max(total, 1):.0f} us/call; "
        f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs"
    )
    print(
        f"RSS MB: {started:.1f} once up, {idle:.1f} idle, {min(rss_values):.1f}-"
        f"{max(rss_values):.1f} under load, {after:.1f} 5 s after the load"
    )
    print(
        f"slope: {slope_kb_per_1000(samples):+.2f} KB per 1,000 calls over all "
        f"{len(samples)} samples, {slope_kb_per_1000(half):+.2f} over the last {len(half)} "
        f"(from {half[0][0] if half else 0:,.0f} calls on)"
    )
    if errors:
        sys.exit(f"{errors} errors in wrk's run: {summary}")


if __name__ == "__main__":
    main()
