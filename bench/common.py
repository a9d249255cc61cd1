"""What the bench scripts share: starting the processes they measure, and
reading a process's CPU time and memory from /proc.

Imported by the scripts of this folder (each puts the folder on `sys.path`);
the processes themselves are started with tests/procs.py, as in the tests.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from os import listdir, sysconf
from pathlib import Path
from subprocess import Popen
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests import procs  # noqa: E402

ACCEPT = "application/json, text/event-stream"
MODERN = "2026-07-28"
# `python -c` text that runs the gateway's entry point, after the caller put a
# source tree first on sys.path: app/serving/cli.py, or app/cli.py in a tree
# (`--tree`, `git archive REV`) whose app/ has no serving/ package.
RUN_MAIN = (
    "try:\n    from app.serving.cli import main\n"
    "except ModuleNotFoundError:\n    from app.cli import main\nmain()\n"
)

_TICKS = sysconf("SC_CLK_TCK")
_PAGE = sysconf("SC_PAGE_SIZE")


# -- /proc --------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str]:
    # The command name may hold spaces and parentheses: split after its last ")".
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(*pids: int) -> float:
    """utime + stime of the processes, summed; one that is gone counts 0."""
    ticks = 0
    for pid in pids:
        with suppress(OSError, IndexError, ValueError):
            fields = _stat_fields(pid)
            ticks += int(fields[11]) + int(fields[12])
    return ticks / _TICKS


def cpu_split(*pids: int) -> tuple[float, float]:
    """(utime, stime) of the processes in seconds, summed: user code against the
    kernel's share (socket writes on loopback do the receiver's TCP work too)."""
    user = system = 0
    for pid in pids:
        with suppress(OSError, IndexError, ValueError):
            fields = _stat_fields(pid)
            user, system = user + int(fields[11]), system + int(fields[12])
    return user / _TICKS, system / _TICKS


def context_switches(*pids: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of the processes' threads,
    summed: a voluntary one is a wait (the loop idle in epoll), an involuntary
    one a preemption (another task took the CPU while it had work)."""
    voluntary = involuntary = 0
    for pid in pids:
        with suppress(OSError):
            for task in listdir(f"/proc/{pid}/task"):
                with suppress(OSError, IndexError, ValueError):
                    for line in Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines():
                        if line.startswith("voluntary_ctxt_switches:"):
                            voluntary += int(line.split()[1])
                        elif line.startswith("nonvoluntary_ctxt_switches:"):
                            involuntary += int(line.split()[1])
    return voluntary, involuntary


