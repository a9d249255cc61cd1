"""How many of a legacy client's calls are relayed between workers: relays per
1,000 legacy calls with MCP_SHIM_WORKERS=2, in front of the fast upstream and
the official SDK 1.x server (issue 23, item 1).

    .venv/bin/python bench/legacy_relays.py [--sessions 4] [--connections 4]
        [--calls 50] [--upstream fast,sdk] [--workers 2] [--wrk SECONDS]

Each of `--sessions` legacy sessions (2025-11-25) is opened through the shared
port, then used by `--connections` threads, each on a connection of its own
(the kernel hands each connection to either worker), each making `--calls`
`tools/call echo` calls, ids unique per session. Counted from the gateway's
log: `replica_relayed` lines for legacy sessions (the calls relayed to the
owner), and `replica_note` lines (the workers' own small notes: a worker
joining a session it does not own, the touches that keep the owner's idle
clock, session ends). The figures before a change: run this script from a
checkout of the earlier commit (the workers are started from the script's tree).
`--wrk SECONDS` then also runs wrk (bench/wrk.py's cells: `-t1`, closed loop)
on one more legacy session at c8 and c32: calls/s, p99 and the gateway's CPU
per call (supervisor and workers), and the relays of those calls.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import common  # noqa: E402
from tests import procs  # noqa: E402

ACCEPT = "application/json, text/event-stream"


def _answer(response: httpx.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [ln[5:] for ln in response.text.splitlines() if ln.startswith("data:")]
        parsed: dict[str, Any] = orjson.loads(data[-1])
        return parsed
    parsed = orjson.loads(response.content)
    return parsed


def open_session(url: str) -> dict[str, str]:
    base = {"accept": ACCEPT, "content-type": "application/json"}
    with httpx.Client(timeout=30) as http:
        answer = http.post(url, content=orjson.dumps(common.initialize()), headers=base)
        answer.raise_for_status()
        headers = {
            **base,
            "mcp-session-id": answer.headers["mcp-session-id"],
            "mcp-protocol-version": common.LEGACY,
        }
        http.post(url, content=orjson.dumps(common.INITIALIZED), headers=headers)
    return headers


def calls(url: str, headers: dict[str, str], ids: itertools.count[int], n: int, bad: list[str]):
    with httpx.Client(timeout=30) as http:  # one connection of its own
        for _ in range(n):
            body = {
                "jsonrpc": "2.0",
                "id": next(ids),
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "hi"}},
            }
            answer = http.post(url, content=orjson.dumps(body), headers=headers)
            result = _answer(answer).get("result")
            if answer.status_code != 200 or result is None:
                bad.append(f"{answer.status_code} {answer.text[:200]}")


def counted(log: Path) -> Counter[str]:
    seen: Counter[str] = Counter()
    for raw in log.read_text(errors="replace").splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        event = line.get("event")
        if event == "replica_relayed" and line.get("owned") == "legacy_session":
            seen[f"relayed {line.get('http_method')}"] += 1
        elif event == "replica_note":
            seen[f"note {line.get('kind')}"] += 1
    return seen


def run(kind: str, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    with ExitStack() as stack:
        port = procs.free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        if kind == "sdk":
            argv = [str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE)]
        else:
            argv = [sys.executable, str(ROOT / "bench" / "fast_upstream.py")]
        up = stack.enter_context(
            procs.running([*argv, "--port", str(port)], url, log_path=logs / f"up-{kind}.log")
        )
        sport = procs.free_port()
        env = {
            "MCP_SHIM_UPSTREAM_URL": url,
            "MCP_SHIM_PORT": str(sport),
            "MCP_SHIM_HOST": "127.0.0.1",
            "MCP_SHIM_WORKERS": str(args.workers),
            "MCP_SHIM_LOG_LEVEL": "info",
        }
        argv = [sys.executable, "-m", "app.serving.cli"]
        log = logs / f"shim-{kind}.log"
        shim = stack.enter_context(
            procs.running(argv, f"http://127.0.0.1:{sport}/healthz", env=env, log_path=log)
        )
        time.sleep(1.0)  # both workers up
        gateway = f"http://127.0.0.1:{sport}/mcp"
        bad: list[str] = []
        threads = []
        started = time.perf_counter()
        for _ in range(args.sessions):
            headers = open_session(gateway)
            ids = itertools.count(1)
            for _ in range(args.connections):
                t = threading.Thread(target=calls, args=(gateway, headers, ids, args.calls, bad))
                t.start()
                threads.append(t)
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        time.sleep(1.5)  # the log lines of the last calls, the touches
        total = args.sessions * args.connections * args.calls
        seen = counted(log)
        relayed = sum(v for k, v in seen.items() if k.startswith("relayed"))
        notes = sum(v for k, v in seen.items() if k.startswith("note"))
        cells = wrk_cells(gateway, shim.pid, up.pid, log, args.wrk, logs) if args.wrk else {}
        return {
            **cells,
            "upstream": kind,
            "calls": total,
            "failed": len(bad),
            "first_failure": bad[:1],
            "seconds": round(elapsed, 2),
            "relayed_per_1000": round(1000 * relayed / total, 1),
            "notes_per_1000": round(1000 * notes / total, 1),
            "detail": dict(seen),
        }


def wrk_cells(
    gateway: str, pid: int, upstream_pid: int, log: Path, seconds: float, logs: Path
) -> dict[str, Any]:
    from bench.wrk import Route, call_bodies, run_wrk

    route = Route("legacy", gateway, "fast", False, pid, legacy_headers(gateway))
    route.upstream_pid = upstream_pid
    bodies = call_bodies(logs)
    out: dict[str, Any] = {}
    for concurrency in (8, 32):
        before = sum(v for k, v in counted(log).items() if k.startswith("relayed"))
        cell = run_wrk(route, concurrency, seconds, bodies)
        time.sleep(1.0)
        after = sum(v for k, v in counted(log).items() if k.startswith("relayed"))
        out[f"wrk_c{concurrency}"] = {
            "calls_s": round(cell["rps"]),
            "p99_ms": round(cell["p99_ms"], 1),
            "gateway_cpu_us_per_call": round(cell["cpu_us"]),
            "relayed_per_1000": round(1000 * (after - before) / cell["calls"], 1),
        }
    return out


def legacy_headers(url: str) -> dict[str, str]:
    headers = open_session(url)
    return {k: v for k, v in headers.items() if k not in ("accept", "content-type")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--calls", type=int, default=50, help="per connection")
    parser.add_argument("--upstream", default="fast,sdk")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--wrk", type=float, default=0.0, help="seconds per wrk cell (0: none)")
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="legacy-relays-"))
    os.environ.setdefault("MCP_SHIM_LOG_LEVEL", "info")
    for kind in args.upstream.split(","):
        print(json.dumps(run(kind, args, logs)))


if __name__ == "__main__":
    main()
