"""stdio upstreams with MCP_SHIM_WORKERS 1 and 2: calls/s and the gateway's CPU
per call, legacy and modern clients, side by side in one run.

    .venv/bin/python bench/stdio_workers.py [--seconds 5] [--passes 1]
        [--concurrency 8,32] [--workers 1,2] [--servers sdk,everything]
        [--tree LABEL=DIR ...]

Servers (each run by the gateway over stdio, MCP_SHIM_UPSTREAM_COMMAND): the
official Python SDK 1.x (`tests/fixtures/legacy_server.py --stdio`) and npm's
`@modelcontextprotocol/server-everything` (Node 22 from .peers/node). For each
server and worker count, one gateway; its rows: a legacy client (one session,
opened through the shared port, then wrk's connections on whichever worker
the kernel picks) and a modern client (2026-07-28 requests, session-less).
wrk and the cells are bench/wrk.py's (`-t1`, closed loop, `tools/call echo`
with a distinct id per request). CPU per call is the gateway's alone
(supervisor and workers, from /proc), the stdio servers' apart ("server
CPU"), and how often a server went to sleep per call ("server sleeps/call",
its voluntary context switches: each is a wake that a write to it paid for).
"relayed/1k" is the `replica_relayed` lines the gateway logged per
1,000 legacy calls. `--tree LABEL=DIR` (repeatable): rows for the gateway of
that checkout (a `git worktree` of an older commit) labelled LABEL, for
before/after rows in one run (`--tree before=../base --tree after=.`).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common
from bench.wrk import ACCEPT, BENCH, MODERN_CALL, MODERN_HEADERS, legacy_session
from tests import procs

EVERYTHING = procs.PEERS / "node" / "node_modules" / "@modelcontextprotocol" / "server-everything"
SERVERS = {
    # name: (argv, the echo tool's arguments, the text it answers)
    "sdk": (
        lambda: [str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE), "--stdio"],
        {"text": "hi"},
        "hi",
    ),
    "everything": (
        lambda: [
            str(procs.require_peer(procs.NODE)),
            str(procs.require_peer(EVERYTHING / "dist" / "index.js")),
        ],
        {"message": "hi"},
        "Echo: hi",
    ),
}


@dataclass
class Row:
    name: str
    url: str
    modern: bool
    pid: int  # the gateway (supervisor when workers > 1)
    log: Path
    body: Path
    expect: str
    headers: dict[str, str] = field(default_factory=dict)
    runs: dict[int, list[dict[str, float]]] = field(default_factory=dict)


def gateway_pids(root: int) -> list[int]:
    """The gateway's own processes: the root and the workers, not the stdio servers."""
    out = []
    for pid in common.tree(root):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if pid == root or b"app.serving.cli" in argv:
            out.append(pid)
    return out


