"""The multi round-trip bridge under load and across processes.

- 200 exchanges parked at once on one upstream, while unrelated calls keep
  their latency (compared with a baseline measured in the same test);
- the bound on parked exchanges (MCP_SHIM_MAX_PARKED) and their TTL
  (MCP_SHIM_MRTR_TTL_S): refusals beyond the bound, expired states refused
  and the abandoned upstream call ended cleanly;
- two gateway replicas sharing MCP_SHIM_STATE_KEY behind a round-robin
  proxy: a retry that lands on the other replica is forwarded to the one
  holding the exchange (MCP_SHIM_ADVERTISE_URL) and completes.

Each test starts its own gateway processes (the settings differ) in front of
the session's legacy fixture.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web

from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import wire
from tests.procs import run_modern_client
from tests.waiting import until_sync

pytestmark = pytest.mark.peers

PARKED = 200


def marker() -> str:
    return "scale-" + uuid.uuid4().hex[:12]


# ---------------------------------------------------------------------------
# 200 parked exchanges, unrelated calls unaffected
# ---------------------------------------------------------------------------


async def _timed_echoes(base: str, caps: dict[str, Any], n: int) -> list[float]:
    """`n` sequential echo calls from a client of their own (an unrelated caller)."""
    async with httpx.AsyncClient(timeout=30.0) as client:
        return await _echoes(client, base, caps, n)


async def _echoes(
    client: httpx.AsyncClient, base: str, caps: dict[str, Any], n: int
) -> list[float]:
    times = []
    for i in range(n):
        message = mw.message_for(
            "tools/call", {"name": "echo", "arguments": {"text": f"hi {i}"}}, caps=caps
        )
        started = time.perf_counter()
        response = await client.post(
            base + "/mcp", content=wire_json(message), headers=wire.headers_for(message)
        )
        times.append(time.perf_counter() - started)
        answer = response.json()
        assert answer["result"]["content"][0]["text"] == f"hi {i}", answer
    return times


def wire_json(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


async def _post(client: httpx.AsyncClient, base: str, message: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(
        base + "/mcp", content=wire_json(message), headers=wire.headers_for(message)
    )
    messages = wire.answer_messages(response)
    return messages[-1]


@pytest.mark.slow
def test_200_parked_exchanges_do_not_slow_unrelated_calls(legacy_url: str, logs_dir: Path) -> None:
    log = logs_dir / "mrtr-scale-gateway.log"
    with procs.gateway(legacy_url, procs.free_port(), log_path=log) as base:
        report = asyncio.run(_park_many(base))
    print(
        "\nunrelated calls, p50 ms (baseline -> with {n} parked): caps {{}} {b0:.2f} -> {p0:.2f}; "
        "caps with input {b1:.2f} -> {p1:.2f}; parking {n} took {park:.2f} s, "
        "completing them {done:.2f} s".format(n=PARKED, **report)
    )
    # Generous and relative: the same calls, measured in the same test.
    for kind in ("0", "1"):
        assert report[f"p{kind}"] <= 4 * report[f"b{kind}"], report
    stats = mw.stats(legacy_url)
    for i in range(PARKED):
        assert stats["markers"].get(f"{report['run']}-{i}") == 1, i
    most = max(
        (line.get("parked", 0) for line in wire.log_lines(log) if line["event"] == "mrtr_parked"),
        default=0,
    )
    assert most >= PARKED


async def _park_many(base: str) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    limits = httpx.Limits(max_connections=PARKED + 20, max_keepalive_connections=PARKED + 20)
    async with httpx.AsyncClient(timeout=60.0, limits=limits) as client:
        # Warm both kinds of path, then the baseline.
        # caps {}: the pool's shared session; with input capabilities: a lane.
        await _timed_echoes(base, {}, 5)
        await _timed_echoes(base, mw.ALL_CAPS, 5)
        b0 = statistics.median(await _timed_echoes(base, {}, 40))
        b1 = statistics.median(await _timed_echoes(base, mw.ALL_CAPS, 40))

        def first(i: int) -> dict[str, Any]:
            return mw.message_for(
                "tools/call",
                {"name": "ask_github_login", "arguments": {"marker": f"{run}-{i}"}},
            )

        started = time.perf_counter()
        firsts = await asyncio.gather(*(_post(client, base, first(i)) for i in range(PARKED)))
        park = time.perf_counter() - started
        states = []
        for answer in firsts:
            assert answer["result"]["resultType"] == "input_required", answer
            states.append(answer["result"]["requestState"])

        # All 200 are parked now, each holding a live upstream call.
        p0 = statistics.median(await _timed_echoes(base, {}, 40))
        p1 = statistics.median(await _timed_echoes(base, mw.ALL_CAPS, 40))

        def retry(i: int) -> dict[str, Any]:
            return mw.message_for(
                "tools/call",
                {"name": "ask_github_login", "arguments": {"marker": f"{run}-{i}"}},
                input_responses={
                    "github_login": {"action": "accept", "content": {"login": f"user{i}"}}
                },
                state=states[i],
            )

        started = time.perf_counter()
        finals = await asyncio.gather(*(_post(client, base, retry(i)) for i in range(PARKED)))
        done = time.perf_counter() - started
        for i, answer in enumerate(finals):
            content = answer["result"]["structuredContent"]["github_login"]["content"]
            assert content == {"login": f"user{i}"}
    return {
        "run": run,
        "b0": b0 * 1000,
        "b1": b1 * 1000,
        "p0": p0 * 1000,
        "p1": p1 * 1000,
        "park": park,
        "done": done,
    }


# ---------------------------------------------------------------------------
# Bound and TTL
# ---------------------------------------------------------------------------


def test_parked_exchanges_are_bounded(legacy_url: str, logs_dir: Path) -> None:
    env = {"MCP_SHIM_MAX_PARKED": "3"}
    with (
        procs.gateway(
            legacy_url, procs.free_port(), env=env, log_path=logs_dir / "mrtr-bound.log"
        ) as base,
        httpx.Client(timeout=30.0) as http,
    ):
        marks = [marker() for _ in range(4)]
        firsts = [mw.tool_call(http, base, "ask_github_login", {"marker": m}) for m in marks[:3]]
        assert all(f.input_required for f in firsts)
        refused = mw.tool_call(http, base, "ask_github_login", {"marker": marks[3]})
        assert refused.status == 503, refused.final
        assert refused.error["code"] == -32603
        assert "MCP_SHIM_MAX_PARKED" in refused.error["message"]
        # The parked ones are untouched and complete; then there is room again.
        for mark, first in zip(marks, firsts, strict=False):
            done = mw.tool_call(
                http,
                base,
                "ask_github_login",
                {"marker": mark},
                input_responses=mw.answers_for(first.requests),
                state=first.state,
            )
            assert done.result["resultType"] == "complete"
        again = mw.tool_call(http, base, "ask_github_login", {"marker": marker()})
        assert again.input_required


def test_expired_exchange_is_ended_cleanly_and_its_state_refused(
    legacy_url: str, logs_dir: Path
) -> None:
    env = {"MCP_SHIM_MRTR_TTL_S": "1"}
    with (
        procs.gateway(
            legacy_url, procs.free_port(), env=env, log_path=logs_dir / "mrtr-ttl.log"
        ) as base,
        httpx.Client(timeout=30.0) as http,
    ):
        since = len(mw.stats(legacy_url)["asks"])
        mark = marker()
        sampling = mw.tool_call(http, base, "ask_sampling", {"marker": mark + "-s"})
        first = mw.tool_call(http, base, "ask_github_login", {"marker": mark})
        assert sampling.input_required and first.input_required

        def outcomes() -> dict[str, str] | None:
            asks = mw.stats(legacy_url)["asks"][since:]
            found = {
                a["what"]: a["outcome"]
                for a in asks
                if a["what"] in ("tools/call ask_github_login", "tools/call ask_sampling")
            }
            return found if len(found) == 2 and "pending" not in found.values() else None

        # After the TTL: the elicitation answered "cancel", the sampling request an
        # error (the SDKs' request-timeout code), the calls cancelled.
        seen = until_sync(outcomes, timeout_s=10.0, what="the TTL to end both exchanges")
        assert seen["tools/call ask_github_login"] == "cancel"
        assert seen["tools/call ask_sampling"].startswith("error -32001")
        late = mw.tool_call(
            http,
            base,
            "ask_github_login",
            {"marker": mark},
            input_responses=mw.answers_for(first.requests),
            state=first.state,
        )
        assert late.status == 400 and late.error["code"] == -32602
        assert "expired" in late.error["message"]
        assert mw.marker_count(legacy_url, mark) == 1


# ---------------------------------------------------------------------------
# Two replicas behind a round-robin proxy
# ---------------------------------------------------------------------------


class RoundRobin:
    """A minimal load balancer: each request to the next target in turn, answers streamed."""

    def __init__(self, targets: list[str]) -> None:
        self.targets = targets
        self.port = procs.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.hits: list[str] = []
        self._next = itertools.cycle(targets)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def __enter__(self) -> RoundRobin:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        target = next(self._next)
        self.hits.append(target)
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        async with self._session.request(
            request.method, target + request.path_qs, headers=headers, data=await request.read()
        ) as upstream:
            response = web.StreamResponse(status=upstream.status)
            for name in ("content-type", "cache-control"):
                if name in upstream.headers:
                    response.headers[name] = upstream.headers[name]
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


@pytest.fixture(scope="module")
def replicas(legacy_url: str, logs_dir: Path) -> Iterator[tuple[RoundRobin, list[Path]]]:
    key = base64.b64encode(os.urandom(32)).decode()
    ports = [procs.free_port(), procs.free_port()]
    logs = [logs_dir / f"mrtr-replica-{n}.log" for n in (1, 2)]
    envs = [
        {"MCP_SHIM_STATE_KEY": key, "MCP_SHIM_ADVERTISE_URL": f"http://127.0.0.1:{port}"}
        for port in ports
    ]
    with (
        procs.gateway(legacy_url, ports[0], env=envs[0], log_path=logs[0]) as one,
        procs.gateway(legacy_url, ports[1], env=envs[1], log_path=logs[1]) as two,
        RoundRobin([one, two]) as proxy,
    ):
        yield proxy, logs


def _forwarded(logs: list[Path]) -> list[int]:
    return [sum(1 for line in wire.log_lines(p) if line["event"] == "mrtr_forwarded") for p in logs]


def test_retry_on_the_other_replica_is_forwarded_and_completes(
    replicas: tuple[RoundRobin, list[Path]], legacy_url: str
) -> None:
    proxy, logs = replicas
    mark = marker()
    args = {"rounds": 3, "keyed": True, "marker": mark}
    before = _forwarded(logs)
    hits = len(proxy.hits)
    with httpx.Client(timeout=30.0) as http:
        answer, keys = mw.answer_rounds(http, itertools.repeat(proxy.url), "ask_in_rounds", args)
    assert keys == ["round_1", "round_2", "round_3"]
    assert list(answer.result["structuredContent"]) == ["round_1", "round_2", "round_3"]
    # Four requests, alternating replicas: two of the three retries landed on the
    # replica that does not hold the exchange and were forwarded.
    assert len(set(proxy.hits[hits:])) == 2
    after = _forwarded(logs)
    assert sum(after) - sum(before) == 2, (before, after)
    assert mw.marker_count(legacy_url, mark) == 1


def test_modern_client_across_replicas(
    replicas: tuple[RoundRobin, list[Path]], legacy_url: str
) -> None:
    proxy, logs = replicas
    before = sum(_forwarded(logs))
    run_id = uuid.uuid4().hex[:10]
    document = run_modern_client("mrtr_tools.py", proxy.url + "/mcp", run_id)
    assert isinstance(document, dict)
    markers = mw.stats(legacy_url)["markers"]
    for name, outcome in document.items():
        if not isinstance(outcome, dict) or "asked" not in outcome:
            continue
        assert "result" in outcome, (name, outcome)
        assert outcome["result"]["resultType"] == "complete", name
        if name not in ("prompt", "resource"):
            assert markers.get(f"{run_id}-{name}") == (2 if name == "url_required" else 1), name
    assert sum(_forwarded(logs)) > before
