"""mcp-shim side by side with the gateways people put in front of a stdio MCP server.

    bash scripts/setup_bench_peers.sh   # once: the peers, pinned, under .peers/bench
    .venv/bin/python bench/peers.py [--seconds 8] [--passes 2] [--concurrency 1,8,32]
                                    [--only python,everything,legacy,modern,shim-1,...]

Gateways (rows), each started by this script in front of its own copy of the
same stdio server (the command is the same for all):
  shim-1        mcp-shim, MCP_SHIM_WORKERS=1, log level info (one line per call)
  shim-default  mcp-shim, MCP_SHIM_WORKERS unset (the CPU count), log level info
  shim-1-again  a second shim-1, the control: what the machine's noise alone makes of
                the ratio of two identical rows in the same run
  shim-fixed    the same with MCP_SHIM_MOVE_CONNECTIONS=false: connections stay on the
                worker that accepted them (what moving them buys, in the same run)
  supergateway  supergateway 4.0.0 --outputTransport streamableHttp --stateful (npm)
  mcp-proxy-npm mcp-proxy 6.7.19 --server stream (npm)
  mcp-proxy-py  mcp-proxy 0.13.0 (PyPI, a venv of its own)
The peers run at their default log level; the npm ones on the Node 22 of .peers/node.

stdio servers: `python` (tests/fixtures/legacy_server.py --stdio, the official
Python SDK mcp 1.30.0 of .peers/legacy) and `everything` (npm's
@modelcontextprotocol/server-everything, .peers/node). And two HTTP upstreams,
in front of which only mcp-shim's rows run (one worker and the default: the
peers serve stdio servers): `http-python` (the same fixture over Streamable
HTTP, SSE answers) and `http-fast` (bench/fast_upstream.py, JSON, ~10 us a
call), bench/wrk.py's two upstreams. One server at a time: its gateways
start, run every pass, and stop before the next server's.

Clients: `legacy` (2025-11-25): the script opens ONE session per gateway
(initialize, notifications/initialized) and every wrk connection sends
`tools/call echo` with its Mcp-Session-Id, on every gateway alike (so each
gateway runs one stdio server for it). `modern` (2026-07-28, no session): rows
for mcp-shim, and for a peer only when one modern call through it answers with
a result at start-up (the script says which did not and why).

wrk (`-t1 -cC`, bench/call.lua, an id of its own per request) runs each
(concurrency, row) cell `--passes` times for `--seconds`, the rows' order
reversed on every other pass (ABAB), after a `--warmup` at c8 per row.
Per cell, from the pass with the most calls/s among those without errors:
calls/s, wrk's p50 and p99, its errors, and CPU per call (utime + stime from
/proc/<pid>/stat over the calls wrk completed) of the gateway's processes and
of the stdio servers' (with the cutime + cstime of servers the gateway reaped
meanwhile). A gateway's
processes are the process tree of the one the script started (the supervisor
and its workers for mcp-shim, the node or python process for a peer) minus
the stdio servers: the processes of that tree whose command line holds the
server's script path (so a `sh -c` that supergateway wraps around the
command counts as the server's) and their descendants. RSS: the gateway's
processes, idle (session open, one call made, before any load) and the highest
sample under load (every 0.25 s). mcp-shim rows also count `replica_relayed`
log lines per 1,000 calls.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import common  # noqa: E402 - the repository root is on sys.path only now
from tests import procs  # noqa: E402

BENCH = ROOT / "bench"
PEERS = procs.PEERS / "bench"
SUPERGATEWAY = PEERS / "node" / "node_modules" / "supergateway" / "dist" / "index.js"
MCP_PROXY_NPM = PEERS / "node" / "node_modules" / "mcp-proxy" / "dist" / "bin" / "mcp-proxy.mjs"
MCP_PROXY_PY = PEERS / "mcp-proxy-py" / "bin" / "mcp-proxy"
EVERYTHING_JS = (
    procs.PEERS
    / "node"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-everything"
    / "dist"
    / "index.js"
)
GATEWAYS = [
    "shim-1",
    "shim-default",
    "shim-1-again",
    "shim-fixed",
    "supergateway",
    "mcp-proxy-npm",
    "mcp-proxy-py",
]
SHIMS = ("shim-1", "shim-default", "shim-1-again", "shim-fixed")
KINDS = ["legacy", "modern"]
ERRORS = ("non2xx", "connect", "read", "write", "timeout")
SERVERS = ["python", "everything", "http-python", "http-fast"]
NO_STDIO = "\0"  # an HTTP upstream's marker: no process's command line holds it
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Server:
    key: str
    label: str
    argv: list[str]
    marker: str  # in the command line of the server's processes, and only theirs
    arguments: dict[str, str]  # echo's
    http: str = ""  # an HTTP upstream of bench/common.py's ("legacy", "fast"); "": stdio


def servers() -> dict[str, Server]:
    legacy = [str(procs.LEGACY_PY), str(procs.FIXTURE), "--stdio"]
    node = [str(procs.NODE), str(EVERYTHING_JS)]
    text = {"text": "hi"}
    python = "Python SDK server (mcp 1.30.0, stdio)"
    fixture = "Python SDK server over Streamable HTTP (mcp 1.30.0, SSE answers)"
    fast = "bench/fast_upstream.py over Streamable HTTP (JSON, ~10 us a call)"
    return {
        "python": Server("python", python, legacy, str(procs.FIXTURE), text),
        "everything": Server(
            "everything",
            "npm server-everything (stdio)",
            node,
            str(EVERYTHING_JS),
            {"message": "hi"},
        ),
        # HTTP upstreams: mcp-shim's rows only (the peers serve stdio servers).
        "http-python": Server("http-python", fixture, [], NO_STDIO, text, http="legacy"),
        "http-fast": Server("http-fast", fast, [], NO_STDIO, text, http="fast"),
    }


@dataclass
class Gateway:
    """One gateway process in front of its stdio server; started again when its
    server is gone for good (a peer that does not start it again)."""

    key: str
    server: Server
    logs: Path
    url: str = ""
    pid: int = 0
    log: Path = Path()
    starts: int = 0
    upstream_url: str = ""  # an HTTP upstream's (Server.http)
    upstream_pid: int = 0
    stack: ExitStack = field(default_factory=ExitStack)

    def start(self) -> None:
        self.starts += 1
        started_at = started(self, self.starts)
        self.url, self.pid, self.log = self.stack.enter_context(started_at)

    def stop(self) -> None:
        self.stack.close()


@dataclass
class Row:
    gw: Gateway
    label: str
    kind: str  # "legacy" or "modern"
    headers: dict[str, str] = field(default_factory=dict)
    rss_idle: float = 0.0
    servers_seen: set[int] = field(default_factory=set)  # stdio servers' pids, any run
    new_sessions: int = 0  # legacy sessions opened again: the last one's server was gone
    failed: str = ""  # why its runs stopped
    servers_after: int = 0  # the gateway's stdio servers at the end of this row's last run
    runs: dict[int, list[dict[str, float]]] = field(default_factory=dict)

    @property
    def gateway(self) -> str:
        return self.gw.key

    @property
    def url(self) -> str:
        return self.gw.url

    @property
    def pid(self) -> int:
        return self.gw.pid

    @property
    def log(self) -> Path:
        return self.gw.log


# -- parsing and figures (pure) --------------------------------------------------


def parse_wrk(output: str) -> dict[str, int]:
    """The summary line bench/call.lua prints (`BENCH {...}`)."""
    line = next((x for x in output.splitlines() if x.startswith("BENCH ")), None)
    if line is None:
        raise ValueError(f"no BENCH line in wrk's output:\n{output[-2000:]}")
    summary: dict[str, int] = json.loads(line[len("BENCH ") :])
    if summary["requests"] <= 0:
        raise ValueError(f"wrk completed no request: {wrk_errors(summary)}")
    return summary


def wrk_errors(summary: dict[str, int]) -> dict[str, int]:
    """The socket errors and non-2xx answers of a run, by kind (none: {})."""
    return {k: summary[k] for k in ERRORS if summary[k]}


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two per-process snapshots: a process that
    started meanwhile counts whole, one that is gone is left out (its time
    went with it; subtracting it would go negative)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def server_cpu(
    before: dict[int, float],
    after: dict[int, float],
    reaped_before: dict[int, float],
    reaped_after: dict[int, float],
) -> float:
    """The stdio servers' CPU seconds over a run: the live ones' (cpu_delta),
    plus what the gateway's processes reaped meanwhile (cutime + cstime: the
    whole life of a server that ended), less what those that ended had spent
    before the run (counted in `before`, not part of the run)."""
    gone = sum(t for pid, t in before.items() if pid not in after)
    return cpu_delta(before, after) + cpu_delta(reaped_before, reaped_after) - gone


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    """The pass with the most calls/s among those without errors (all passes
    when every one had some: the table's errors column shows it)."""
    clean = [r for r in runs if not r["errors"]]
    return max(clean or runs, key=lambda r: r["rps"])


# metric -> True when higher is better
METRICS = {"rps": True, "cpu_us": False, "p99_ms": False}


def best_peer(cells: dict[str, dict[str, float]], metric: str) -> tuple[str, float] | None:
    """Among the peers' cells (gateway -> figures), the best value of `metric`
    and whose it is; None without a peer."""
    peers = {g: c[metric] for g, c in cells.items() if g not in SHIMS and c[metric] > 0}
    if not peers:
        return None
    pick = max if METRICS[metric] else min
    name = pick(peers, key=lambda g: peers[g])
    return name, peers[name]


# -- processes -------------------------------------------------------------------


def _cmdline(pid: int) -> str:
    with suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def split_tree(root: int, marker: str) -> tuple[list[int], list[int]]:
    """(gateway's processes, stdio servers' processes) under `root`."""
    everything = common.tree(root)
    servers: set[int] = set()
    for pid in everything:
        if pid != root and pid not in servers and marker in _cmdline(pid):
            servers.update(common.tree(pid))
    return [p for p in everything if p not in servers], sorted(servers)


def serving(pids: list[int], server: Server) -> set[int]:
    """The stdio servers themselves among `pids`, not a `sh -c` around one."""
    if not server.argv:
        return set()
    return {p for p in pids if _cmdline(p).startswith(server.argv[0] + " ")}


def cpu_snapshot(pids: list[int]) -> dict[int, float]:
    return {pid: common.cpu_seconds(pid) for pid in pids if Path(f"/proc/{pid}").exists()}


def reaped_snapshot(pids: list[int]) -> dict[int, float]:
    """cutime + cstime of the processes: the CPU of children they reaped, which
    is where a stdio server that exited during a run left its time (supergateway
    serves a 2026-07-28 call with a process of its own)."""
    out = {}
    for pid in pids:
        with suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[13]) + int(fields[14])) / TICKS
    return out