def switches(*pids: int) -> int:
    """Voluntary context switches of the processes, summed: each is a sleep in
    a read or `epoll_wait` that a write to it then pays to end."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def relayed_lines(log: Path) -> int:
    return sum(1 for line in log.read_bytes().splitlines() if b'"replica_relayed"' in line)


def run_wrk(row: Row, concurrency: int, seconds: float) -> dict[str, float]:
    env = {
        **os.environ,
        "BENCH_BODY": str(row.body),
        "BENCH_HEADERS": "\n".join(f"{k}: {v}" for k, v in row.headers.items()),
    }
    argv = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--timeout", "10s"]
    argv += ["--latency", "-s", str(BENCH / "call.lua"), row.url]
    mine = gateway_pids(row.pid)
    servers = [p for p in common.tree(row.pid) if p not in mine]
    cpu0, srv0, rel0 = (
        common.cpu_seconds(*mine),
        common.cpu_seconds(*servers),
        relayed_lines(row.log),
    )
    sw0 = switches(*servers)
    out = subprocess.run(argv, env=env, capture_output=True, timeout=seconds + 60).stdout.decode()
    cpu, srv = common.cpu_seconds(*mine) - cpu0, common.cpu_seconds(*servers) - srv0
    woken = switches(*servers) - sw0
    line = next((x for x in out.splitlines() if x.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"wrk failed on {row.name}:\n{out}")
    summary = json.loads(line[6:])
    errors = sum(summary[k] for k in ("non2xx", "connect", "read", "write", "timeout"))
    if errors:
        raise RuntimeError(f"{row.name} c{concurrency}: {errors} errors: {summary}")
    calls = summary["requests"]
    return {
        "rps": calls / (summary["duration_us"] / 1e6),
        "p50_ms": summary["p50_us"] / 1000,
        "p99_ms": summary["p99_us"] / 1000,
        "cpu_us": cpu * 1e6 / calls,
        "server_us": srv * 1e6 / calls,
        "server_sleeps": woken / calls,
        "relayed_per_1k": (relayed_lines(row.log) - rel0) * 1000 / calls,
        "rss_mb": common.rss_mb(*mine),
    }


def preflight(row: Row) -> None:
    headers = {"accept": ACCEPT, "content-type": "application/json", **row.headers}
    answer = httpx.post(row.url, content=row.body.read_bytes(), headers=headers, timeout=30)
    text = answer.text
    if answer.status_code != 200 or row.expect not in text:
        raise RuntimeError(f"{row.name}: unexpected answer {answer.status_code} {text[:300]}")


@contextmanager
def shim(command: str, workers: int, log: Path, tree: Path | None) -> Iterator[tuple[str, int]]:
    port = procs.free_port()
    env = {
        **os.environ,
        **common.gateway_env(None, port, MCP_SHIM_WORKERS=str(workers)),
        "MCP_SHIM_UPSTREAM_COMMAND": command,
    }
    env.pop("MCP_SHIM_UPSTREAM_URL", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.serving.cli"],
            env=env,
            stdout=out,
            stderr=out,
            cwd=tree or procs.ROOT,
        )
        try:
            procs.wait_until_up(f"http://127.0.0.1:{port}/healthz", proc)
            yield f"http://127.0.0.1:{port}/mcp", proc.pid
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def bodies(logs: Path, server: str) -> dict[bool, Path]:
    arguments = SERVERS[server][1]
    legacy = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    legacy["params"] = {"name": "echo", "arguments": arguments}
    modern = json.loads(json.dumps(MODERN_CALL))
    modern["params"]["arguments"] = arguments
    out = {False: logs / f"stdio-legacy-{server}.json", True: logs / f"stdio-modern-{server}.json"}
    out[False].write_bytes(orjson.dumps(legacy))
    out[True].write_bytes(orjson.dumps(modern))
    return out


def table(rows: list[Row], concurrencies: list[int]) -> str:
    head = ["row"] + [f"c{c} calls/s" for c in concurrencies]
    head += [f"c{c} CPU us/call" for c in concurrencies] + [
        "server CPU us/call",
        "server sleeps/call",
    ]
    head += [f"p99 c{c} ms" for c in concurrencies] + ["relayed/1k", "RSS MB"]
    lines = [head]
    for row in rows:
        best = {c: max(row.runs[c], key=lambda r: r["rps"]) for c in concurrencies}
        cells = [row.name] + [f"{best[c]['rps']:,.0f}" for c in concurrencies]
        # CPU per call: the median over the passes (the best pass's calls/s may be
        # the one the machine's other load disturbed least, not the cheapest).
        cells += [
            f"{statistics.median(r['cpu_us'] for r in row.runs[c]):.0f}" for c in concurrencies
        ]
        srv = [r["server_us"] for c in concurrencies for r in row.runs[c]]
        cells.append(f"{statistics.median(srv):.0f}")
        sleeps = [r["server_sleeps"] for c in concurrencies for r in row.runs[c]]
        cells.append(f"{statistics.median(sleeps):.2f}")
        cells += [f"{best[c]['p99_ms']:.1f}" for c in concurrencies]
        rel = [r["relayed_per_1k"] for c in concurrencies for r in row.runs[c]]
        cells.append("-" if row.modern else f"{max(rel):.0f}")
        cells.append(f"{max(r['rss_mb'] for c in concurrencies for r in row.runs[c]):.0f}")
        lines.append(cells)
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    text = []
    for n, r in enumerate(lines):
        text.append(
            " | ".join([r[0].ljust(widths[0])] + [r[i].rjust(widths[i]) for i in range(1, len(r))])
        )
        if n == 0:
            text.append("-+-".join("-" * w for w in widths))
    return "\n".join(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=5.0, help="per pass and cell")
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--concurrency", default="8,32")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--servers", default="sdk,everything")
    parser.add_argument("--clients", default="legacy,modern")
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="rows for the gateway of this checkout too (repeatable; default: this tree)",
    )
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    logs = common.results_dir()
    rows: list[Row] = []
    load0 = os.getloadavg()[0]
    with ExitStack() as stack:
        trees = [tuple(t.split("=", 1)) for t in args.tree] or [("", "")]
        for server, count, (label, tree) in itertools.product(
            args.servers.split(","), [int(n) for n in args.workers.split(",")], trees
        ):
            argv, _, expect = SERVERS[server]
            command = shlex.join(argv())
            paths = bodies(logs, server)
            log = logs / f"stdio-workers-{server}-{count}{label and '-' + label}.log"
            url, pid = stack.enter_context(shim(command, count, log, Path(tree) if tree else None))
            for client in args.clients.split(","):
                modern = client == "modern"
                name = f"{label + ' ' if label else ''}{server}, {count}w, {client}"
                row = Row(name, url, modern, pid, log, paths[modern], expect)
                row.headers = dict(MODERN_HEADERS) if modern else legacy_session(url)
                preflight(row)
                run_wrk(row, 8, 1.0)  # warm: every worker's first calls start processes
                rows.append(row)
        for n in range(args.passes):
            for c in concurrencies:
                for row in rows if n % 2 == 0 else list(reversed(rows)):
                    result = run_wrk(row, c, args.seconds)
                    row.runs.setdefault(c, []).append(result)
                    print(
                        f"pass {n + 1} c{c:<3} {row.name:<34} {result['rps']:>7,.0f} calls/s  "
                        f"p99 {result['p99_ms']:6.1f} ms  CPU {result['cpu_us']:5.0f} us/call  "
                        f"relayed/1k {result['relayed_per_1k']:4.0f}",
                        file=sys.stderr,
                        flush=True,
                    )
                    time.sleep(0.2)
    print(
        f"\nwrk -t1 closed loop, tools/call echo over stdio; {args.passes} pass(es) of "
        f"{args.seconds:g} s per cell, the better shown; load average {load0:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at end; {len(os.sched_getaffinity(0))} usable CPUs"
    )
    print(table(rows, concurrencies))


if __name__ == "__main__":
    main()
