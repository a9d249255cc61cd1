"""Side-by-side hop benchmark: wrk against each path to the same upstream, in one run.

    bash bench/wrk.sh [--seconds 8] [--passes 2] [--concurrency 1,8,32] [--only fast]

Paths (rows), each in front of two upstreams:
  - the legacy fixture (official `mcp` 1.30.0 SDK server, SSE answers), and
  - bench/fast_upstream.py (legacy JSON answers, about 10 us per call):
      direct   the upstream itself, a legacy session (Mcp-Session-Id)
      nginx    nginx `proxy_pass` (keep-alive upstream) in front of it
      hop      bench/hop.py, a bare Starlette + aiohttp forwarder
      mcp-shim the gateway, with 2026-07-28 requests

wrk runs a closed loop (`-t1 -cC`) of `tools/call echo` with the same body on
every request of a path (legacy paths: the legacy message; the gateway: the
same call in the 2026-07-28 form). Each (concurrency, path) cell runs
`--passes` times for `--seconds`, the passes alternating the order of the
paths so that drift on the machine hits them alike. Per cell: req/s (the
better pass), p50/p99 (wrk's, of that pass); per path: CPU per call of the hop
process tree alone (utime + stime from /proc, over the calls wrk completed),
and RSS of the hop (idle before load, highest mid-run sample).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
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
ACCEPT = "application/json, text/event-stream"
TEXT = "hi"

LEGACY_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "echo", "arguments": {"text": TEXT}},
}
MODERN_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {
        "name": "echo",
        "arguments": {"text": TEXT},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    },
}
MODERN_HEADERS = {
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "echo",
}


@dataclass
class Route:
    name: str
    url: str
    upstream: str  # "legacy" or "fast"
    modern: bool
    pid: int | None  # the hop's process (None: direct)
    headers: dict[str, str] = field(default_factory=dict)
    rss_idle: float = 0.0
    runs: dict[int, list[dict[str, float]]] = field(default_factory=dict)
    upstream_pid: int = 0  # the upstream's process: its CPU per call on this path
    same_id: bool = False  # every request with id 1 (bench/call.lua)
    credentials: int = 0  # Authorization values turned over request by request (call.lua)


def _sse_or_json(response: httpx.Response) -> Any:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                msg = json.loads(line[5:])
                if "result" in msg or "error" in msg:
                    return msg
        raise RuntimeError("no JSON-RPC response in the SSE answer")
    return response.json()


def legacy_session(url: str) -> dict[str, str]:
    """Initialize a legacy session through `url`; the headers later calls need."""
    init = common.initialize()
    base = {"accept": ACCEPT, "content-type": "application/json"}
    answer = httpx.post(url, content=orjson.dumps(init), headers=base, timeout=10)
    answer.raise_for_status()
    version = _sse_or_json(answer)["result"]["protocolVersion"]
    headers = {"Mcp-Session-Id": answer.headers["mcp-session-id"], "MCP-Protocol-Version": version}
    httpx.post(
        url, content=orjson.dumps(common.INITIALIZED), headers={**base, **headers}, timeout=10
    )
    return headers


def preflight(path: Route, body: bytes | None = None) -> None:
    """One call through the path (`body`, else the era's echo call), checked,
    before wrk counts anything."""
    if body is None:
        body = orjson.dumps(MODERN_CALL if path.modern else LEGACY_CALL)
    headers = {"accept": ACCEPT, "content-type": "application/json", **path.headers}
    if path.credentials:
        headers["authorization"] = "Bearer bench-0"
    answer = httpx.post(path.url, content=body, headers=headers, timeout=10)
    msg = _sse_or_json(answer)
    text = msg.get("result", {}).get("content", [{}])[0].get("text")
    if answer.status_code != 200 or text != TEXT:
        raise RuntimeError(f"{path.name}: unexpected answer {answer.status_code} {msg}")


def run_wrk(
    path: Route, concurrency: int, seconds: float, bodies: dict[bool, Path]
) -> dict[str, float]:
    env = {
        **os.environ,
        "BENCH_BODY": str(bodies[path.modern]),
        "BENCH_HEADERS": "\n".join(f"{k}: {v}" for k, v in path.headers.items()),
        "BENCH_SAME_ID": "1" if path.same_id else "0",
        "BENCH_CREDENTIALS": str(path.credentials),
    }
    argv = [
        "wrk",
        "-t1",
        f"-c{concurrency}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(BENCH / "call.lua"),
        path.url,
    ]
    pids = common.tree(path.pid) if path.pid else []
    cpu0, up0 = common.cpu_seconds(*pids), common.cpu_seconds(path.upstream_pid)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(seconds / 2)
    rss = common.rss_mb(*pids)
    out, _ = proc.communicate(timeout=seconds + 60)
    cpu = common.cpu_seconds(*pids) - cpu0
    up_cpu = common.cpu_seconds(path.upstream_pid) - up0
    line = next((x for x in out.decode().splitlines() if x.startswith("BENCH ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed on {path.name}:\n{out.decode()}")
    summary = json.loads(line[6:])
    errors = sum(summary[k] for k in ("non2xx", "connect", "read", "write", "timeout"))
    if errors:
        raise RuntimeError(f"{path.name} c{concurrency}: {errors} errors in wrk's run: {summary}")
    calls = summary["requests"]
    return {
        "rps": calls / (summary["duration_us"] / 1e6),
        "p50_ms": summary["p50_us"] / 1000,
        "p99_ms": summary["p99_us"] / 1000,
        "cpu_us": cpu * 1e6 / calls if pids else 0.0,
        "upstream_cpu_us": up_cpu * 1e6 / calls,
        "rss_mb": rss,
        "calls": calls,
    }


NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream mcp {{ server 127.0.0.1:{upstream_port}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://mcp;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # The SDK server checks Host against loopback names (DNS rebinding).
            proxy_set_header Host $http_host;
            proxy_buffering off;
        }}
    }}
}}
"""


def nginx_argv(prefix: Path, port: int, upstream_port: int) -> list[str]:
    prefix.mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=prefix, port=port, upstream_port=upstream_port))
    return ["nginx", "-p", str(prefix), "-c", str(conf)]