def gateway_argv(gw: Gateway, port: int) -> tuple[list[str], dict[str, str]]:
    gateway, server = gw.key, gw.server
    command = shlex.join(server.argv)
    node = str(procs.require_peer(procs.NODE))
    if gateway in SHIMS:
        upstream = "MCP_SHIM_UPSTREAM_URL" if server.http else "MCP_SHIM_UPSTREAM_COMMAND"
        env = {
            upstream: gw.upstream_url if server.http else command,
            "MCP_SHIM_PORT": str(port),
            "MCP_SHIM_HOST": "127.0.0.1",
            "MCP_SHIM_LOG_LEVEL": "info",
        }
        if gateway in ("shim-1", "shim-1-again"):
            env["MCP_SHIM_WORKERS"] = "1"
        if gateway == "shim-fixed":
            env["MCP_SHIM_MOVE_CONNECTIONS"] = "false"
        return [sys.executable, "-m", "app.serving.cli"], env
    if gateway == "supergateway":
        argv = [node, str(procs.require_peer(SUPERGATEWAY)), "--stdio", command]
        argv += ["--outputTransport", "streamableHttp", "--stateful", "--port", str(port)]
        return argv, {}
    if gateway == "mcp-proxy-npm":
        argv = [node, str(procs.require_peer(MCP_PROXY_NPM)), "--port", str(port)]
        return [*argv, "--host", "127.0.0.1", "--server", "stream", "--", *server.argv], {}
    argv = [str(procs.require_peer(MCP_PROXY_PY)), "--port", str(port), "--host", "127.0.0.1"]
    return [*argv, "--", *server.argv], {}


