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

`--compare R` asks *where* unrelated calls wait with the N parked: a second
gateway (the control, never holding a parked call) runs in front of the same
fixture, and the unrelated calls go, interleaved in R rounds before and R
rounds with the N parked, through the parked gateway, through the control and
straight to the fixture (a legacy session of its own, with its GET stream
open as a lane's is). A wait in the parked gateway slows only its rows; a
wait in the fixture (which then serves the N held calls) slows all three.
The gateway's and the fixture's idle CPU with the N parked is printed too
(a timer or task waking per parked call shows there). `--spy S` records the
parked gateway with py-spy during the rows with parked calls (raw stacks in
results/bench/parked-spy.txt); `--timeline` runs both gateways at log level
debug and prints bench/timeline.py's segments per row.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import common, timeline  # noqa: E402 - the repository root is on sys.path only now
from tests import procs  # noqa: E402
from tests.integration import mrtr_wire as mw  # noqa: E402
from tests.integration import wire  # noqa: E402

IN_FLIGHT = 100
AB_IN_FLIGHT = 10
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


# -- --compare: where unrelated calls wait ---------------------------------------

LEGACY_CAPS: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}


async def direct_echoes(fixture: str, n: int, tag: str) -> list[float]:
    """`n` sequential echo calls straight to the fixture, on a legacy session of
    their own with its GET stream open (what a lane is, without the gateway)."""
    times = []
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": common.LEGACY,
            "capabilities": LEGACY_CAPS,
            "clientInfo": {"name": "bench-direct", "version": "1"},
        },
    }
    plain = {"accept": common.ACCEPT, "content-type": "application/json"}
    async with httpx.AsyncClient(timeout=60.0) as client:
        first = await client.post(fixture, content=orjson.dumps(init), headers=plain)
        session = {
            **plain,
            "mcp-session-id": first.headers["mcp-session-id"],
            "mcp-protocol-version": common.LEGACY,
        }
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await client.post(fixture, content=orjson.dumps(note), headers=session)
        opened = asyncio.Event()

        async def listen() -> None:
            get = {
                "accept": "text/event-stream",
                **{k: v for k, v in session.items() if k.startswith("mcp-")},
            }
            async with client.stream("GET", fixture, headers=get) as response:
                opened.set()
                async for _ in response.aiter_bytes():
                    pass

        listener = asyncio.create_task(listen())
        await asyncio.wait_for(opened.wait(), 10)
        try:
            for i in range(n):
                message = {
                    "jsonrpc": "2.0",
                    "id": i + 1,
                    "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": f"{tag} {i}"}},
                }
                started = time.perf_counter()
                response = await client.post(
                    fixture, content=orjson.dumps(message), headers=session
                )
                answer = common.answer(response.content, response.headers["content-type"])
                times.append(time.perf_counter() - started)
                if answer.get("result", {}).get("content", [{}])[0].get("text") != f"{tag} {i}":
                    raise RuntimeError(f"unexpected echo answer: {answer}")
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await listener
            await client.delete(fixture, headers=session)
    return times


Row = tuple[str, Callable[[], Awaitable[list[float]]], Path | None]


async def interleaved(
    rows: list[Row],
    rounds: int,
    phase: str,
    results: dict[str, list[float]],
    timelines: dict[str, list[list[float]]],
) -> None:
    """Each row once per round, rows interleaved: drift on the shared machine hits
    every row alike. Each row's gateway log (at level debug) is cut to its calls."""
    for r in range(rounds):
        for name, run, log_path in rows:
            offset = log_path.stat().st_size if log_path is not None else 0
            results.setdefault(f"{phase}, {name}", []).extend(await run())
            if log_path is not None:
                cut = _timelines(log_path, offset)
                timelines.setdefault(f"{phase}, {name}", []).extend(cut)
        progress(f"{phase}: round {r + 1} of {rounds}")


def _timelines(log_path: Path, offset: int) -> list[list[float]]:
    with log_path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    calls = []
    for raw in data.splitlines():
        if b'"call_timeline"' in raw:
            cut = timeline.segments(orjson.loads(raw))
            if cut is not None:
                calls.append(cut)
    return calls


def idle_cpu(label: str, pids: list[int], seconds: float = 5.0) -> tuple[str, float]:
    before = common.cpu_seconds(*pids)
    time.sleep(seconds)
    return label, (common.cpu_seconds(*pids) - before) * 1000 / seconds


