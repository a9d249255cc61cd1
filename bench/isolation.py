"""Fault isolation between the servers of one gateway: one server hung, then
killed, then back, while the others are called.

    .venv/bin/python bench/isolation.py [--seconds 8] [--concurrency 8] [--callers 8]

One gateway with a servers file of three legacy HTTP servers, each a
bench/fast_upstream.py process of its own (`a`, `b`, `c`), and
MCP_SHIM_AGGREGATE_LIST_TIMEOUT_S=2. Five phases, each `--seconds` long, in
each of which wrk (`-t1 -c{concurrency}`, bench/call.lua) sends a modern
`tools/call echo` to /servers/a/mcp:

1. a alone;
2. c called: `--callers` clients call /servers/c/mcp in a closed loop, each
   giving up after 3 s and calling again on a new connection (as a client
   that times out and retries), while c is up;
3. c hung (SIGSTOP): the same callers, whose calls now hang;
4. c killed (SIGKILL): the same callers, refused;
5. c back (started again on its port): the same callers.

In every phase, a modern `tools/list` on the aggregated /mcp every 0.5 s:
its worst latency against the bound, and whether c's tools are in it (they
must not be while c is down, and must be once it is back). Prints one row per
phase (with the gateway's open descriptors and CPU) and the machine's load
average; raw outputs in results/bench/.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common
from tests import procs

LIST_BOUND_S = 2.0
PHASES = ("a alone", "c called", "c hung", "c killed", "c back")
CALLER_TIMEOUT_S = 3.0
# a's wrk summary, c's callers' counts, the aggregate's lists, the gateway's open
# fds and CPU (% of one core)
Row = tuple[dict[str, Any], dict[str, int] | None, list[tuple[float, int, bool]], int, float]


@contextmanager
def server_c(port: int, n: int) -> Iterator[subprocess.Popen[bytes]]:
    """bench/fast_upstream.py on a fixed port, so that it returns where it was."""
    argv = [sys.executable, str(common.BENCH / "fast_upstream.py"), "--port", str(port)]
    log = common.results_dir() / f"bench-iso-c-{n}.log"
    with procs.running(argv, f"http://127.0.0.1:{port}/mcp", log_path=log) as proc:
        yield proc


def start_wrk(url: str, body: Path, concurrency: int, seconds: int, timeout_s: int) -> Any:
    _, headers = common.modern_call(1, "echo")
    env = {
        **os.environ,
        "BENCH_BODY": str(body),
        "BENCH_HEADERS": "\n".join(f"{k}: {v}" for k, v in headers.items()),
    }
    argv = ["wrk", "-t1", f"-c{concurrency}", f"-d{seconds}s", f"--timeout={timeout_s}s"]
    argv += ["-s", str(common.BENCH / "call.lua"), url]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wrk_summary(proc: Any) -> dict[str, Any]:
    out = proc.communicate()[0].decode()
    line = next((x for x in out.splitlines() if x.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"no BENCH line in wrk's output:\n{out[-2000:]}")
    summary: dict[str, Any] = json.loads(line[len("BENCH ") :])
    return summary


def list_once(http: httpx.Client, url: str) -> tuple[float, int, bool]:
    """One aggregated tools/list: seconds, tools listed, whether c's are in it."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": common.MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    headers = {
        "accept": common.ACCEPT,
        "content-type": "application/json",
        "mcp-protocol-version": common.MODERN,
        "mcp-method": "tools/list",
    }
    t0 = time.perf_counter()
    r = http.post(url, json=body, headers=headers)
    elapsed = time.perf_counter() - t0
    tools = common.answer(r.content, r.headers.get("content-type", ""))["result"]["tools"]
    return elapsed, len(tools), any(t["name"].startswith("c__") for t in tools)


def list_loop(url: str, stop: threading.Event, out: list[tuple[float, int, bool]]) -> None:
    with httpx.Client(timeout=30) as http:
        while not stop.is_set():
            out.append(list_once(http, url))
            stop.wait(0.5)