def workers(root: int, marker: str) -> int:
    """mcp-shim's worker processes under `root` (1: it is the only one)."""
    gateway = split_tree(root, marker)[0]
    return sum("app.serving.cli" in _cmdline(p) for p in gateway if p != root) or 1


def labels(gateway: str, workers: int) -> str:
    return {
        "shim-1": "mcp-shim, 1 worker",
        "shim-1-again": "mcp-shim, 1 worker again",
        "shim-default": f"mcp-shim, default ({workers} workers)",
        "shim-fixed": f"mcp-shim, {workers} workers, not moved",
        "supergateway": "supergateway 4.0.0 --stateful",
        "mcp-proxy-npm": "mcp-proxy 6.7.19 (npm)",
        "mcp-proxy-py": "mcp-proxy 0.13.0 (PyPI)",
    }[gateway]


@contextmanager
def started(gw: Gateway, n: int) -> Iterator[tuple[str, int, Path]]:
    """The gateway (its n-th start): its /mcp URL, pid and log file."""
    gateway, server = gw.key, gw.server
    port = procs.free_port()
    argv, env = gateway_argv(gw, port)
    log = gw.logs / f"peers-{server.key}-{gateway}{'' if n == 1 else f'-{n}'}.log"
    base = f"http://127.0.0.1:{port}"
    # Any HTTP answer to GET /mcp (a 400 or 405 without a session) means it is up.
    probe = base + ("/healthz" if gateway in SHIMS else "/mcp")
    with procs.running(argv, probe, env=env, log_path=log) as proc:
        yield base + "/mcp", proc.pid, log


