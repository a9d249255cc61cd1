"""Where the gateway's time goes: py-spy over mcp-shim under wrk load.

    .venv/bin/python bench/profile.py [--upstream fast|legacy|everything|python-stdio] [--legacy]
        [--concurrency 8] [--seconds 20] [--rate 200] [--shim-env NAME=VALUE ...] [--gc]

Starts the upstream (bench/fast_upstream.py, or the mcp 1.x fixture) and one
gateway in front of it, runs wrk (bench/call.lua, 2026-07-28 `tools/call`) and
samples the gateway with `py-spy record --format raw` for the same seconds.
`--upstream everything` serves npm's server-everything over stdio instead (the
gateway runs it; its CPU is the upstream's), `--upstream python-stdio` the mcp
1.x fixture over stdio; `--legacy` sends the calls as a
2025-11-25 client does, on one session opened through the gateway.
Prints wrk's figures, the gateway's CPU per call, and the samples' shares:
own time by package (the frame on top of the stack), and the inclusive share
of the layers named in bench/JOURNAL.md ("Where the time goes"). With --gc the
gateway runs under bench/gc_probe.py, which also reports every garbage
collection's pause. The raw profile is kept in results/bench/.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import children, cpu_seconds, cpu_split, rss_mb  # noqa: E402
from bench.wrk import LEGACY_CALL, MODERN_CALL, MODERN_HEADERS, legacy_session  # noqa: E402
from tests import procs  # noqa: E402

EVERYTHING_JS = procs.PEERS / "node" / "node_modules" / "@modelcontextprotocol"
EVERYTHING_JS = EVERYTHING_JS / "server-everything" / "dist" / "index.js"
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")

# Inclusive layers: a sample counts for a layer when any frame of its stack
# matches (function name substring, file substring). Layers may overlap.
LAYERS: list[tuple[str, str, str]] = [
    ("log line per call (structlog + write)", "", "structlog/"),
    ("FastAPI/Starlette routing + request", "", "fastapi/"),
    ("  starlette (router, middleware, Request)", "", "starlette/"),
    ("uvicorn + httptools (server side)", "", "uvicorn/"),
    ("httpx layers (client API, no transport)", "", "httpx/_"),
    ("httpx_aiohttp transport", "", "httpx_aiohttp/"),
    ("aiohttp (upstream connection)", "", "aiohttp/"),
    ("h1 client (app/upstream/httpclient/h1*.py, session POSTs)", "", "app/upstream/httpclient/h1"),
    ("SSE parsing (httpx_sse)", "", "httpx_sse/"),
    (
        "SSE parsing (app/upstream/httpclient/sse_decoder.py)",
        "",
        "app/upstream/httpclient/sse_decoder.py",
    ),
    ("session pool (acquire/release)", "", "app/upstream/sessions/pool.py"),
    ("front validation (modern.parse)", "parse", "app/fronts/modern/checks.py"),
    ("translators", "", "translators/"),
    ("answer writing (CallAnswer)", "", "app/fronts/shared/answer.py"),
    ("exchange close/drain (HttpExchange.aclose)", "aclose", "streamable_http/transport.py"),
    ("orjson", "", "orjson"),
    ("asyncio tasks/events (stdlib)", "", "asyncio/"),
]


def _package(path: str) -> str:
    # py-spy names files relative to their sys.path entry: "httpx/_models.py".
    if path.startswith(("app/", "translators/")):
        return path  # the gateway's own code, per module
    return path.split("/", 1)[0].removesuffix(".py") if path else "?"


def shares(raw: Path) -> dict[str, object]:
    own: collections.Counter[str] = collections.Counter()
    funcs: collections.Counter[str] = collections.Counter()
    layers: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = []
        for frame in stack.split(";"):
            m = _FRAME.match(frame)
            frames.append((m["func"], m["file"]) if m else (frame, ""))
        if frames:
            own[_package(frames[-1][1])] += count
        for fn, f in set(frames):
            funcs[f"{fn} ({f})"] += count
        for name, func, file in LAYERS:
            if any(file in f and func in fn for fn, f in frames):
                layers[name] += count
    return {
        "samples": total,
        "own": {k: v / total for k, v in own.most_common(25)},
        "layers": {name: layers[name] / total for name, _, _ in LAYERS},
        "functions": {k: v / total for k, v in funcs.most_common(80)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--upstream", choices=["fast", "legacy", "everything", "python-stdio"], default="fast"
    )
    parser.add_argument(
        "--legacy", action="store_true", help="2025-11-25 calls on a session through the gateway"
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--no-profile", action="store_true", help="wrk figures only")
    parser.add_argument("--gc", action="store_true", help="report GC pauses (bench/gc_probe.py)")
    parser.add_argument("--shim-env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument(
        "--fixture-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument of the upstream (--fixture-arg=--json-response to the "
        "legacy fixture, --fixture-arg=--sse to the fast upstream)",
    )
    parser.add_argument("--functions", action="store_true", help="also inclusive per function")
    parser.add_argument(
        "--nonblocking",
        action="store_true",
        help="py-spy without stopping the process at each sample: a stopped process shows "
        "the frame its system call returns to, which inflates the socket writes' share",
    )
    parser.add_argument("--tag", default="", help="suffix of the files kept in results/bench")
    parser.add_argument(
        "--direct",
        action="store_true",
        help="wrk straight to the upstream (a legacy session), for comparison with the gateway",
    )
    parser.add_argument(
        "--spy-upstream", action="store_true", help="profile the upstream, not the gateway"
    )
    parser.add_argument(
        "--hop",
        action="store_true",
        help="bench/hop.py (the bare Starlette + aiohttp hop) in the gateway's place, on a "
        "legacy session: its CPU per call, user and system, measured the same way",
    )
    args = parser.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out = ROOT / "results" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    kind = "-direct" if args.direct else "-hop" if args.hop else "-legacy" if args.legacy else ""
    tag = f"{args.upstream}-c{args.concurrency}{kind}{args.tag}"
    body = out / "modern-call.json"
    stdio = args.upstream in ("everything", "python-stdio")
    everything = args.upstream == "everything"
    modern_call = json.loads(json.dumps(MODERN_CALL))
    if everything:  # server-everything's echo takes a message
        modern_call["params"]["arguments"] = {"message": "hi"}
    body.write_bytes(json.dumps(modern_call).encode())
    gc_report = out / f"gc-{tag}.json"
    up_port, port = procs.free_port(), procs.free_port()
    upstream = f"http://127.0.0.1:{up_port}/mcp"
    if args.upstream == "fast":
        up_argv = [sys.executable, str(ROOT / "bench" / "fast_upstream.py"), *args.fixture_arg]
    else:
        up_argv = [str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE), *args.fixture_arg]
    env = {
        "MCP_SHIM_UPSTREAM_URL": upstream,
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_WORKERS": "1",  # py-spy follows one process
        "MCP_SHIM_LOG_LEVEL": "info",
        **dict(item.split("=", 1) for item in args.shim_env),
    }
    if stdio:
        del env["MCP_SHIM_UPSTREAM_URL"]
        if everything:
            node = str(procs.require_peer(procs.NODE))
            command = [node, str(EVERYTHING_JS)]
        else:
            command = [str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE), "--stdio"]
        env["MCP_SHIM_UPSTREAM_COMMAND"] = shlex.join(command)
    shim_argv = [sys.executable, "-m", "app.serving.cli"]
    if args.gc:
        shim_argv = [sys.executable, str(ROOT / "bench" / "gc_probe.py")]
        env["BENCH_GC_REPORT"] = str(gc_report)
    url = f"http://127.0.0.1:{port}/mcp"
    ready = f"http://127.0.0.1:{port}/healthz"
    if args.hop:
        shim_argv = [sys.executable, str(ROOT / "bench" / "hop.py"), "--port", str(port)]
        shim_argv += ["--upstream", upstream]
        ready = url
    wrk_env = {
        **os.environ,
        "BENCH_BODY": str(body),
        "BENCH_HEADERS": "\n".join(f"{k}: {v}" for k, v in MODERN_HEADERS.items()),
    }

    def wrk(seconds: int) -> subprocess.Popen[bytes]:
        argv = ["wrk", "-t1", f"-c{args.concurrency}", f"-d{seconds}s", "--timeout", "10s"]
        argv += ["-s", str(ROOT / "bench" / "call.lua"), url]
        return subprocess.Popen(argv, env=wrk_env, stdout=subprocess.PIPE)

    with ExitStack() as stack:
        if not stdio:
            up_log = out / "p-up.log"
            up_pid = stack.enter_context(
                procs.running([*up_argv, "--port", str(up_port)], upstream, log_path=up_log)
            ).pid
        shim = stack.enter_context(
            procs.running(shim_argv, ready, env=env, log_path=out / "p-shim.log")
        )
        if args.direct or args.hop or args.legacy:  # the call as a legacy client sends it
            url = upstream if args.direct else url
            legacy = out / "legacy-call.json"
            call = json.loads(json.dumps(LEGACY_CALL))
            if everything:  # server-everything's echo takes a message
                call["params"]["arguments"] = {"message": "hi"}
            # Compact, as call.lua numbers the requests only in `"id":1,`.
            legacy.write_bytes(json.dumps(call, separators=(",", ":")).encode())
            wrk_env["BENCH_BODY"] = str(legacy)
            session = legacy_session(upstream if args.direct else url)
            wrk_env["BENCH_HEADERS"] = "\n".join(f"{k}: {v}" for k, v in session.items())
        wrk(2).communicate()  # warm-up: sessions, connections, caches
        if stdio:  # the gateway's children: the stdio servers it runs
            up_pid = children(shim.pid)[0]
        cpu0, up0 = cpu_seconds(shim.pid), cpu_seconds(up_pid)
        split0 = cpu_split(shim.pid)
        load = wrk(args.seconds)
        spy = None
        raw = out / f"profile-{tag}.txt"
        if not args.no_profile:
            spy_argv = [pyspy, "record", "-f", "raw", "-r", str(args.rate), "-o", str(raw)]
            spied = up_pid if args.spy_upstream else shim.pid
            spy_argv += ["-d", str(args.seconds - 1), "-p", str(spied)]
            if args.nonblocking:
                spy_argv.append("--nonblocking")
            spy = subprocess.Popen(
                spy_argv,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        time.sleep(args.seconds / 2)
        rss = rss_mb(shim.pid)
        stdout, _ = load.communicate()
        cpu, up_cpu = cpu_seconds(shim.pid) - cpu0, cpu_seconds(up_pid) - up0
        user, system = (b - a for a, b in zip(split0, cpu_split(shim.pid), strict=True))
        if spy is not None:
            spy.wait()
    line = next(x for x in stdout.decode().splitlines() if x.startswith("BENCH "))
    summary = json.loads(line[6:])
    calls = summary["requests"]
    print(
        f"{tag}: {calls / (summary['duration_us'] / 1e6):,.0f} req/s, p50 "
        f"{summary['p50_us'] / 1000:.2f} ms, p90 {summary['p90_us'] / 1000:.2f} ms, p99 "
        f"{summary['p99_us'] / 1000:.2f} ms, p99.9 {summary['p999_us'] / 1000:.2f} ms, max "
        f"{summary['max_us'] / 1000:.1f} ms, gateway CPU {cpu * 1e6 / calls:.0f} us/call "
        f"(user {user * 1e6 / calls:.0f}, system {system * 1e6 / calls:.0f}), "
        f"upstream CPU {up_cpu * 1e6 / calls:.0f} us/call, RSS {rss:.0f} MB, "
        f"errors {summary['non2xx'] + summary['read'] + summary['timeout']}"
    )
    if args.gc and gc_report.exists():
        print("GC:", gc_report.read_text().strip())
    if not args.no_profile:
        result = shares(raw)
        print(f"{result['samples']} samples ({raw.relative_to(ROOT)})")
        print("own time by package:")
        for name, share in result["own"].items():  # type: ignore[attr-defined]
            print(f"  {share * 100:5.1f}%  {name}")
        print("inclusive, by layer:")
        for name, share in result["layers"].items():  # type: ignore[attr-defined]
            print(f"  {share * 100:5.1f}%  {name}")
        if args.functions:
            print("inclusive, by function:")
            for name, share in result["functions"].items():  # type: ignore[attr-defined]
                print(f"  {share * 100:5.1f}%  {name}")


if __name__ == "__main__":
    main()
