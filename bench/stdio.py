"""Calls per second through a stdio upstream with 1, 4 and 8 processes, side by side.

    .venv/bin/python bench/stdio.py [--requests 2000] [--concurrency 16] [--rounds 2]

Starts one gateway whose upstream is `@modelcontextprotocol/server-everything`
over stdio (MCP_SHIM_UPSTREAM_COMMAND, Node 22 from .peers/node) and sends
`tools/call echo` from `--concurrency` clients. The number of server processes
is set by how many pool keys the clients use: each client sends one of N
`Authorization` values, and the gateway keeps one process per key (callers
with different credentials never share a session), so N = 1, 4, 8 processes
serve the same load. Rounds interleave the three. Prints requests/s, p50/p99
latency, and CPU ms per request of the gateway and of all its server
processes together (from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests import procs

ACCEPT = "application/json, text/event-stream"
EVERYTHING = (
    procs.PEERS
    / "node"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-everything"
    / "dist"
    / "index.js"
)
_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(name))
    return found


def _call(i: int) -> bytes:
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {
                "name": "echo",
                "arguments": {"message": "hi"},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
    )


HEADERS = {
    "accept": ACCEPT,
    "content-type": "application/json",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": "tools/call",
    "mcp-name": "echo",
}


async def _drive(url: str, keys: int, total: int, concurrency: int) -> dict[str, float]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        latencies: list[float] = []
        counter = iter(range(1, total + 1))

        async def worker(n: int) -> None:
            headers = {**HEADERS, "authorization": f"Bearer bench-{n % keys}"}
            for i in counter:
                t0 = time.perf_counter()
                async with http.post(url, data=_call(i), headers=headers) as r:
                    msg = orjson.loads(await r.read())
                latencies.append(time.perf_counter() - t0)
                if "result" not in msg:
                    raise RuntimeError(f"call failed: {msg}")

        started = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "rps": total / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


async def _bench(url: str, gateway_pid: int, total: int, concurrency: int, rounds: int) -> None:
    counts = (1, 4, 8)
    results: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    for _ in range(rounds):
        for n in counts:
            await _drive(url, n, min(400, total), concurrency)  # warm-up: processes started
            kids = _children(gateway_pid)
            gw0 = _cpu_seconds(gateway_pid)
            up0 = sum(_cpu_seconds(p) for p in kids)
            run = await _drive(url, n, total, concurrency)
            run["gateway_cpu_ms"] = (_cpu_seconds(gateway_pid) - gw0) * 1000 / total
            run["upstream_cpu_ms"] = (sum(_cpu_seconds(p) for p in kids) - up0) * 1000 / total
            run["processes"] = len(kids)
            results[n].append(run)
    print(
        f"tools/call 'echo' via stdio, {total} requests x {rounds} rounds, "
        f"concurrency {concurrency}"
    )
    print(
        f"{'processes':<10} {'seen':>5} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'gw CPU ms/req':>14} {'servers CPU ms/req':>19}"
    )
    for n, runs in results.items():
        best = max(runs, key=lambda r: r["rps"])
        print(
            f"{n:<10} {best['processes']:>5.0f} {best['rps']:>7.0f} "
            f"{best['p50_ms']:>7.2f} {best['p99_ms']:>7.2f} "
            f"{best['gateway_cpu_ms']:>14.3f} {best['upstream_cpu_ms']:>19.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    logs = Path("results")
    logs.mkdir(exist_ok=True)
    command = shlex.join([str(procs.require_peer(procs.NODE)), str(procs.require_peer(EVERYTHING))])
    port = procs.free_port()
    env = {
        "MCP_SHIM_UPSTREAM_COMMAND": command,
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_WORKERS": "1",  # one process: bench/workers.py measures more
        "MCP_SHIM_LOG_LEVEL": "info",
        "MCP_SHIM_STDIO_MAX_PROCESSES": "8",
    }
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "app.cli"]
    with procs.running(argv, base + "/healthz", env=env, log_path=logs / "bench-stdio.log") as gw:
        asyncio.run(_bench(base + "/mcp", gw.pid, args.requests, args.concurrency, args.rounds))


if __name__ == "__main__":
    main()