# -- requests ----------------------------------------------------------------------


def call_body(server: Server, kind: str) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "echo", "arguments": server.arguments}
    if kind == "modern":
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": common.MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


MODERN_HEADERS = {
    "MCP-Protocol-Version": common.MODERN,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "echo",
}
BASE = {"accept": common.ACCEPT, "content-type": "application/json"}


def post(url: str, msg: dict[str, Any], headers: dict[str, str]) -> tuple[httpx.Response, Any]:
    answer = httpx.post(url, content=orjson.dumps(msg), headers={**BASE, **headers}, timeout=30)
    body = None
    if answer.content and answer.status_code < 300:
        body = common.answer(answer.content, answer.headers.get("content-type", ""))
    return answer, body


def open_session(url: str) -> dict[str, str]:
    """A legacy session through `url`: the headers wrk sends with every call."""
    answer, msg = post(url, common.initialize(), {})
    if answer.status_code != 200 or "mcp-session-id" not in answer.headers:
        raise RuntimeError(f"{url}: initialize answered {answer.status_code} {answer.text[:300]}")
    headers = {
        "Mcp-Session-Id": answer.headers["mcp-session-id"],
        "MCP-Protocol-Version": msg["result"]["protocolVersion"],
    }
    post(url, common.INITIALIZED, headers)
    return headers


