"""The upstream POST alone: what each way of sending it costs the gateway's process.

    .venv/bin/python bench/upstream_post.py [--calls 4000] [--concurrency 8] [--rounds 3]

Starts bench/fast_upstream.py (JSON answers, about 10 us of CPU per call, in
its own process) and, in this process, sends `tools/call echo` on one legacy
session through three ways of making the same POST, rounds interleaved; prints
this process's CPU time per call (`time.process_time`, so the upstream's is
not counted) and calls/s:

- `httpx client.send`: `client.build_request` + `client.send(stream=True)` on
  the gateway's aiohttp transport, with httpx's client-wide cookie jar (the
  gateway before this change);
- `httpx.Request to transport`: an `httpx.Request` built with the session's
  headers merged once, handed to the transport's `handle_async_request`
  (skips the client's layers, keeps the request and transport conversions);
- `UpstreamClient.poster`: what `StreamableHttpSession._post` does now: the
  aiohttp session's own `request`, headers and timeouts prepared once per
  session, the answer read through an `httpx.Response` around aiohttp's;
- `aiohttp session.post`: the aiohttp session itself, as bench/hop.py posts.

Each reads the JSON answer whole and closes the response.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.upstream.streamable_http import build_client
from bench import common

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-11-25",
}


def _call(i: int) -> bytes:
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        }
    )


Post = Callable[[int], Awaitable[None]]


async def _measure(post: Post, calls: int, concurrency: int) -> tuple[float, float]:
    """(CPU us per call in this process, calls/s)."""
    counter = iter(range(calls))

    async def worker() -> None:
        for i in counter:
            await post(i)

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, elapsed = time.process_time() - cpu0, time.perf_counter() - t0
    return cpu * 1e6 / calls, calls / elapsed


async def _bench(url: str, calls: int, concurrency: int, rounds: int) -> None:
    jar_client = httpx.AsyncClient(
        transport=build_client(connect_timeout_s=5, max_connections=64)._transport,
        timeout=httpx.Timeout(5, read=None),
        trust_env=False,
    )
    ours = build_client(connect_timeout_s=5, max_connections=64)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=64),
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )
    async with session:
        init = orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
            }
        )
        async with session.post(url, data=init, headers=HEADERS) as answer:
            await answer.read()
            headers = {**HEADERS, "mcp-session-id": answer.headers["mcp-session-id"]}
        parsed = httpx.URL(url)
        timeout = httpx.Timeout(30, connect=5)
        merged = {**ours.headers, **headers}
        extensions = {"timeout": timeout.as_dict()}

        async def via_send(i: int) -> None:
            request = jar_client.build_request(
                "POST", parsed, content=_call(i), headers=headers, timeout=timeout
            )
            response = await jar_client.send(request, stream=True)
            orjson.loads(await response.aread())
            await response.aclose()

        async def via_transport(i: int) -> None:
            request = httpx.Request(
                "POST", parsed, content=_call(i), headers=merged, extensions=extensions
            )
            response = await ours._transport.handle_async_request(request)
            response.request = request
            orjson.loads(await response.aread())
            await response.aclose()

        poster = ours.poster(parsed, headers, timeout)

        async def via_poster(i: int) -> None:
            response = await poster(_call(i), {})
            orjson.loads(await response.aread())
            await response.aclose()

        async def via_aiohttp(i: int) -> None:
            async with session.post(url, data=_call(i), headers=headers) as answer:
                orjson.loads(await answer.read())

        ways: dict[str, Post] = {
            "httpx client.send (before)": via_send,
            "httpx.Request to transport": via_transport,
            "UpstreamClient.poster (now)": via_poster,
            "aiohttp session.post": via_aiohttp,
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for _ in range(rounds):
            for name, post in ways.items():
                await _measure(post, min(500, calls), concurrency)  # warm-up
                results[name].append(await _measure(post, calls, concurrency))
        await jar_client.aclose()
        await ours.aclose()
    print(f"upstream POST, {calls} calls x {rounds} rounds, concurrency {concurrency}")
    print(f"{'way':<30} {'CPU us/call best':>17} {'median':>7} {'calls/s best':>13}")
    for name, runs in results.items():
        cpu = sorted(r[0] for r in runs)
        best_rate = max(r[1] for r in runs)
        print(f"{name:<30} {cpu[0]:>17.1f} {cpu[len(cpu) // 2]:>7.1f} {best_rate:>13,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with common.fast_upstream() as (url, _proc):
        asyncio.run(_bench(url, args.calls, args.concurrency, args.rounds))


if __name__ == "__main__":
    main()
