"""The modern pass-through path, side by side with the direct call and with the
legacy-upstream path, in one run.

    .venv/bin/python bench/modern.py [--requests 2000] [--concurrency 8] [--rounds 2]

Starts the modern fixture (mcp 2.x, 2026-07-28 only, .peers/modern), the legacy
fixture (mcp 1.x, .peers/legacy), one gateway in front of each, and measures a
`tools/call` of an echo tool:

- a modern client straight to the modern fixture (no gateway);
- a modern client through the gateway to the modern fixture: passed through,
  nothing translated (app/passthrough.py);
- a modern client through the gateway to the legacy fixture: validated,
  translated, sent on a pooled legacy session (the path of the earlier issues);
- a legacy client straight to the legacy fixture (for scale);
- a legacy client through the gateway to the modern fixture: the gateway's
  own session, each request sent stateless (app/upstream/modern_session.py).

Prints requests/s, p50/p99 latency, and the CPU time the gateway and the
upstream spent per request (from /proc).
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
MODERN = "2026-07-28"
LEGACY = "2025-11-25"


def _answer(body: bytes, content_type: str) -> Any:
    if content_type.startswith("text/event-stream"):
        for line in body.split(b"\n"):
            if line.startswith(b"data:") and line[5:].strip():
                msg = orjson.loads(line[5:])
                if "result" in msg or "error" in msg:
                    return msg
        raise RuntimeError("no response in SSE body")
    return orjson.loads(body)


def _modern_call(i: int, tool: str, arguments: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    msg = {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "accept": ACCEPT,
        "content-type": "application/json",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": tool,
    }
    return orjson.dumps(msg), headers


async def _legacy_session(http: aiohttp.ClientSession, url: str) -> dict[str, str]:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    headers = {"accept": ACCEPT, "content-type": "application/json"}
    async with http.post(url, data=orjson.dumps(init), headers=headers) as r:
        sid = r.headers["mcp-session-id"]
        await r.read()
    session = {**headers, "mcp-session-id": sid, "mcp-protocol-version": LEGACY}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, data=orjson.dumps(note), headers=session) as r:
        await r.read()
    return session


# name, url, client era, tool, arguments, gateway pid, upstream pid
Target = tuple[str, str, str, str, dict[str, Any], int | None, int]


async def _drive(target: Target, total: int, concurrency: int) -> dict[str, float]:
    _, url, era, tool, arguments, _, _ = target
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        legacy = await _legacy_session(http, url) if era == "legacy" else None
        latencies: list[float] = []
        counter = iter(range(1, total + 1))

        async def worker() -> None:
            for i in counter:
                if legacy is None:
                    body, headers = _modern_call(i, tool, arguments)
                else:
                    call = {
                        "jsonrpc": "2.0",
                        "id": i,
                        "method": "tools/call",
                        "params": {"name": tool, "arguments": arguments},
                    }
                    body, headers = orjson.dumps(call), legacy
                t0 = time.perf_counter()
                async with http.post(url, data=body, headers=headers) as r:
                    msg = _answer(await r.read(), r.headers.get("content-type", ""))
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


async def _bench(targets: list[Target], total: int, concurrency: int, rounds: int) -> None:
    results: dict[str, list[dict[str, float]]] = {t[0]: [] for t in targets}
    for _ in range(rounds):
        # Interleaved each round, so drift on the shared machine hits all alike.
        for target in targets:
            name, _, _, _, _, gw_pid, up_pid = target
            await _drive(target, min(200, total), concurrency)  # warm-up
            up0 = _cpu_seconds(up_pid)
            gw0 = _cpu_seconds(gw_pid) if gw_pid else 0.0
            run = await _drive(target, total, concurrency)
            run["upstream_cpu_ms"] = (_cpu_seconds(up_pid) - up0) * 1000 / total
            run["gateway_cpu_ms"] = (_cpu_seconds(gw_pid) - gw0) * 1000 / total if gw_pid else 0
            results[name].append(run)
    print(f"tools/call echo, {total} requests x {rounds} rounds, concurrency {concurrency}")
    print(
        f"{'target':<44} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'gw CPU ms/req':>14} {'upstream CPU ms/req':>20}"
    )
    for name, runs in results.items():
        best = max(runs, key=lambda r: r["rps"])
        gw = f"{best['gateway_cpu_ms']:.3f}" if best["gateway_cpu_ms"] else "-"
        print(
            f"{name:<44} {best['rps']:>7.0f} {best['p50_ms']:>7.2f} {best['p99_ms']:>7.2f} "
            f"{gw:>14} {best['upstream_cpu_ms']:>20.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    logs = Path("results")
    logs.mkdir(exist_ok=True)
    modern_port, legacy_port = procs.free_port(), procs.free_port()
    gw_modern_port, gw_legacy_port = procs.free_port(), procs.free_port()
    modern_url = f"http://127.0.0.1:{modern_port}/mcp"
    legacy_url = f"http://127.0.0.1:{legacy_port}/mcp"
    modern_argv = [
        str(procs.require_peer(procs.MODERN_PY)),
        str(procs.MODERN_FIXTURE),
        "--port",
        str(modern_port),
    ]
    legacy_argv = [
        str(procs.require_peer(procs.LEGACY_PY)),
        str(procs.FIXTURE),
        "--port",
        str(legacy_port),
    ]

    def gw_env(port: int, upstream: str) -> dict[str, str]:
        return {
            "MCP_SHIM_UPSTREAM_URL": upstream,
            "MCP_SHIM_PORT": str(port),
            "MCP_SHIM_HOST": "127.0.0.1",
            "MCP_SHIM_WORKERS": "1",  # one process: bench/workers.py measures more
            "MCP_SHIM_LOG_LEVEL": "info",  # as deployed: one log line per call
        }

    gw_argv = [sys.executable, "-m", "app.cli"]
    with (
        procs.running(modern_argv, modern_url, log_path=logs / "bench-modern.log") as modern,
        procs.running(legacy_argv, legacy_url, log_path=logs / "bench-legacy.log") as legacy,
        procs.running(
            gw_argv,
            f"http://127.0.0.1:{gw_modern_port}/healthz",
            env=gw_env(gw_modern_port, modern_url),
            log_path=logs / "bench-gw-modern.log",
        ) as gw_modern,
        procs.running(
            gw_argv,
            f"http://127.0.0.1:{gw_legacy_port}/healthz",
            env=gw_env(gw_legacy_port, legacy_url),
            log_path=logs / "bench-gw-legacy.log",
        ) as gw_legacy,
    ):
        via_modern = f"http://127.0.0.1:{gw_modern_port}/mcp"
        via_legacy = f"http://127.0.0.1:{gw_legacy_port}/mcp"
        echo_modern: dict[str, Any] = {"text": "hi"}
        echo_legacy: dict[str, Any] = {"text": "hi"}
        targets: list[Target] = [
            ("modern client -> modern fixture (direct)", modern_url, "modern",
             "test_echo", echo_modern, None, modern.pid),
            ("modern client -> gateway -> modern (pass)", via_modern, "modern",
             "test_echo", echo_modern, gw_modern.pid, modern.pid),
            ("modern client -> gateway -> legacy", via_legacy, "modern",
             "echo", echo_legacy, gw_legacy.pid, legacy.pid),
            ("legacy client -> legacy fixture (direct)", legacy_url, "legacy",
             "echo", echo_legacy, None, legacy.pid),
            ("legacy client -> gateway -> modern", via_modern, "legacy",
             "test_echo", echo_modern, gw_modern.pid, modern.pid),
        ]  # fmt: skip
        asyncio.run(_bench(targets, args.requests, args.concurrency, args.rounds))


if __name__ == "__main__":
    main()