def check_call(url: str, server: Server, kind: str, headers: dict[str, str]) -> str | None:
    """One call; None when it answered with a result, else what went wrong."""
    try:
        answer, msg = post(url, call_body(server, kind), headers)
    except (httpx.HTTPError, RuntimeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    result = (msg or {}).get("result")
    if answer.status_code != 200 or not result or result.get("isError"):
        return f"HTTP {answer.status_code}: {answer.text[:200]}"
    return None


# -- runs ----------------------------------------------------------------------------


def check_calls(row: Row, server: Server, n: int = 4) -> str | None:
    """`n` calls, each on a connection of its own (so that each of mcp-shim's
    workers likely gets one); what went wrong with the first that failed."""
    for _ in range(n):
        failed = check_call(row.url, server, row.kind, row.headers)
        if failed:
            return failed
    return None


def refill(row: Row, server: Server, tries: int = 40) -> None:
    """mcp-shim starts a stdio server again at the next call that needs it, in
    the worker that gets that call: calls on fresh connections until as many
    servers run as at the end of this row's last run, so that a restart in
    the worker the first calls missed does not land in the measured window."""
    if row.gateway not in SHIMS:
        return
    for _ in range(tries):
        if len(serving(split_tree(row.pid, server.marker)[1], server)) >= row.servers_after:
            return
        check_call(row.url, server, row.kind, row.headers)


def ready(row: Row, server: Server) -> None:
    """Calls before a run, unmeasured. wrk drops its connections with calls in
    flight at its end, the gateway may cancel them upstream, and the mcp 1.x
    server can die of that race (python-sdk issue 2416): a server that a call
    starts again starts here, not inside the measured window; a legacy session
    whose server is gone is replaced by a new one; a gateway that has no server
    left for any session is started again. Each counted, and said in the notes."""
    for attempt in range(3):
        failed = check_calls(row, server)
        if failed and row.kind == "legacy":
            try:
                row.headers = open_session(row.url)
            except (RuntimeError, httpx.HTTPError, KeyError, ValueError) as exc:
                failed = f"a new session: {exc}"
            else:
                row.new_sessions += 1
                failed = check_calls(row, server)
        if not failed:
            refill(row, server)
            return
        if attempt == 0:
            time.sleep(0.5)
        elif attempt == 1:
            row.gw.stop()
            row.gw.start()
    raise RuntimeError(f"{row.label} ({row.kind}) before a run: {failed}")


def run_wrk(
    row: Row, server: Server, concurrency: int, seconds: float, bodies: dict[str, Path]
) -> dict[str, float]:
    ready(row, server)  # first: it may open a new session or start the gateway again
    env = {
        **os.environ,
        "BENCH_BODY": str(bodies[row.kind]),
        "BENCH_HEADERS": "\n".join(f"{k}: {v}" for k, v in row.headers.items()),
    }
    argv = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--timeout", "10s"]
    argv += ["--latency", "-s", str(BENCH / "call.lua"), row.url]
    gw, up = split_tree(row.pid, server.marker)
    up += [row.gw.upstream_pid] if row.gw.upstream_pid else []
    gw0, up0, reaped0 = cpu_snapshot(gw), cpu_snapshot(up), reaped_snapshot(gw)
    row.servers_seen |= serving(up, server)
    log_at = row.log.stat().st_size
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    rss = 0.0
    while proc.poll() is None:
        rss = max(rss, common.rss_mb(*split_tree(row.pid, server.marker)[0]))
        time.sleep(0.25)
    out = proc.stdout.read().decode() if proc.stdout else ""
    gw, up = split_tree(row.pid, server.marker)
    up += [row.gw.upstream_pid] if row.gw.upstream_pid else []
    gw_cpu = cpu_delta(gw0, cpu_snapshot(gw))
    up_cpu = server_cpu(up0, cpu_snapshot(up), reaped0, reaped_snapshot(gw))
    row.servers_seen |= serving(up, server)
    row.servers_after = len(serving(up, server))
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed on {row.label} ({row.kind}):\n{out}")
    try:
        summary = parse_wrk(out)
    except ValueError as exc:
        raise RuntimeError(f"{row.label} ({row.kind}) c{concurrency}: {exc}") from None
    calls, errors = summary["requests"], sum(wrk_errors(summary).values())
    with row.log.open("rb") as f:
        f.seek(log_at)
        relayed = f.read().count(b"replica_relayed")
    return {
        "rps": calls / (summary["duration_us"] / 1e6),
        "p50_ms": summary["p50_us"] / 1000,
        "p99_ms": summary["p99_us"] / 1000,
        "cpu_us": gw_cpu * 1e6 / calls,
        "server_cpu_us": up_cpu * 1e6 / calls,
        "rss_mb": rss,
        "servers": len(serving(up, server)) + (1 if row.gw.upstream_pid else 0),
        "relayed_per_1k": relayed * 1000 / calls,
        "calls": calls,
        "errors": errors,
    }


def guarded(
    row: Row, server: Server, concurrency: int, seconds: float, bodies: dict[str, Path]
) -> dict[str, float] | None:
    """A run of a row that has not failed; a row whose run fails is left out of
    the rest (its cells so far stay, `Row.failed` says why), so one broken
    peer does not end an hour's run."""
    if row.failed:
        return None
    try:
        return run_wrk(row, server, concurrency, seconds, bodies)
    except (RuntimeError, ValueError, OSError, httpx.HTTPError) as exc:
        row.failed = f"c{concurrency}: {exc}"[:400]
        print(f"{row.label} ({row.kind}) failed: {row.failed}", file=sys.stderr, flush=True)
        return None


def run_passes(
    rows: list[Row], server: Server, args: argparse.Namespace, bodies: dict[str, Path]
) -> None:
    """ABAB: every cell `passes` times, the rows' order reversed every other pass."""
    for n in range(args.passes):
        for c in args.concurrencies:
            for row in rows if n % 2 == 0 else list(reversed(rows)):
                r = guarded(row, server, c, args.seconds, bodies)
                if r is None:
                    continue
                row.runs.setdefault(c, []).append(r)
                print(
                    f"pass {n + 1} c{c:<3} {row.kind:<6} {row.label:<36} {r['rps']:>8,.0f}/s "
                    f"p50 {r['p50_ms']:6.2f} p99 {r['p99_ms']:7.2f} ms  gw CPU "
                    f"{r['cpu_us']:5.0f} us/call  RSS {r['rss_mb']:4.0f} MB",
                    file=sys.stderr,
                    flush=True,
                )


def start_rows(
    gateways: list[Gateway], server: Server, args: argparse.Namespace, notes: list[str]
) -> list[Row]:
    """Start the gateways in front of `server`; one row per client kind each
    serves (a modern row for a peer only when its probe call answered)."""
    rows: list[Row] = []
    for gw in gateways:
        gw.start()
        gateway, url = gw.key, gw.url
        label = labels(gateway, workers(gw.pid, server.marker))
        for kind in args.kinds:
            headers, failed = dict(MODERN_HEADERS), None
            if kind == "legacy":
                try:
                    headers = open_session(url)
                except (RuntimeError, httpx.HTTPError, KeyError, ValueError) as exc:
                    failed = f"initialize: {exc}"
            failed = failed or check_call(url, server, kind, headers)
            if failed and gateway in SHIMS:  # what is measured must work
                raise RuntimeError(f"{label} ({kind}) in front of {server.key}: {failed}")
            if failed:
                era = "2026-07-28" if kind == "modern" else "legacy"
                notes.append(f"{label}, {server.key}: no {kind} row, its {era} call got {failed}")
                continue
            rows.append(Row(gw, label, kind, headers))
    for row in rows:
        row.rss_idle = common.rss_mb(*split_tree(row.pid, server.marker)[0])
    return rows


# -- output ----------------------------------------------------------------------------


def render(head: list[str], rows: list[list[str]]) -> str:
    """A text table: the first column to the left, the figures to the right."""
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        first, *rest = cells
        return " | ".join(
            [first.ljust(widths[0])] + [c.rjust(w) for c, w in zip(rest, widths[1:], strict=True)]
        )

    return "\n".join([line(head), "-+-".join("-" * w for w in widths), *map(line, rows)])


def table(rows: list[Row], concurrencies: list[int]) -> str:
    head = ["gateway", "c", "calls/s", "p50 ms", "p99 ms", "gw CPU us/call"]
    head += ["server CPU us/call", "RSS MB idle/load", "servers", "relayed/1k", "errors"]
    out = []
    for row in rows:
        for c in concurrencies:
            if not row.runs.get(c):
                out.append([row.label, str(c), "failed", *["-"] * (len(head) - 3)])
                continue
            b = best(row.runs[c])
            relayed = f"{b['relayed_per_1k']:.0f}" if row.gateway in SHIMS else "-"
            out.append(
                [
                    *(row.label, str(c), f"{b['rps']:,.0f}", f"{b['p50_ms']:.2f}"),
                    *(f"{b['p99_ms']:.2f}", f"{b['cpu_us']:.0f}", f"{b['server_cpu_us']:.0f}"),
                    *(f"{row.rss_idle:.0f}/{b['rss_mb']:.0f}", f"{b['servers']:.0f}", relayed),
                    f"{b['errors']:.0f}",
                ]
            )
    return render(head, out)


def cell(row: Row | None, c: int) -> dict[str, float] | None:
    """The figures of a row's cell, None when it has none (a failed row)."""
    return best(row.runs[c]) if row is not None and row.runs.get(c) else None


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def ratios(rows: list[Row], concurrencies: list[int]) -> str:
    """What the issue's targets name, per concurrency: the default against one
    worker, and each mcp-shim row against the best peer of the same cell (the
    best per figure: most calls/s, least CPU per call, lowest p99)."""
    by = {row.gateway: row for row in rows}
    head = ["ratio"] + [f"c{c}" for c in concurrencies]
    out: list[list[str]] = []
    one, default = by.get("shim-1"), by.get("shim-default")
    figures = (("rps", "calls/s"), ("cpu_us", "gw CPU/call"), ("p99_ms", "p99"))
    if one and default:
        # The control, a second 1-worker row, next to the default's: how far two
        # identical rows drift apart in this run.
        pairs = (
            ("default / 1 worker", default, one),
            ("1 worker again / 1 worker", by.get("shim-1-again"), one),
            ("default / not moved", default, by.get("shim-fixed")),
        )
        for label, row, base in pairs:
            for metric, name in figures if row and base else ():
                line = [f"{label}, {name}"]
                for c in concurrencies:
                    a, b = cell(row, c), cell(base, c)
                    line.append(ratio(a and a[metric], b and b[metric]))
                out.append(line)
        idle = ratio(default.rss_idle, one.rss_idle)
        out.append(["default / 1 worker, RSS idle", idle, *[""] * (len(concurrencies) - 1)])
    peers = [r for r in rows if r.gateway not in SHIMS]
    for shim in (one, default) if peers else ():
        for metric, name in figures:
            line = [f"{shim.label} / best peer, {name}"] if shim else []
            for c in concurrencies if shim else ():
                cells = {r.gateway: x for r in peers if (x := cell(r, c)) is not None}
                found, mine = best_peer(cells, metric), cell(shim, c)
                shown = ratio(mine and mine[metric], found and found[1])
                line.append(shown if found is None else f"{shown} ({found[0]})")
            if line:
                out.append(line)
    return render(head, out) if out else ""


# -- main ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per pass and cell")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds at c8 per row")
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated servers ({', '.join(SERVERS)}), client kinds (legacy, modern) "
        f"and gateways ({', '.join(GATEWAYS)}); each kind of selector left out means all",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the runs here")
    args = parser.parse_args(argv)
    args.concurrencies = [int(c) for c in args.concurrency.split(",")]
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = only - {*SERVERS, *KINDS, *GATEWAYS}
    if unknown:
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}")
    args.servers = [s for s in SERVERS if s in only] or SERVERS
    args.kinds = [k for k in KINDS if k in only] or KINDS
    args.gateways = [g for g in GATEWAYS if g in only] or GATEWAYS
    return args