def _port_of(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def start_paths(
    stack: ExitStack,
    upstreams: list[str],
    logs: Path,
    shim_env: dict[str, str],
    variants: list[tuple[str, dict[str, str]]],
) -> list[Route]:
    paths: list[Route] = []
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-nginx-")))
    ups: dict[str, int] = {}
    for kind in upstreams:
        port = procs.free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        if kind == "legacy":
            argv = [str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE)]
            label = "legacy fixture (mcp 1.30.0, SSE)"
        else:
            argv = [sys.executable, str(BENCH / "fast_upstream.py")]
            label = "fast upstream (JSON, ~10 us)"
        up = stack.enter_context(
            procs.running([*argv, "--port", str(port)], url, log_path=logs / f"up-{kind}.log")
        )
        ups[kind] = up.pid
        paths.append(Route(f"{label} direct", url, kind, False, None))
        if kind == "legacy":
            # What earlier runs measured: the mcp 1.x server does less per call
            # when every request has the same id (bench/JOURNAL.md, the tail).
            same = Route("  direct, id 1 on every request", url, kind, False, None, same_id=True)
            paths.append(same)

        nport = procs.free_port()
        nginx = stack.enter_context(
            procs.running(
                nginx_argv(tmp / kind, nport, port),
                f"http://127.0.0.1:{nport}/mcp",
                log_path=logs / f"nginx-{kind}.log",
            )
        )
        paths.append(
            Route("  nginx proxy_pass", f"http://127.0.0.1:{nport}/mcp", kind, False, nginx.pid)
        )

        hport = procs.free_port()
        hop = stack.enter_context(
            procs.running(
                [sys.executable, str(BENCH / "hop.py"), "--port", str(hport), "--upstream", url],
                f"http://127.0.0.1:{hport}/mcp",
                log_path=logs / f"hop-{kind}.log",
            )
        )
        paths.append(
            Route("  Starlette+aiohttp hop", f"http://127.0.0.1:{hport}/mcp", kind, False, hop.pid)
        )

        for n, (label, extra) in enumerate([("mcp-shim (2026-07-28)", {}), *variants]):
            sport = procs.free_port()
            env = {
                "MCP_SHIM_UPSTREAM_URL": url,
                "MCP_SHIM_PORT": str(sport),
                "MCP_SHIM_HOST": "127.0.0.1",
                "MCP_SHIM_WORKERS": "1",  # one process (a --variant may set more)
                "MCP_SHIM_LOG_LEVEL": "info",  # as deployed: one JSON line per call
                **shim_env,
                **extra,
            }
            # BENCH_GC_* settings are bench/gc_probe.py's: prototypes of GC tuning.
            probe = any(name.startswith("BENCH_GC_") for name in env)
            argv = [sys.executable, str(BENCH / "gc_probe.py")] if probe else []
            if "BENCH_TREE" in env:  # the gateway of another source tree (git archive REV)
                tree = env["BENCH_TREE"]
                run = f"import sys; sys.path.insert(0, {tree!r})\n{common.RUN_MAIN}"
                argv = [sys.executable, "-c", run]
            shim = stack.enter_context(
                procs.running(
                    argv or [sys.executable, "-m", "app.serving.cli"],
                    f"http://127.0.0.1:{sport}/healthz",
                    env=env,
                    log_path=logs / f"shim-{kind}-{n}.log",
                )
            )
            paths.append(
                Route(
                    f"  {label}",
                    f"http://127.0.0.1:{sport}/mcp",
                    kind,
                    True,
                    shim.pid,
                    dict(MODERN_HEADERS),
                )
            )
    for route in paths:
        route.upstream_pid = ups[route.upstream]
    return paths