@dataclass
class Compare:
    """What `--compare` runs against, and what it records."""

    base: str  # the gateway that parks the calls
    control: str  # a gateway in front of the same fixture that parks none
    fixture: str
    pid: int
    fixture_pid: int
    logs: tuple[Path, Path] | None  # both gateways' logs, at level debug (--timeline)
    gc_reports: tuple[Path, Path] | None  # bench/gc_probe.py's reports (--gc)
    spy_s: float
    spy_fixture: bool


def _gc(path: Path) -> dict[str, Any]:
    time.sleep(1.2)  # gc_probe rewrites its report every second
    for _ in range(50):
        with contextlib.suppress(orjson.JSONDecodeError):  # caught mid-rewrite
            report: dict[str, Any] = orjson.loads(path.read_bytes())
            return report
        time.sleep(0.1)
    raise RuntimeError(f"no readable report in {path}")


def _gc_rows(label: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    rows = []
    for g in ("gen0", "gen1", "gen2"):
        b, a = before[g], after[g]
        rows.append(
            f"{label:<34} {g}: {a['count'] - b['count']:5d} collections, "
            f"{a['total_ms'] - b['total_ms']:8.1f} ms in all, "
            f"{a['over_1ms'] - b['over_1ms']:4d} over 1 ms, longest so far {a['max_ms']:.1f} ms"
        )
    return rows


async def compare(c: Compare, parked: int, n_echoes: int, rounds: int) -> None:
    run = uuid.uuid4().hex[:8]
    pids = common.tree(c.pid)
    log_p, log_c = c.logs if c.logs is not None else (None, None)
    rows: list[Row] = [
        ("parked gw, shared", lambda: echoes(c.base, {}, n_echoes), log_p),
        ("parked gw, lane", lambda: echoes(c.base, mw.ALL_CAPS, n_echoes), log_p),
        ("control gw, shared", lambda: echoes(c.control, {}, n_echoes), log_c),
        ("control gw, lane", lambda: echoes(c.control, mw.ALL_CAPS, n_echoes), log_c),
        ("fixture direct (+GET)", lambda: direct_echoes(c.fixture, n_echoes, run), None),
    ]
    for url in (c.base, c.control):
        await echoes(url, {}, 10)
        await echoes(url, mw.ALL_CAPS, 10)
    results: dict[str, list[float]] = {}
    timelines: dict[str, list[list[float]]] = {}
    gc_rows: list[str] = []
    cpu = [idle_cpu("gateway CPU ms/s, idle, nothing parked", pids)]
    cpu.append(idle_cpu("fixture CPU ms/s, idle, nothing parked", [c.fixture_pid]))
    load0 = os.getloadavg()
    gc0 = [_gc(path) for path in c.gc_reports] if c.gc_reports else []
    await interleaved(rows, rounds, "before", results, timelines)
    if c.gc_reports:
        gc1 = [_gc(path) for path in c.gc_reports]
        gc_rows += _gc_rows("before, parked gw", gc0[0], gc1[0])
        gc_rows += _gc_rows("before, control gw", gc0[1], gc1[1])

    gate = asyncio.Semaphore(IN_FLIGHT)
    limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    async with httpx.AsyncClient(timeout=600.0, limits=limits) as client:

        async def park(i: int) -> dict[str, Any]:
            message = mw.message_for(
                "tools/call", {"name": "ask_github_login", "arguments": {"marker": f"{run}-{i}"}}
            )
            async with gate:
                return await _post(client, c.base, message)

        progress(f"parking {parked} calls")
        started = time.perf_counter()
        firsts = await asyncio.gather(*(park(i) for i in range(parked)))
        bad = [a for a in firsts if a.get("result", {}).get("resultType") != "input_required"]
        if bad:
            raise RuntimeError(f"{len(bad)} first calls were not parked: {bad[0]}")
        progress(f"parked in {time.perf_counter() - started:.1f} s")
        await asyncio.sleep(2)
        cpu.append(idle_cpu(f"gateway CPU ms/s, idle, {parked} parked", pids))
        cpu.append(idle_cpu(f"fixture CPU ms/s, idle, {parked} parked", [c.fixture_pid]))
        spy = None
        if c.spy_s > 0:
            spy = _spy(c.fixture_pid if c.spy_fixture else c.pid, c.spy_s)
        load1 = os.getloadavg()
        gc2 = [_gc(path) for path in c.gc_reports] if c.gc_reports else []
        await interleaved(rows, rounds, "with parked", results, timelines)
        if c.gc_reports:
            gc3 = [_gc(path) for path in c.gc_reports]
            gc_rows += _gc_rows("with parked, parked gw", gc2[0], gc3[0])
            gc_rows += _gc_rows("with parked, control gw", gc2[1], gc3[1])
        if spy is not None:
            spy.wait()
        load2 = os.getloadavg()

    print(f"\nunrelated tools/call echo, sequential, {rounds} interleaved rounds of {n_echoes}")
    print(f"{'row':<44} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}")
    for name, values in results.items():
        print(row(name, values))
    print(
        "load average (1, 5, 15 min): before {:.1f} {:.1f} {:.1f}; with parked {:.1f} {:.1f} "
        "{:.1f} -> {:.1f} {:.1f} {:.1f}".format(*load0, *load1, *load2)
    )
    for label, value in cpu:
        print(f"{label:<44} {value:7.1f}")
    if gc_rows:
        print("garbage collections during the unrelated calls (bench/gc_probe.py)")
        print("\n".join(gc_rows))
    for name, calls in timelines.items():
        if calls:
            timeline.report(calls, name)


def _spy(pid: int, seconds: float) -> subprocess.Popen[bytes]:
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out = ROOT / "results" / "bench" / "parked-spy.txt"
    dump = subprocess.run(
        [pyspy, "dump", "--nonblocking", "-p", str(pid)], capture_output=True, text=True
    )
    (ROOT / "results" / "bench" / "parked-dump.txt").write_text(dump.stdout + dump.stderr)
    argv = [pyspy, "record", "--nonblocking", "-f", "raw", "-r", "200", "-d", str(int(seconds))]
    argv += ["-o", str(out)]
    return subprocess.Popen(
        [*argv, "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


_NO_SHELTER = """
import sys
sys.path.insert(0, "bench")
import app.mrtr.shelter
app.mrtr.shelter.Shelter.parked = lambda self, count: None
if {gc}:
    import gc_probe
    gc_probe.install()
from app.serving.cli import main
main()
"""


async def shelter_ab(bases: tuple[str, str], reports: tuple[Path, Path], parked: int) -> None:
    """`parked` calls parked on each of two gateways at once, one with the shelter
    and one without, while unrelated calls (the shared session: a lane would
    compete with the parking calls for the fixture's sessions) alternate between
    the two: their latency and each gateway's garbage collections while the
    calls park. Fewer parking calls in flight than elsewhere (AB_IN_FLIGHT per
    gateway), so that the fixture is not what the unrelated calls wait for."""
    run = uuid.uuid4().hex[:8]
    names = ("with shelter", "without shelter")
    for base in bases:
        await echoes(base, {}, 10)
    gc0 = [_gc(path) for path in reports]
    times: dict[str, list[float]] = {name: [] for name in names}
    gate = asyncio.Semaphore(2 * AB_IN_FLIGHT)
    limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    load0 = os.getloadavg()
    async with httpx.AsyncClient(timeout=600.0, limits=limits) as client:

        async def park(base: str, i: int) -> dict[str, Any]:
            message = mw.message_for(
                "tools/call", {"name": "ask_github_login", "arguments": {"marker": f"{run}-{i}"}}
            )
            async with gate:
                return await _post(client, base, message)

        progress(f"parking {parked} calls on each gateway")
        started = time.perf_counter()
        parking = asyncio.gather(*(park(base, i) for i in range(parked) for base in bases))
        while not parking.done():
            for name, base in zip(names, bases, strict=True):
                times[name].extend(await echoes(base, {}, 1))
        firsts = await parking
        park_s = time.perf_counter() - started
        gc1 = [_gc(path) for path in reports]
        load1 = os.getloadavg()
        states = [a.get("result", {}).get("requestState") for a in firsts]
        progress(f"parked in {park_s:.1f} s; retries")

        async def retry(k: int) -> bool:
            i, base = divmod(k, 2)
            message = mw.message_for(
                "tools/call",
                {"name": "ask_github_login", "arguments": {"marker": f"{run}-{i}"}},
                input_responses={"github_login": {"action": "accept", "content": {"login": "u"}}},
                state=states[k],
            )
            async with gate:
                answer = await _post(client, bases[base], message)
            return "structuredContent" in answer.get("result", {})

        done = await asyncio.gather(*(retry(k) for k in range(len(states))))
    gc2 = [_gc(path) for path in reports]
    print(
        f"\n{parked} calls parked on each gateway in {park_s:.1f} s, load average "
        f"{load0[0]:.1f} -> {load1[0]:.1f}; unrelated calls (shared session) meanwhile, alternating"
    )
    print(f"{'row':<44} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}  calls")
    for name in names:
        print(row(name, times[name]) + f"  {len(times[name])}")
    print("garbage collections while the calls parked (bench/gc_probe.py)")
    for name, b, a in zip(names, gc0, gc1, strict=True):
        print("\n".join(_gc_rows(name, b, a)))
    print("and while they were retried")
    for name, b, a in zip(names, gc1, gc2, strict=True):
        print("\n".join(_gc_rows(name, b, a)))
    print(f"retries completed: {sum(done)} of {len(done)}")


@contextlib.contextmanager
def _gateway(
    upstream: str,
    env: dict[str, str],
    log_path: Path,
    gc_report: Path | None,
    shelter: bool = True,
) -> Iterator[tuple[str, int]]:
    """A gateway process (under bench/gc_probe.py when `gc_report`): base URL, pid.
    `shelter=False` runs it without app/mrtr/shelter.py (the code before it)."""
    if gc_report is None and shelter:
        with procs.gateway_process(upstream, procs.free_port(), env=env, log_path=log_path) as (
            base,
            proc,
        ):
            yield base, proc.pid
        return
    port = procs.free_port()
    # One process, as gc_probe.py and the control measure it (`env` may say otherwise).
    full_env = common.gateway_env(upstream, port, **env)
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, str(ROOT / "bench" / "gc_probe.py")]
    if gc_report is not None:
        full_env["BENCH_GC_REPORT"] = str(gc_report)
    else:
        argv = [sys.executable, "-m", "app.serving.cli"]
    if not shelter:
        argv = [sys.executable, "-c", _NO_SHELTER.format(gc=gc_report is not None)]
    with procs.running(argv, base + "/healthz", env=full_env, log_path=log_path) as proc:
        yield base, proc.pid


def _listener_pid(url: str) -> int:
    """The fixture's pid, found by the `--port` of its command line."""
    port = url.split(":")[2].split("/")[0]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if b"--port" in argv and argv[argv.index(b"--port") + 1] == port.encode():
                    return int(entry.name)
    raise RuntimeError(f"no process serves {url}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--parked", type=int, default=1000)
    parser.add_argument("--echoes", type=int, default=300, help="unrelated calls per row")
    parser.add_argument(
        "--compare",
        type=int,
        default=0,
        metavar="R",
        help="R interleaved rounds through the parked gateway, a control gateway and the fixture",
    )
    parser.add_argument("--spy", type=float, default=0.0, help="py-spy record S s (with --compare)")
    parser.add_argument("--timeline", action="store_true", help="gateways at debug (--compare)")
    parser.add_argument("--gc", action="store_true", help="gateways under bench/gc_probe.py")
    parser.add_argument("--spy-fixture", action="store_true", help="py-spy the fixture instead")
    parser.add_argument(
        "--shelter-ab",
        action="store_true",
        help="park on two gateways, with and without app/mrtr/shelter.py, unrelated calls between",
    )
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
    if args.shelter_ab:
        gc_a, gc_b = logs / "parked-gc-shelter.json", logs / "parked-gc-noshelter.json"
        with (
            procs.legacy_server(procs.free_port(), log_path=logs / "parked-fixture.log") as legacy,
            _gateway(legacy, env, logs / "parked-gateway.log", gc_a) as (base_a, _),
            _gateway(legacy, env, logs / "parked-control.log", gc_b, shelter=False) as (base_b, _),
        ):
            asyncio.run(shelter_ab((base_a, base_b), (gc_a, gc_b), n))
        return
    if args.compare:
        if args.timeline:
            env["MCP_SHIM_LOG_LEVEL"] = "debug"
        log_p, log_c = logs / "parked-gateway.log", logs / "parked-control.log"
        gc_p, gc_c = logs / "parked-gc-gateway.json", logs / "parked-gc-control.json"
        with (
            procs.legacy_server(procs.free_port(), log_path=logs / "parked-fixture.log") as legacy,
            _gateway(legacy, env, log_p, gc_p if args.gc else None) as (base, pid),
            _gateway(legacy, env, log_c, gc_c if args.gc else None) as (control, _),
        ):
            setup = Compare(
                base=base,
                control=control,
                fixture=legacy,
                pid=pid,
                fixture_pid=_listener_pid(legacy),
                logs=(log_p, log_c) if args.timeline else None,
                gc_reports=(gc_p, gc_c) if args.gc else None,
                spy_s=args.spy,
                spy_fixture=args.spy_fixture,
            )
            asyncio.run(compare(setup, n, args.echoes, args.compare))
        return
    with (
        procs.legacy_server(procs.free_port(), log_path=logs / "parked-fixture.log") as legacy,
        procs.gateway_process(
            legacy, procs.free_port(), env=env, log_path=logs / "parked-gateway.log"
        ) as (base, proc),
    ):
        asyncio.run(bench(base, legacy, n, args.echoes, proc.pid))


if __name__ == "__main__":
    main()