def write_bodies(directory: Path, server: Server) -> dict[str, Path]:
    bodies = {}
    for kind in KINDS:
        bodies[kind] = directory / f"{server.key}-{kind}.json"
        bodies[kind].write_bytes(orjson.dumps(call_body(server, kind)))
    return bodies


def measure(server: Server, args: argparse.Namespace, logs: Path, notes: list[str]) -> list[Row]:
    """One server's gateways, started, warmed up, run ABAB, stopped."""
    with ExitStack() as stack:
        gateways = [Gateway(key, server, logs) for key in args.gateways]
        if server.http:
            gateways = [gw for gw in gateways if gw.key in SHIMS]
        if not gateways:
            return []
        if server.http:
            url, up = stack.enter_context(common.upstream(server.http))
            for gw in gateways:
                gw.upstream_url, gw.upstream_pid = url, up.pid
        for gw in gateways:
            stack.callback(gw.stop)
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-peers-")))
        bodies = write_bodies(tmp, server)
        rows = start_rows(gateways, server, args, notes)
        for row in rows:
            guarded(row, server, 8, args.warmup, bodies)
        for row in rows:
            row.label = labels(row.gateway, workers(row.pid, server.marker))
        run_passes(rows, server, args, bodies)
        exits_note(rows, server, notes)
    for row in rows:
        if row.failed:
            notes.append(
                f"{row.label} ({row.kind}), {server.key}: FAILED, no run after {row.failed}"
            )
        if row.new_sessions:
            notes.append(
                f"{row.label}, {server.key}: its legacy session failed {row.new_sessions} "
                "time(s) between runs (its stdio server gone) and was opened again"
            )
    for gw in gateways:
        if gw.starts > 1:
            notes.append(
                f"{labels(gw.key, 0)}, {server.key}: started {gw.starts - 1} more time(s) "
                "between runs: its stdio server was gone and no new call or session "
                "brought one back"
            )
    return rows


