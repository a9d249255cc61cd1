"""Instructions the gateway executes per call, counted by valgrind's callgrind.

    .venv/bin/python bench/instructions.py [--upstream python-stdio|everything|fast]
        [--modern] [--calls 400] [--warmup 100] [--tree DIR ...]
    .venv/bin/python bench/instructions.py --bare      # uvicorn alone, for scale
    .venv/bin/python bench/instructions.py --workers 2 [--via shared|owner|sibling]
    .venv/bin/python bench/instructions.py --upstream fast --modern --concurrency 8 [--workers 2]

CPU time per call on this VM moves by 10-30% between runs of the same tree
(steal, frequency, the other core's load), more than most single changes to
the gateway's own code. An instruction count does not: it depends on the
code and its inputs, not on the machine's mood. One gateway (one worker, log
level info, as deployed) runs under `valgrind --tool=callgrind` with
instrumentation off; after `--warmup` calls (imports done, caches warm,
session open) its counters are zeroed and turned on for `--calls` calls from
one client, one at a time (c1: every call alone in its loop iteration, the
cell where the fixed per-call work shows most), then dumped. With
`--concurrency N`, N clients (each its own connection; legacy ones all in
the first one's session, as bench/peers.py's wrk) send the calls together,
one at a time each, as wrk -cN does. Printed: the
gateway's instructions per call (Ir), its ten costliest functions by self
cost, and, with several `--tree`, each tree's figure side by side (a tree is
a directory holding `app/` and `translators/`, e.g. `git archive REV`
unpacked; the default is this checkout). The upstream (stdio server or HTTP
fixture) runs outside valgrind; the client is this script. `PYTHONHASHSEED`
is fixed so that two runs of one tree hash alike; what is left to vary is
timers and the garbage collector, well under 1% (run it twice to see).

With `--workers 2` the gateway runs as deployed by default (a supervisor
and two workers, each under callgrind; the stdio server is not) and both
workers are counted, so the figure is the work of the processes that serve
calls, to read against one worker's. A legacy session belongs to the
worker whose server process it opened (the owner); the calls go where
`--via` says: `shared`, the port clients use (the kernel picks the worker,
the balancer may move the connection, app/serving/balance.py); `owner` or `sibling`,
that worker's own listener (from the sibling, the connection is handed to
the owner with its first request, app/serving/handoff.py). Under valgrind a worker's
loop reads busy, so the balancer acts as it does under load: which worker
took what is printed per process. In front of the fast upstream (a modern
client, or legacy ones over HTTP), `--workers 2 --concurrency 8` counts
what spreading calls over both workers costs in instructions: the cell
where bench/moves.py times the default at 1.14x one worker's CPU per call
(bench/JOURNAL.md, "Eleventh session").

Under valgrind a call takes about 18 ms, so work driven by the
clock (the balancer's tick every 0.25 s reads /proc; a timer) is counted
over far fewer calls than in a real run and reads as a per-call cost it
is not. `--idle` counts the same processes again, with no call, for as
long as the calls took, and takes that off: what is left is what the
calls themselves cost.

Instructions are not time: a cache miss or a system call's wait costs no
more instructions than a hit. Use this to compare two versions of the
gateway's own code; use bench/peers.py and bench/wrk.sh for time.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Final

import orjson

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import common  # noqa: E402
import peers  # noqa: E402
from common import ROOT, procs  # noqa: E402

_TOTALS = re.compile(rb"^totals:\s+(\d+)", re.MULTILINE)
_STDIO = {"python-stdio": "python", "everything": "everything"}  # bench/peers.py's servers

# --bare: uvicorn alone, on the gateway's uvloop and httptools, answering every
# POST with a fixed JSON-RPC result: the least an ASGI server of this stack
# does per request, to read the gateway's figure against.
_BARE = """
import os, uvicorn
ANSWER = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}'
async def app(scope, receive, send):
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})
uvicorn.run(app, host="127.0.0.1", port=int(os.environ["MCP_SHIM_PORT"]), loop="uvloop",
            http="httptools", lifespan="off", access_log=False, log_level="warning")