def machine_idle_seconds() -> float:
    """CPU time the whole machine spent idle so far, all cores summed (/proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return (int(fields[4]) + int(fields[5])) / _TICKS  # idle + iowait


def rss_mb(*pids: int) -> float:
    """Resident memory of the processes, summed, in MB; one that is gone counts 0."""
    total = 0
    for pid in pids:
        with suppress(OSError, IndexError, ValueError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    return total / 1e6


def children(pid: int) -> list[int]:
    """The direct children of pid (a gateway's stdio servers)."""
    return [p for p in tree(pid) if p != pid and _parent(p) == pid]


def _parent(pid: int) -> int | None:
    try:
        return int(_stat_fields(pid)[1])
    except (OSError, IndexError, ValueError):
        return None


def tree(pid: int) -> list[int]:
    """pid and its descendants (nginx's workers, a multi-worker gateway's)."""
    parents: dict[int, list[int]] = {}
    for entry in listdir("/proc"):
        if entry.isdigit():
            ppid = _parent(int(entry))
            if ppid is not None:
                parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(parents.get(p, []))
    return found


# -- processes ----------------------------------------------------------------


def results_dir() -> Path:
    logs = ROOT / "results" / "bench"
    logs.mkdir(parents=True, exist_ok=True)
    return logs


def _started_workers(log: Path) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """A gateway's log read once: each worker's start line by its number, and
    every line."""
    lines = [orjson.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    started = {x["worker"]: x for x in lines if x.get("event") == "worker_started"}
    if len(started) < 2:
        raise SystemExit(f"no workers in {log}")
    return started, lines


def worker_pids(log: Path) -> dict[int, int]:
    """A gateway's workers from its log (MCP_SHIM_WORKERS > 1): worker number to pid."""
    started, _ = _started_workers(log)
    return {worker: line["pid"] for worker, line in started.items()}


def workers_in_log(log: Path) -> tuple[dict[int, int], dict[int, str], int]:
    """A default gateway's workers from its log: each one's pid and own listener's
    URL, and the worker that owns its first legacy session."""
    started, lines = _started_workers(log)
    owners = [x["worker"] for x in lines if x.get("event") == "legacy_session_opened"]
    if not owners:
        raise SystemExit(f"no legacy session's owner in {log}")
    pids = {worker: line["pid"] for worker, line in started.items()}
    return pids, {worker: line["advertise"] for worker, line in started.items()}, owners[0]


def gateway_env(upstream_url: str | None, port: int, **extra: str) -> dict[str, str]:
    """A gateway's environment: one process, at log level info as deployed (one line
    per call)."""
    env = {
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_LOG_LEVEL": "info",
        "MCP_SHIM_WORKERS": "1",  # one process: bench/workers.py measures more
        **extra,
    }
    if upstream_url is not None:
        env["MCP_SHIM_UPSTREAM_URL"] = upstream_url
    return env


@contextmanager
def gateway(
    upstream_url: str | None, log_name: str, argv: list[str] | None = None, **env: str
) -> Iterator[tuple[str, Popen[bytes]]]:
    """A gateway process (`python -m app.serving.cli`, or `argv`): its /mcp URL and process."""
    port = procs.free_port()
    base = f"http://127.0.0.1:{port}"
    with procs.running(
        argv or [sys.executable, "-m", "app.serving.cli"],
        base + "/healthz",
        env=gateway_env(upstream_url, port, **env),
        log_path=results_dir() / log_name,
    ) as proc:
        yield base + "/mcp", proc


@contextmanager
def upstream(kind: str, *extra: str) -> Iterator[tuple[str, Popen[bytes]]]:
    """An upstream on a free port: "legacy" (the mcp 1.x fixture), "modern"
    (the mcp 2.x fixture) or "fast" (bench/fast_upstream.py). Its /mcp URL and process."""
    port = procs.free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    if kind == "legacy":
        argv = [str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE)]
    elif kind == "modern":
        argv = [str(procs.require_peer(procs.MODERN_PY)), str(procs.MODERN_FIXTURE)]
    else:
        argv = [sys.executable, str(BENCH / "fast_upstream.py")]
    log = results_dir() / f"up-{kind}-{port}.log"
    with procs.running([*argv, "--port", str(port), *extra], url, log_path=log) as proc:
        yield url, proc


@contextmanager
def fast_upstream() -> Iterator[tuple[str, Popen[bytes]]]:
    with upstream("fast") as started:
        yield started


# -- answers and figures -------------------------------------------------------


def answer(body: bytes, content_type: str) -> Any:
    """The JSON-RPC answer of a JSON body or of an SSE stream's events."""
    if content_type.startswith("text/event-stream"):
        for line in body.split(b"\n"):
            if line.startswith(b"data:") and line[5:].strip():
                msg = orjson.loads(line[5:])
                if "result" in msg or "error" in msg:
                    return msg
        raise RuntimeError("no response in SSE body")
    return orjson.loads(body)


def latency_summary(latencies: list[float], total: int, elapsed: float) -> dict[str, float]:
    """req/s, p50 and p99 in ms of one closed-loop run."""
    latencies.sort()
    return {
        "rps": total / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


# -- closed-loop clients -------------------------------------------------------

LEGACY = "2025-11-25"


def modern_call(
    i: int, tool: str = "echo", arguments: dict[str, Any] | None = None, caps: Any = None
) -> tuple[bytes, dict[str, str]]:
    """A 2026-07-28 `tools/call` and its headers."""
    msg = {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": {"text": "hi"} if arguments is None else arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": caps or {},
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


def legacy_call(i: int, tool: str = "echo", arguments: dict[str, Any] | None = None) -> bytes:
    """A legacy `tools/call` (sent with a session's headers)."""
    params = {"name": tool, "arguments": {"text": "hi"} if arguments is None else arguments}
    return orjson.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params})


def initialize(client: str = "bench") -> dict[str, Any]:
    """A legacy client's `initialize` (LEGACY), no capabilities."""
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": client, "version": "1"},
        },
    }


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


