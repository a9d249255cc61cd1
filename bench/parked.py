"""MRTR at scale: N calls parked at once, the gateway's RSS and unrelated calls' latency.

    .venv/bin/python bench/parked.py [--parked 1000] [--echoes 300]

Starts the legacy fixture (official `mcp` 1.30.0 SDK server, .peers/legacy)
and one gateway in front of it with room for N parked calls
(MCP_SHIM_MAX_PARKED=N, and the session, per-credential and upstream
connection bounds that go with it). Then:

1. baseline: `--echoes` sequential `tools/call echo` from a client of their
   own, once with no input capabilities (the pool's shared session) and once
   declaring elicitation/sampling/roots (a lane), p50/p99/max of each;
2. parks N calls of `ask_github_login` (the server elicits; each call is
   answered `input_required` and held, upstream, on a lane of its own), at
   most 100 first calls in flight at a time;
3. the same unrelated calls again, with the N parked;
4. completes every parked call with its retry (each given RETRY_WAIT_S),
   counts the right answers, and checks with the fixture's ledger that no
   call ran twice upstream.

RSS of the gateway (from /proc) at each step; "added" is RSS with the N
parked minus RSS before parking. Clients, gateway and fixture share the
machine's CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import common  # noqa: E402 - the repository root is on sys.path only now
from tests import procs  # noqa: E402
from tests.integration import mrtr_wire as mw  # noqa: E402
from tests.integration import wire  # noqa: E402

IN_FLIGHT = 100
RETRY_WAIT_S = 120.0


async def _post(client: httpx.AsyncClient, base: str, message: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(
        base + "/mcp", content=orjson.dumps(message), headers=wire.headers_for(message)
    )
    return wire.answer_messages(response)[-1]


async def echoes(base: str, caps: dict[str, Any], n: int) -> list[float]:
    """`n` sequential echo calls from a client of their own; seconds each."""
    times = []
    async with httpx.AsyncClient(timeout=60.0) as client:
        for i in range(n):
            message = mw.message_for(
                "tools/call", {"name": "echo", "arguments": {"text": f"hi {i}"}}, caps=caps
            )
            started = time.perf_counter()
            answer = await _post(client, base, message)
            times.append(time.perf_counter() - started)
            if answer.get("result", {}).get("content", [{}])[0].get("text") != f"hi {i}":
                raise RuntimeError(f"unexpected echo answer: {answer}")
    return times


def progress(what: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


def row(label: str, values: list[float]) -> str:
    return (
        f"{label:<44} {statistics.median(values) * 1000:7.2f} {pct(values, 0.99):7.2f} "
        f"{max(values) * 1000:7.2f}"
    )


async def bench(base: str, legacy_url: str, parked: int, n_echoes: int, pid: int) -> None:
    pids = common.tree(pid)
    run = uuid.uuid4().hex[:8]
    progress("baseline")
    await echoes(base, {}, 10)  # warm both paths
    await echoes(base, mw.ALL_CAPS, 10)
    lines = ["unrelated tools/call echo, sequential          p50 ms  p99 ms  max ms"]
    lines.append(row("baseline, shared session (caps {})", await echoes(base, {}, n_echoes)))
    lines.append(row("baseline, lane (input caps)", await echoes(base, mw.ALL_CAPS, n_echoes)))
    rss0 = common.rss_mb(*pids)

    def first(i: int) -> dict[str, Any]:
        return mw.message_for(
            "tools/call", {"name": "ask_github_login", "arguments": {"marker": f"{run}-{i}"}}
        )

    gate = asyncio.Semaphore(IN_FLIGHT)
    limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:

        async def gated(message: dict[str, Any]) -> dict[str, Any]:
            async with gate:
                return await _post(client, base, message)

        progress(f"parking {parked} calls")
        started = time.perf_counter()
        firsts = await asyncio.gather(*(gated(first(i)) for i in range(parked)))
        park_s = time.perf_counter() - started
        states = []
        for answer in firsts:
            if answer.get("result", {}).get("resultType") != "input_required":
                raise RuntimeError(f"a first call was not parked: {answer}")
            states.append(answer["result"]["requestState"])
        await asyncio.sleep(1)
        rss1 = common.rss_mb(*pids)
        progress(f"parked in {park_s:.1f} s; unrelated calls")
        lines.append(row(f"with {parked} parked, shared session", await echoes(base, {}, n_echoes)))
        lines.append(row(f"with {parked} parked, lane", await echoes(base, mw.ALL_CAPS, n_echoes)))
        rss2 = common.rss_mb(*pids)

        print(
            f"\n{parked} calls parked in {park_s:.1f} s ({IN_FLIGHT} first calls in flight)\n"
            f"gateway RSS MB: {rss0:.1f} before, {rss1:.1f} with {parked} parked "
            f"(+{rss1 - rss0:.1f} MB, {(rss1 - rss0) * 1000 / parked:.0f} KB per parked call), "
            f"{rss2:.1f} after the unrelated calls",
            flush=True,
        )
        print("\n".join(lines), flush=True)

        def retry(i: int) -> dict[str, Any]:
            return mw.message_for(
                "tools/call",
                {"name": "ask_github_login", "arguments": {"marker": f"{run}-{i}"}},
                input_responses={
                    "github_login": {"action": "accept", "content": {"login": f"user{i}"}}
                },
                state=states[i],
            )

        async def completed(i: int) -> bool:
            async with gate:
                try:
                    answer = await asyncio.wait_for(_post(client, base, retry(i)), RETRY_WAIT_S)
                except (TimeoutError, httpx.HTTPError):
                    return False
            content = answer.get("result", {}).get("structuredContent", {})
            return bool(content.get("github_login", {}).get("content") == {"login": f"user{i}"})

        progress("retries")
        started = time.perf_counter()
        done = await asyncio.gather(*(completed(i) for i in range(parked)))
        done_s = time.perf_counter() - started
    markers = mw.stats(legacy_url)["markers"]
    twice = [i for i in range(parked) if markers.get(f"{run}-{i}", 0) > 1]
    await asyncio.sleep(2)
    rss3 = common.rss_mb(*pids)
    print(
        f"retries: {sum(done)} of {parked} completed with the right answer in {done_s:.1f} s "
        f"(each waited for at most {RETRY_WAIT_S:g} s); calls run twice upstream: {len(twice)}; "
        f"gateway RSS {rss3:.1f} MB afterwards"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--parked", type=int, default=1000)
    parser.add_argument("--echoes", type=int, default=300, help="unrelated calls per row")
    args = parser.parse_args()
    # Every parked call holds a client connection while it parks and two
    # upstream connections after; children inherit the raised limit.
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    logs = ROOT / "results" / "bench"
    logs.mkdir(parents=True, exist_ok=True)
    n = args.parked
    env = {
        "MCP_SHIM_WORKERS": "1",  # one process's RSS and parked calls
        "MCP_SHIM_MAX_PARKED": str(n),
        "MCP_SHIM_MAX_SESSIONS": str(n + 128),
        "MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL": str(n + 128),
        "MCP_SHIM_MAX_UPSTREAM_CONNECTIONS": str(2 * n + 256),
        "MCP_SHIM_MAX_CONNECTIONS": str(n + 256),
        # Parking 1,000 calls on a loaded 2-core machine takes minutes: the
        # default TTL (120 s) would end the first ones before their retry.
        "MCP_SHIM_MRTR_TTL_S": "900",
        "MCP_SHIM_REQUEST_TIMEOUT_S": "1000",
        "MCP_SHIM_CALL_DEADLINE_S": "900",
    }
    with (
        procs.legacy_server(procs.free_port(), log_path=logs / "parked-fixture.log") as legacy,
        procs.gateway_process(
            legacy, procs.free_port(), env=env, log_path=logs / "parked-gateway.log"
        ) as (base, proc),
    ):
        asyncio.run(bench(base, legacy, n, args.echoes, proc.pid))


if __name__ == "__main__":
    main()