"""


def _upstream_env(kind: str, stack: ExitStack, route: str = "single") -> dict[str, str]:
    if kind in _STDIO:
        command = peers.servers()[_STDIO[kind]].argv
        if route != "single":
            servers = {n: {"command": command[0], "args": command[1:]} for n in ("a", "b")}
            return {"MCP_SHIM_SERVERS": json.dumps({"mcpServers": servers})}
        return {"MCP_SHIM_UPSTREAM_COMMAND": shlex.join(command)}
    url, _ = stack.enter_context(common.fast_upstream())
    if route != "single":
        # The upstream twice, as `a` and `b`: /mcp aggregates them.
        return {
            "MCP_SHIM_SERVERS": json.dumps({"mcpServers": {"a": {"url": url}, "b": {"url": url}}})
        }
    return {"MCP_SHIM_UPSTREAM_URL": url}


# --route: where the calls go, and the tool's name there.
_ROUTES: Final = {
    "single": ("/mcp", ""),
    "named": ("/servers/a/mcp", ""),
    "aggregate": ("/mcp", "a__"),
}


class Client:
    """One keep-alive connection sending calls one at a time, as wrk -c1 does."""

    def __init__(
        self,
        port: int,
        modern: bool,
        everything: bool,
        join: Client | None = None,
        path: str = "/mcp",
        tool: str = "echo",
    ) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self._path = path
        self._tool = tool
        self._modern = modern
        self._arguments = {"message": "hi"} if everything else {"text": "hi"}
        self._headers: dict[str, str] = {
            "accept": common.ACCEPT,
            "content-type": "application/json",
        }
        if not modern and join is not None:
            self._headers = join._headers  # its session's
        elif not modern:
            status, headers, _ = self._post(orjson.dumps(common.initialize()), self._headers)
            session = headers.get("mcp-session-id")
            if status != 200 or session is None:
                raise SystemExit(f"initialize answered {status} without a session")
            self._headers = {
                **self._headers,
                "mcp-session-id": session,
                "mcp-protocol-version": common.LEGACY,
            }
            status, _, _ = self._post(orjson.dumps(common.INITIALIZED), self._headers)
            if status != 202:
                raise SystemExit(f"notifications/initialized answered {status}")

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        self._conn.request("POST", self._path, body=body, headers=headers)
        response = self._conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def call(self, i: int) -> None:
        if self._modern:
            body, headers = common.modern_call(i, self._tool, arguments=self._arguments)
        else:
            body, headers = common.legacy_call(i, self._tool, self._arguments), self._headers
        status, _, data = self._post(body, headers)
        if status != 200 or b'"result"' not in data:
            raise SystemExit(f"call {i} answered {status}: {data[:200]!r}")

    def reconnect(self, port: int) -> None:
        """The calls from here on on a new connection to `port`, the same session."""
        self._conn.close()
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)


def _window(dump: Path) -> Path:
    """The file `callgrind_control -d` wrote for `dump` (<file>.1: the counted
    window; the exit writes <file> itself, empty: instrumentation off)."""
    dumps = sorted(dump.parent.glob(dump.name + ".*"), key=lambda p: p.stat().st_mtime)
    if not dumps:
        raise SystemExit(f"callgrind wrote no window for {dump}")
    return dumps[-1]


def _control_all(pids: Iterable[int], *options: str) -> None:
    """callgrind_control of every process, at once: the window between
    counting on and the first call stays short."""
    running = [
        subprocess.Popen(
            ["callgrind_control", *options, str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]
    for proc in running:
        if proc.wait() != 0:
            raise SystemExit(f"callgrind_control {' '.join(options)} failed")


def measure(
    tree: Path, args: argparse.Namespace, out: Path
) -> tuple[dict[str, int], dict[str, int], list[str]]:
    """Instructions of `args.calls` calls through the gateway of `tree` per
    process counted, with `--idle` the same processes' over as long with no
    call (else empty), and the costliest functions' lines of callgrind_annotate
    (of the process that did the most)."""
    port = procs.free_port()
    dump = out / f"callgrind.{tree.name or 'tree'}.{port}.%p.out"
    # In the tree's directory: a worker is `python -m` the tree's cli module, which
    # imports the `app` of its working directory first.
    run = (
        f"import os, sys; os.chdir({str(tree)!r}); sys.path.insert(0, {str(tree)!r})\n"
        + common.RUN_MAIN
    )
    if args.bare:
        run = _BARE
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={dump}"]
    if args.workers > 1:
        # The workers are the supervisor's children; a stdio server is not ours.
        argv += ["--trace-children=yes"]
        if args.upstream in _STDIO:
            marker = peers.servers()[_STDIO[args.upstream]].marker
            argv += [f"--trace-children-skip-by-arg=*{marker}*"]
    argv += [sys.executable, "-c", run]
    log_path = out / f"instructions-{port}.log"
    with ExitStack() as stack:
        env = {
            **common.gateway_env(None, port),
            "PYTHONHASHSEED": "0",
            "MCP_SHIM_WORKERS": str(args.workers),
        }
        env.update(item.split("=", 1) for item in args.env)
        if not args.bare:
            env.update(_upstream_env(args.upstream, stack, args.route))
        gateway = stack.enter_context(
            procs.running(
                argv,
                f"http://127.0.0.1:{port}/{'mcp' if args.bare else 'healthz'}",
                env=env,
                log_path=log_path,
                # Under valgrind the gateway starts in tens of seconds, not one.
                ready_timeout_s=300.0,
            )
        )
        modern, everything = args.modern or args.bare, args.upstream == "everything"
        path, prefix = _ROUTES[args.route]
        tool = prefix + "echo"
        clients = [Client(port, modern, everything, path=path, tool=tool)]
        clients += [
            Client(port, modern, everything, join=clients[0], path=path, tool=tool)
            for _ in range(args.concurrency - 1)
        ]
        counted = {"gateway": gateway.pid}
        if args.workers > 1 and args.modern:
            # Modern clients open no session: no owner to name.
            counted = {f"worker {w}": pid for w, pid in common.worker_pids(log_path).items()}
        elif args.workers > 1:
            pids, urls, owner = common.workers_in_log(log_path)
            sibling = next(w for w in pids if w != owner)
            # Not the supervisor: callgrind_control reaches a process blocked in
            # a system call through ptrace, and the supervisor's sigtimedwait
            # then returned a signal number that is none (valgrind 3.19); it
            # wakes twice a second and serves no call.
            counted = {f"worker {w}{' (owner)' if w == owner else ''}": pids[w] for w in pids}
            if args.via != "shared":
                url = urls[owner if args.via == "owner" else sibling]
                clients[0].reconnect(int(url.rsplit(":", 1)[1]))
        _calls(clients, 1, args.warmup)
        started = time.monotonic()
        totals, windows = _counted(
            counted, dump, lambda: _calls(clients, args.warmup + 1, args.calls)
        )
        idle: dict[str, int] = {}
        if args.idle:
            took = time.monotonic() - started
            idle, _ = _counted(counted, dump, lambda: time.sleep(took))
    busiest = max(totals, key=lambda name: totals[name])
    annotate = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(windows[busiest])],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    top = [line for line in annotate if re.match(r"^\s*[\d,]+ \(", line)][:10]
    return totals, idle, top


def _calls(clients: list[Client], first: int, count: int) -> None:
    """`count` calls, ids from `first`, shared out over the clients, which send
    theirs at the same time."""

    def send(k: int) -> None:
        for i in range(first + k, first + count, len(clients)):
            clients[k].call(i)

    with ThreadPoolExecutor(len(clients)) as pool:
        for done in [pool.submit(send, k) for k in range(len(clients))]:
            done.result()


def _counted(
    counted: dict[str, int], dump: Path, action: Callable[[], None]
) -> tuple[dict[str, int], dict[str, Path]]:
    """Each process's instructions while `action` runs, and the file they came from."""
    _control_all(counted.values(), "-z")
    _control_all(counted.values(), "-i", "on")
    action()
    _control_all(counted.values(), "-i", "off")
    _control_all(counted.values(), "-d")
    totals: dict[str, int] = {}
    windows: dict[str, Path] = {}
    for name, pid in counted.items():
        windows[name] = _window(Path(str(dump).replace("%p", str(pid))))
        found = _TOTALS.findall(windows[name].read_bytes())
        if not found:
            raise SystemExit(f"no totals in {windows[name]}")
        totals[name] = int(found[0])
    return totals, windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--upstream", choices=["python-stdio", "everything", "fast"], default="python-stdio"
    )
    parser.add_argument(
        "--modern", action="store_true", help="2026-07-28 calls (default: a legacy session)"
    )
    parser.add_argument(
        "--bare", action="store_true", help="uvicorn alone, a fixed answer: no gateway"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="one more variable of the gateway's environment (repeatable), e.g. a feature's cost",
    )
    parser.add_argument(
        "--workers",
        type=int,
        choices=[1, 2],
        default=1,
        help="2: the default's supervisor and two workers, both workers counted",
    )
    parser.add_argument(
        "--via",
        choices=["shared", "owner", "sibling"],
        default="shared",
        help="with --workers 2: where the calls' connection goes (see above)",
    )
    parser.add_argument(
        "--idle",
        action="store_true",
        help="count an idle window as long as the calls' and take it off (see above)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=1, help="clients sending calls at once (see above)"
    )
    parser.add_argument(
        "--route",
        choices=sorted(_ROUTES),
        default="single",
        help="named, aggregate: a servers file naming the upstream twice (a, b); the calls "
        "on /servers/a/mcp, or on the aggregated /mcp as a__echo",
    )
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--tree", action="append", type=Path, help="a source tree (repeatable)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="each tree this many times, alternating"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is missing: apt-get install valgrind")
    if args.concurrency < 1:
        raise SystemExit("--concurrency: at least 1 client")
    if args.workers > 1 and args.bare:
        raise SystemExit("--workers 2 counts the gateway's workers: not with --bare")
    if args.via != "shared" and (args.modern or args.upstream not in _STDIO):
        raise SystemExit("--via owner|sibling: a legacy session over stdio (its owner: a worker)")
    if args.via != "shared" and args.concurrency > 1:
        raise SystemExit("--via owner|sibling sends one session's calls: --concurrency 1")
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    out = Path(tempfile.mkdtemp(prefix="instructions-", dir=common.results_dir()))
    kind = "modern" if args.modern else "legacy"
    what = "bare uvicorn, no gateway" if args.bare else f"{args.upstream}, {kind} client"
    if args.workers > 1:
        what += f", 2 workers, via {args.via}"
    print(f"{what}, c{args.concurrency}, {args.calls} calls after {args.warmup}")
    print(f"callgrind's files and the gateway's log: {out}")
    figures: dict[Path, list[float]] = {t: [] for t in trees}
    for r in range(args.rounds):
        for tree in trees if r % 2 == 0 else list(reversed(trees)):
            totals, idle, top = measure(tree, args, out)
            total = sum(totals.values()) - sum(idle.values())
            figures[tree].append(total / args.calls)
            less = " less the idle window's" if idle else ""
            print(f"  {tree}: {total / args.calls:,.0f} instructions per call{less}")
            if len(totals) > 1 or idle:
                for name, count in totals.items():
                    line = f"      {name}: {count / args.calls:,.0f}"
                    if idle:
                        line += f", idle as long {idle[name] / args.calls:,.0f}"
                    print(line)
            if r == 0:
                for line in top:
                    print(f"      {line.strip()}")
    base = min(figures[trees[0]])
    for tree in trees:
        best = min(figures[tree])
        runs = len(figures[tree])
        print(f"{tree}: {best:,.0f} per call (least of {runs}), {best / base:.3f}x the first")


if __name__ == "__main__":
    main()