async def legacy_session(http: aiohttp.ClientSession, url: str) -> dict[str, str]:
    """Initialize a legacy session as a legacy client would: its headers for later calls."""
    init = initialize()
    headers = {"accept": ACCEPT, "content-type": "application/json"}
    async with http.post(url, data=orjson.dumps(init), headers=headers) as r:
        sid = r.headers["mcp-session-id"]
        await r.read()
    session = {**headers, "mcp-session-id": sid, "mcp-protocol-version": LEGACY}
    async with http.post(url, data=orjson.dumps(INITIALIZED), headers=session) as r:
        await r.read()
    return session


# (call number, worker number) -> body and headers; a legacy target's headers
# are added to its session's.
CallMaker = Callable[[int, int], tuple[bytes, dict[str, str]]]


async def closed_loop(
    url: str, total: int, concurrency: int, make: CallMaker, *, legacy: bool = False
) -> dict[str, float]:
    """`total` calls from `concurrency` clients, each sending its next call when
    the last one is answered; every answer must be a result."""
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        session = await legacy_session(http, url) if legacy else {}
        latencies: list[float] = []
        counter = iter(range(1, total + 1))

        async def worker(n: int) -> None:
            for i in counter:
                body, headers = make(i, n)
                t0 = time.perf_counter()
                async with http.post(url, data=body, headers={**session, **headers}) as r:
                    msg = answer(await r.read(), r.headers.get("content-type", ""))
                latencies.append(time.perf_counter() - t0)
                if "result" not in msg:
                    raise RuntimeError(f"call failed: {msg}")

        started = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in range(concurrency)))
        elapsed = time.perf_counter() - started
    return latency_summary(latencies, total, elapsed)


# -- interleaved rounds ---------------------------------------------------------

Drive = Callable[[int], Awaitable[dict[str, float]]]


async def interleaved(
    targets: list[tuple[str, Drive, Callable[[], list[int]], Callable[[], list[int]]]],
    total: int,
    rounds: int,
    warmup: int,
) -> dict[str, list[dict[str, float]]]:
    """Each target (name, drive, gateway pids, upstream pids) run `rounds`
    times, targets interleaved in each round so that drift on the shared
    machine hits all alike; each run after a warm-up, with the CPU time per
    call of the gateway's and the upstream's processes (pids read after the
    warm-up: processes a gateway starts on demand are counted)."""
    results: dict[str, list[dict[str, float]]] = {t[0]: [] for t in targets}
    for _ in range(rounds):
        for name, drive, gateway_pids, upstream_pids in targets:
            await drive(min(warmup, total))
            gw, up = gateway_pids(), upstream_pids()
            gw0, up0 = cpu_seconds(*gw), cpu_seconds(*up)
            run = await drive(total)
            run["gateway_cpu_ms"] = (cpu_seconds(*gw) - gw0) * 1000 / total if gw else 0.0
            run["upstream_cpu_ms"] = (cpu_seconds(*up) - up0) * 1000 / total
            run["processes"] = len(up)
            results[name].append(run)
    return results


def print_best(
    title: str, results: dict[str, list[dict[str, float]]], first: str = "target"
) -> None:
    """The best run (req/s) of each target, one line each."""
    width = max(len(first), *(len(name) for name in results))
    print(title)
    print(
        f"{first:<{width}} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'gw CPU ms/req':>14} {'upstream CPU ms/req':>20}"
    )
    for name, runs in results.items():
        best = max(runs, key=lambda r: r["rps"])
        gw = f"{best['gateway_cpu_ms']:.3f}" if best["gateway_cpu_ms"] else "-"
        print(
            f"{name:<{width}} {best['rps']:>7.0f} {best['p50_ms']:>7.2f} {best['p99_ms']:>7.2f} "
            f"{gw:>14} {best['upstream_cpu_ms']:>20.3f}"
        )