def exits_note(rows: list[Row], server: Server, notes: list[str]) -> None:
    """Say which gateways saw stdio servers end while measured: a call that
    starts one again waits for it, and the CPU of one that is gone is missing."""
    seen: dict[str, set[int]] = {}
    for row in rows:
        seen.setdefault(row.label, set()).update(row.servers_seen)
    for label, pids in seen.items():
        gone = [p for p in pids if not Path(f"/proc/{p}").exists()]
        if gone:
            notes.append(
                f"{label}, {server.key}: {len(gone)} of the {len(pids)} stdio server "
                "processes it ran during the runs exited before the end (its log says why)"
            )


def main() -> None:
    args = parse_args()
    for name in [n for n in os.environ if n.startswith("MCP_SHIM_")]:
        del os.environ[name]  # the gateways' settings are this script's alone
    if not MCP_PROXY_PY.exists() or not SUPERGATEWAY.exists():
        sys.exit("the peers are missing: bash scripts/setup_bench_peers.sh")
    logs = common.results_dir()
    load0, notes = os.getloadavg(), []
    measured = {key: measure(servers()[key], args, logs, notes) for key in args.servers}
    print(
        f"\nwrk -t1, closed loop, tools/call echo; {args.passes} alternating passes of "
        f"{args.seconds:g} s per cell; figures of the pass with the most calls/s; legacy: one "
        f"session per gateway shared by all of wrk's connections; load average {load0[0]:.1f} "
        f"at start, {os.getloadavg()[0]:.1f} at end; {os.cpu_count()} CPUs"
    )
    for note in notes:
        print(f"note: {note}")
    for key, rows in measured.items():
        for kind in args.kinds:
            selected = [r for r in rows if r.kind == kind]
            if selected:
                print(f"\n{servers()[key].label}, {kind} clients")
                print(table(selected, args.concurrencies))
                print(ratios(selected, args.concurrencies))
    if args.json:
        dump = [
            {
                "server": key,
                "gateway": r.gateway,
                "kind": r.kind,
                "rss_idle": r.rss_idle,
                "runs": r.runs,
            }
            for key, rows in measured.items()
            for r in rows
        ]
        args.json.write_text(json.dumps(dump, indent=1))


if __name__ == "__main__":
    main()