def _fmt_rps(rps: float, ref: float | None) -> str:
    if ref is None:
        return f"{rps:,.0f}"
    return f"{rps:,.0f} ({rps / ref:.2f}x)"


def call_bodies(logs: Path) -> dict[bool, Path]:
    """The request bodies wrk sends (bench/call.lua), by `Route.modern`, written to `logs`."""
    bodies = {False: logs / "legacy-call.json", True: logs / "modern-call.json"}
    bodies[False].write_bytes(orjson.dumps(LEGACY_CALL))
    bodies[True].write_bytes(orjson.dumps(MODERN_CALL))
    return bodies


def run_passes(
    paths: list[Route],
    concurrencies: list[int],
    passes: int,
    seconds: float,
    bodies: dict[bool, Path],
) -> None:
    """Every cell `passes` times, the rows' order reversed on every other pass
    (so no row always runs first or last), each result kept in `Route.runs`."""
    for n in range(passes):
        for c in concurrencies:
            for p in paths if n % 2 == 0 else list(reversed(paths)):
                result = run_wrk(p, c, seconds, bodies)
                p.runs.setdefault(c, []).append(result)
                print(
                    f"pass {n + 1} c{c:<3} {p.upstream:<6} {p.name.strip():<40} "
                    f"{result['rps']:>9,.0f} req/s  p50 {result['p50_ms']:6.2f} ms  "
                    f"p99 {result['p99_ms']:6.1f} ms  CPU {result['cpu_us']:5.0f} us/call",
                    file=sys.stderr,
                    flush=True,
                )


