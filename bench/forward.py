"""Forwarding cost: tools/call straight to the legacy fixture and through the
gateway, side by side in one run.

    .venv/bin/python bench/forward.py [--requests 3000] [--concurrency 8]

Starts the legacy fixture server (mcp 1.x, .peers/legacy) and two gateways in
front of it: one with the aiohttp transport under httpx (the default) and one
with httpx's own transport. Prints requests/s and p50/p99 latency for each,
and the CPU time each process spent per request (from /proc): the fixture is
slower than the gateway, so throughput alone would hide the cost of the hop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests import procs

ACCEPT = "application/json, text/event-stream"


def _parse(body: bytes, content_type: str) -> Any:
    if content_type.startswith("text/event-stream"):
        for line in body.split(b"\n"):
            if line.startswith(b"data:") and line[5:].strip():
                msg = orjson.loads(line[5:])
                if "result" in msg or "error" in msg:
                    return msg
        raise RuntimeError("no response in SSE body")
    return orjson.loads(body)


async def _legacy_session(http: aiohttp.ClientSession, url: str) -> dict[str, str]:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    async with http.post(
        url, data=orjson.dumps(init), headers={"accept": ACCEPT, "content-type": "application/json"}
    ) as r:
        sid = r.headers["mcp-session-id"]
        await r.read()
    headers = {
        "accept": ACCEPT,
        "content-type": "application/json",
        "mcp-session-id": sid,
        "mcp-protocol-version": "2025-11-25",
    }
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, data=orjson.dumps(note), headers=headers) as r:
        await r.read()
    return headers


def _modern_call(i: int, caps: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    msg = {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"message": "hi"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": caps,
            },
        },
    }
    headers = {
        "accept": ACCEPT,
        "content-type": "application/json",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "echo",
    }
    return orjson.dumps(msg), headers


def _legacy_call(i: int) -> bytes:
    msg = {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "hi"}},
    }
    return orjson.dumps(msg)


# A caller that can answer input requests is served by the MRTR bridge (a lane:
# an upstream session of its own per call in flight), one that cannot by the
# shared session. Both paths are measured.
INPUT_CAPS = {"elicitation": {}, "sampling": {}, "roots": {}}


async def _drive(
    url: str, modern: bool, total: int, concurrency: int, caps: dict[str, Any] | None = None
) -> dict[str, float]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        legacy_headers = None if modern else await _legacy_session(http, url)
        latencies: list[float] = []
        counter = iter(range(1, total + 1))

        async def worker() -> None:
            for i in counter:
                if modern:
                    body, headers = _modern_call(i, caps or {})
                else:
                    body, headers = _legacy_call(i), legacy_headers or {}
                t0 = time.perf_counter()
                async with http.post(url, data=body, headers=headers) as r:
                    raw = await r.read()
                    msg = _parse(raw, r.headers.get("content-type", ""))
                latencies.append(time.perf_counter() - t0)
                if "result" not in msg:
                    raise RuntimeError(f"call failed: {msg}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "rps": total / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


# name, url, modern?, gateway pid, client capabilities
Target = tuple[str, str, bool, int | None, dict[str, Any]]


async def _bench(
    targets: list[Target], upstream_pid: int, total: int, concurrency: int, rounds: int
) -> None:
    results: dict[str, list[dict[str, float]]] = {t[0]: [] for t in targets}
    for _ in range(rounds):
        # Interleave targets each round so drift on the machine hits all alike.
        for name, url, modern, pid, caps in targets:
            await _drive(url, modern, min(300, total), concurrency, caps)  # warm-up
            up0 = _cpu_seconds(upstream_pid)
            gw0 = _cpu_seconds(pid) if pid else 0.0
            run = await _drive(url, modern, total, concurrency, caps)
            run["upstream_cpu_ms"] = (_cpu_seconds(upstream_pid) - up0) * 1000 / total
            run["gateway_cpu_ms"] = ((_cpu_seconds(pid) - gw0) * 1000 / total) if pid else 0.0
            results[name].append(run)
    print(f"tools/call 'echo', {total} requests x {rounds} rounds, concurrency {concurrency}")
    print(
        f"{'target':<38} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'gw CPU ms/req':>14} {'upstream CPU ms/req':>20}"
    )
    for name, runs in results.items():
        best = max(runs, key=lambda r: r["rps"])
        gw = f"{best['gateway_cpu_ms']:.3f}" if best["gateway_cpu_ms"] else "-"
        print(
            f"{name:<38} {best['rps']:>7.0f} {best['p50_ms']:>7.2f} {best['p99_ms']:>7.2f} "
            f"{gw:>14} {best['upstream_cpu_ms']:>20.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    logs = Path("results")
    logs.mkdir(exist_ok=True)
    up_port, aio_port, httpx_port = procs.free_port(), procs.free_port(), procs.free_port()
    upstream = f"http://127.0.0.1:{up_port}/mcp"
    fixture_argv = [
        str(procs.require_peer(procs.LEGACY_PY)),
        str(procs.FIXTURE),
        "--port",
        str(up_port),
    ]

    def gw_env(port: int, transport: str) -> dict[str, str]:
        return {
            "MCP_SHIM_UPSTREAM_URL": upstream,
            "MCP_SHIM_PORT": str(port),
            "MCP_SHIM_HOST": "127.0.0.1",
            "MCP_SHIM_WORKERS": "1",  # one process: bench/workers.py measures more
            "MCP_SHIM_LOG_LEVEL": "info",  # as deployed: one log line per call
            "MCP_SHIM_UPSTREAM_HTTP_TRANSPORT": transport,
        }

    gw_argv = [sys.executable, "-m", "app.cli"]
    with (
        procs.running(fixture_argv, upstream, log_path=logs / "bench-legacy.log") as fixture,
        procs.running(
            gw_argv,
            f"http://127.0.0.1:{aio_port}/healthz",
            env=gw_env(aio_port, "aiohttp"),
            log_path=logs / "bench-gw-aiohttp.log",
        ) as gw_aio,
        procs.running(
            gw_argv,
            f"http://127.0.0.1:{httpx_port}/healthz",
            env=gw_env(httpx_port, "httpx"),
            log_path=logs / "bench-gw-httpx.log",
        ) as gw_httpx,
    ):
        targets: list[Target] = [
            ("direct to legacy fixture", upstream, False, None, {}),
            (
                "gateway (httpx + aiohttp transport)",
                f"http://127.0.0.1:{aio_port}/mcp",
                True,
                gw_aio.pid,
                {},
            ),
            (
                "gateway (httpx default transport)",
                f"http://127.0.0.1:{httpx_port}/mcp",
                True,
                gw_httpx.pid,
                {},
            ),
            (
                "gateway, caller declares input caps",
                f"http://127.0.0.1:{aio_port}/mcp",
                True,
                gw_aio.pid,
                INPUT_CAPS,
            ),
        ]
        asyncio.run(_bench(targets, fixture.pid, args.requests, args.concurrency, args.rounds))


if __name__ == "__main__":
    main()
