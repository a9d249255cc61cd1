"""What the bench scripts share: starting the processes they measure, and
reading a process's CPU time and memory from /proc.

Imported by the scripts of this folder (each puts the folder on `sys.path`);
the processes themselves are started with tests/procs.py, as in the tests.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from os import listdir, sysconf
from pathlib import Path
from subprocess import Popen
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests import procs  # noqa: E402

ACCEPT = "application/json, text/event-stream"
MODERN = "2026-07-28"

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


def gateway_env(upstream_url: str | None, port: int, **extra: str) -> dict[str, str]:
    """A gateway's environment, at log level info as deployed (one line per call)."""
    env = {
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_LOG_LEVEL": "info",
        **extra,
    }
    if upstream_url is not None:
        env["MCP_SHIM_UPSTREAM_URL"] = upstream_url
    return env


@contextmanager
def gateway(
    upstream_url: str | None, log_name: str, argv: list[str] | None = None, **env: str
) -> Iterator[tuple[str, Popen[bytes]]]:
    """A gateway process (`python -m app.cli`, or `argv`): its /mcp URL and process."""
    port = procs.free_port()
    base = f"http://127.0.0.1:{port}"
    with procs.running(
        argv or [sys.executable, "-m", "app.cli"],
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