def table(paths: list[Route], concurrencies: list[int]) -> str:
    head = ["path"] + [f"c{c} req/s" for c in concurrencies]
    head += ["hop CPU/call us", "upstream CPU/call us", f"p50 c{concurrencies[0]} ms"] + [
        f"p99 c{c} ms" for c in concurrencies[1:]
    ]
    head += ["RSS MB idle/load"]
    rows = [head]
    direct: dict[tuple[str, int], float] = {}
    for p in paths:
        best = {c: max(p.runs[c], key=lambda r: r["rps"]) for c in concurrencies}
        if p.pid is None and not p.same_id:
            for c in concurrencies:
                direct[(p.upstream, c)] = best[c]["rps"]
        row = [p.name]
        for c in concurrencies:
            ref = None if p.pid is None and not p.same_id else direct.get((p.upstream, c))
            row.append(_fmt_rps(best[c]["rps"], ref))
        cpu = [r["cpu_us"] for c in concurrencies for r in p.runs[c]]
        row.append("-" if p.pid is None else f"{min(cpu):.0f}-{max(cpu):.0f}")
        up = [r["upstream_cpu_us"] for c in concurrencies for r in p.runs[c]]
        row.append(f"{min(up):.0f}-{max(up):.0f}")
        row.append(f"{best[concurrencies[0]]['p50_ms']:.2f}")
        row += [f"{best[c]['p99_ms']:.1f}" for c in concurrencies[1:]]
        load = max(r["rss_mb"] for c in concurrencies for r in p.runs[c])
        row.append("-" if p.pid is None else f"{p.rss_idle:.0f}/{load:.0f}")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for n, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [r[i].rjust(widths[i]) for i in range(1, len(r))]
        lines.append(" | ".join(cells))
        if n == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def matrix_parser(doc: str | None, warmup_per: str = "row") -> argparse.ArgumentParser:
    """The options every wrk matrix script takes: seconds per pass and cell,
    passes, the concurrency column list, the warm-up."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--seconds", type=float, default=8.0, help="per pass and cell")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--warmup", type=float, default=2.0, help=f"seconds at c8 per {warmup_per}")
    return parser


def matrix_setup(
    args: argparse.Namespace, needs: tuple[str, ...] = ("wrk",)
) -> tuple[list[int], Path, dict[bool, Path]]:
    """What a matrix script needs before its first row: the tools (exit naming
    how to get them), the concurrency columns, the logs folder, the call bodies."""
    missing = [tool for tool in needs if shutil.which(tool) is None]
    if missing:
        sys.exit(f"{' and '.join(missing)} needed: run bench/wrk.sh, which installs them")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    logs = ROOT / "results" / "bench"
    logs.mkdir(parents=True, exist_ok=True)
    return concurrencies, logs, call_bodies(logs)


def main() -> None:
    parser = matrix_parser(__doc__, warmup_per="path")
    parser.add_argument(
        "--only", choices=["legacy", "fast"], default=None, help="one upstream's rows only"
    )
    parser.add_argument(
        "--shim-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the gateway (e.g. MCP_SHIM_LOG_LEVEL=warning)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:NAME=VALUE,...",
        help="one more gateway row per upstream with this environment (a prototype); "
        "BENCH_GC_FREEZE=1 / BENCH_GC_THRESHOLD=... run it under bench/gc_probe.py",
    )
    parser.add_argument(
        "--credentials",
        type=int,
        default=0,
        help="the gateway rows' requests carry this many Authorization values, turned "
        "over request by request (0: none)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the runs here")
    args = parser.parse_args()
    concurrencies, logs, bodies = matrix_setup(args, needs=("wrk", "nginx"))
    upstreams = [args.only] if args.only else ["legacy", "fast"]
    shim_env = dict(item.split("=", 1) for item in args.shim_env)
    load0 = os.getloadavg()
    with ExitStack() as stack:
        variants = []
        for spec in args.variant:
            label, _, assignments = spec.partition(":")
            pairs = (item.split("=", 1) for item in assignments.split(",") if item)
            variants.append((label, {k: v for k, v in pairs}))
        paths = start_paths(stack, upstreams, logs, shim_env, variants)
        for p in paths:
            if p.modern:
                p.credentials = args.credentials
            if not p.modern:
                p.headers = legacy_session(p.url)
            preflight(p)
            p.rss_idle = common.rss_mb(*common.tree(p.pid)) if p.pid else 0.0
        for p in paths:
            run_wrk(p, 8, args.warmup, bodies)
        run_passes(paths, concurrencies, args.passes, args.seconds, bodies)
    print(
        f"\nwrk -t1, closed loop, tools/call echo; {args.passes} alternating passes of "
        f"{args.seconds:g} s per cell; req/s of the better pass (x: against direct); "
        f"CPU per call: the hop's process tree, range over all cells; "
        f"gateway rows with {args.credentials} Authorization value(s) turned over; "
        f"load average {load0[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end; "
        f"{os.cpu_count()} CPUs"
    )
    print(table(paths, concurrencies))
    if args.json:
        args.json.write_text(
            json.dumps(
                [{"name": p.name.strip(), "upstream": p.upstream, "runs": p.runs} for p in paths],
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