class Callers:
    """`n` clients calling /servers/c/mcp in a loop, each giving up after
    CALLER_TIMEOUT_S and calling again on a new connection (as a client that
    times out and retries): answered, failed (a non-2xx or a JSON-RPC error)
    and given up."""

    def __init__(self, url: str, n: int) -> None:
        self.url, self.stop = url, threading.Event()
        self.counts = {"ok": 0, "error": 0, "timeout": 0}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.loop, args=(i,)) for i in range(n)]
        for t in self.threads:
            t.start()

    def loop(self, n: int) -> None:
        body, headers = common.modern_call(1, "echo")
        with httpx.Client(timeout=CALLER_TIMEOUT_S) as http:
            while not self.stop.is_set():
                try:
                    r = http.post(self.url, content=body, headers=headers)
                    msg = common.answer(r.content, r.headers.get("content-type", ""))
                    kind = "ok" if r.status_code == 200 and "result" in msg else "error"
                except httpx.TimeoutException:
                    kind = "timeout"
                except (httpx.HTTPError, ValueError, RuntimeError):
                    kind = "error"
                with self.lock:
                    self.counts[kind] += 1

    def take(self) -> dict[str, int]:
        with self.lock:
            counts, self.counts = self.counts, {"ok": 0, "error": 0, "timeout": 0}
        return counts

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def phase(top: str, body: Path, args: argparse.Namespace, callers: Callers | None, gw: int) -> Row:
    """One phase: wrk on a while c's callers call, the aggregate listed meanwhile."""
    if callers is not None:
        time.sleep(1.0)  # c's callers in their new state before a is measured
        callers.take()
    lists: list[tuple[float, int, bool]] = []
    stop = threading.Event()
    lister = threading.Thread(target=list_loop, args=(top, stop, lists))
    lister.start()
    cpu0, t0 = common.cpu_seconds(gw), time.perf_counter()
    url = top.removesuffix("/mcp") + "/servers/a/mcp"
    a = wrk_summary(start_wrk(url, body, args.concurrency, args.seconds, 5))
    cpu = (common.cpu_seconds(gw) - cpu0) / (time.perf_counter() - t0) * 100
    stop.set()
    lister.join()
    c = callers.take() if callers is not None else None
    return a, c, lists, open_fds(gw), cpu


def row(
    name: str, a: dict[str, Any], c: dict[str, int] | None, lists: list[Any], fds: int, cpu: float
) -> str:
    errors = sum(a[k] for k in ("non2xx", "connect", "read", "write", "timeout"))
    rps = a["requests"] / (a["duration_us"] / 1e6)
    worst = max(x[0] for x in lists) * 1000
    with_c = sum(1 for x in lists if x[2])
    c_cell = "-" if c is None else f"{c['ok']}/{c['error']}/{c['timeout']}"
    return (
        f"{name:<9} {rps:>7.0f} {a['p50_us'] / 1000:>7.2f} {a['p99_us'] / 1000:>7.2f} "
        f"{errors:>5} {c_cell:>16} {fds:>6} {cpu:>6.0f} {len(lists):>5} {worst:>8.0f} "
        f"{with_c:>3}/{len(lists):<3}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=8, help="wrk's connections to a")
    parser.add_argument("--callers", type=int, default=8, help="clients calling c")
    args = parser.parse_args()
    c_port = procs.free_port()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        body = tmp / "call.json"
        body.write_bytes(common.modern_call(1, "echo")[0])
        a_url, _ = stack.enter_context(common.fast_upstream())
        b_url, _ = stack.enter_context(common.fast_upstream())
        c_proc = stack.enter_context(server_c(c_port, 1))
        servers = {"a": {"url": a_url}, "b": {"url": b_url}}
        servers["c"] = {"url": f"http://127.0.0.1:{c_port}/mcp"}
        servers_file = tmp / "servers.json"
        servers_file.write_text(json.dumps({"mcpServers": servers}))
        top, gw = stack.enter_context(
            common.gateway(
                None,
                "bench-iso.log",
                MCP_SHIM_SERVERS_FILE=str(servers_file),
                MCP_SHIM_AGGREGATE_LIST_TIMEOUT_S=str(LIST_BOUND_S),
            )
        )
        base = top.removesuffix("/mcp")
        # Warm-up: every server's sessions open.
        for name in ("a", "b", "c"):
            start_wrk(f"{base}/servers/{name}/mcp", body, args.concurrency, 2, 5).wait()
        results = [phase(top, body, args, None, gw.pid)]
        callers = Callers(base + "/servers/c/mcp", args.callers)
        try:
            results.append(phase(top, body, args, callers, gw.pid))
            os.kill(c_proc.pid, signal.SIGSTOP)
            results.append(phase(top, body, args, callers, gw.pid))
            os.kill(c_proc.pid, signal.SIGKILL)
            c_proc.wait()
            results.append(phase(top, body, args, callers, gw.pid))
            stack.enter_context(server_c(c_port, 2))
            results.append(phase(top, body, args, callers, gw.pid))
        finally:
            callers.close()
    load = os.getloadavg()
    print(
        f"wrk -t1 -c{args.concurrency} -d{args.seconds}s tools/call echo on /servers/a/mcp; "
        f"{args.callers} clients calling /servers/c/mcp (give up after {CALLER_TIMEOUT_S:.0f} s, "
        f"call again); aggregate tools/list every 0.5 s (bound {LIST_BOUND_S:.0f} s)"
    )
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs")
    print(
        f"{'phase':<9} {'a req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'a err':>5} "
        f"{'c ok/err/gave up':>16} {'gw fds':>6} {'gw CPU':>6} "
        f"{'lists':>5} {'worst ms':>8} {'with c':>7}"
    )
    for name, result in zip(PHASES, results, strict=True):
        print(row(name, *result))


if __name__ == "__main__":
    main()
