"""The gateway's CPU to drain N requests of one id waiting on an HTTP+SSE channel.

    .venv/bin/python bench/turns.py [--waiters 1000,2000] [--tree DIR] [--label NAME]

A legacy client's requests of one id go upstream one at a time (the official
SDK 1.x server keys its calls by the id's text: app/fronts/legacy/turns.py),
so the others wait for their turn. Here a 2024-11-05 client opens `GET /sse`
on a gateway in front of the legacy fixture (mcp 1.x, .peers/legacy), sends a
`slow_echo` of id 7 that holds the turn, then N `ping`s of id 7 behind it
(each answered 202 at once), and reads the N + 1 answers from its stream.
Printed per N: the gateway's CPU (utime + stime from /proc/<pid>/stat) from
the last POST's answer, the slow call still running, to the last answer, so
what the gateway spends while the waiters go upstream one after another; and
the seconds from the slow call's answer to the last one; and the gateway's RSS
grown while the N were queued, per waiter.

`--tree DIR` runs the gateway of another source tree, e.g. the commit before a
change: `mkdir -p /tmp/before && git archive REV app translators | tar -x -C
/tmp/before`. The gateway's MCP_SHIM_MAX_CONNECTIONS is set above the largest
N, so that its bound on one channel's requests admits them all.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common

POSTERS = 16  # POSTs in flight while the waiters are queued


async def _events(stream: aiohttp.StreamReader) -> Any:
    """The JSON of each `data:` line of an SSE stream."""
    async for line in stream:
        if line.startswith(b"data:") and line[5:].strip().startswith(b"{"):
            yield orjson.loads(line[5:])


async def drain(base: str, pid: int, waiters: int, hold_ms: int) -> dict[str, float]:
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    connector = aiohttp.TCPConnector(limit=POSTERS + 1)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as http,
        http.get(base + "/sse", headers={"accept": "text/event-stream"}) as stream,
    ):
        endpoint = ""
        async for line in stream.content:
            if line.startswith(b"data:"):
                endpoint = line[5:].strip().decode()
                break
        events = _events(stream.content)
        url = base + endpoint
        headers = {"content-type": "application/json"}

        async def post(message: dict[str, Any]) -> None:
            async with http.post(url, data=orjson.dumps(message), headers=headers) as r:
                if r.status != 202:
                    raise RuntimeError(f"POST /messages: {r.status} {await r.text()}")

        initialize = common.initialize("bench-turns")
        initialize["params"]["protocolVersion"] = "2024-11-05"
        await post(initialize)
        await anext(events)
        await post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        slow = {"name": "slow_echo", "arguments": {"ms": hold_ms, "steps": 1}}
        await post({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": slow})
        slow_ends = time.perf_counter() + hold_ms / 1000
        ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
        left = iter(range(waiters))

        async def poster() -> None:
            for _ in left:
                await post(ping)

        rss0 = common.rss_mb(pid)
        await asyncio.gather(*(poster() for _ in range(POSTERS)))
        cpu0 = common.cpu_seconds(pid)
        rss1 = common.rss_mb(pid)
        if time.perf_counter() > slow_ends:
            raise RuntimeError("the slow call ended before the waiters were queued: --hold-ms")
        first = await anext(events)
        if "result" not in first or "content" not in first["result"]:
            raise RuntimeError(f"the slow call's answer was not first: {first}")
        slow_done = time.perf_counter()
        answered = 0
        async for message in events:
            if message != {"jsonrpc": "2.0", "id": 7, "result": {}}:
                raise RuntimeError(f"unexpected answer: {message}")
            answered += 1
            if answered == waiters:
                break
        return {
            "cpu_s": common.cpu_seconds(pid) - cpu0,
            "drain_s": time.perf_counter() - slow_done,
            "rss_kb_per_waiter": (rss1 - rss0) * 1000 / waiters,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiters", default="1000,2000", help="comma-separated N")
    parser.add_argument("--tree", help="run the gateway of this source tree")
    parser.add_argument("--label", default=None)
    parser.add_argument("--hold-ms", type=int, default=0, help="default: 2 s + 2 ms per waiter")
    args = parser.parse_args()
    counts = [int(n) for n in args.waiters.split(",")]
    argv = None
    if args.tree:
        tree = str(Path(args.tree).resolve())
        run = f"import sys; sys.path.insert(0, {tree!r})\n{common.RUN_MAIN}"
        argv = [sys.executable, "-c", run]
    label = args.label or (args.tree or "this tree")
    rows = []
    with common.upstream("legacy") as (upstream, _):
        for waiters in counts:
            # A gateway per N: nothing left of the previous run.
            with common.gateway(
                upstream,
                f"bench-turns-{waiters}.log",
                argv,
                MCP_SHIM_MAX_CONNECTIONS=str(max(counts) + 64),
            ) as (url, proc):
                base = url.removesuffix("/mcp")
                hold_ms = args.hold_ms or 2000 + 2 * waiters
                rows.append((waiters, asyncio.run(drain(base, proc.pid, waiters, hold_ms))))
    print(f"{label}: N pings of id 7 behind a slow call of id 7 on one HTTP+SSE channel")
    print(
        f"{'N':>6} | {'gateway CPU s':>13} | {'CPU us/waiter':>13} | {'drain s':>7} | RSS KB/waiter"
    )
    for waiters, figures in rows:
        per = figures["cpu_s"] * 1e6 / waiters
        print(
            f"{waiters:>6} | {figures['cpu_s']:>13.2f} | {per:>13.0f} | "
            f"{figures['drain_s']:>7.2f} | {figures['rss_kb_per_waiter']:>13.1f}"
        )


if __name__ == "__main__":
    main()
