"""Instructions the gateway executes per call, counted by valgrind's callgrind.

    .venv/bin/python bench/instructions.py [--upstream python-stdio|everything|fast]
        [--modern] [--calls 400] [--warmup 100] [--tree DIR ...]
    .venv/bin/python bench/instructions.py --bare      # uvicorn alone, for scale

CPU time per call on this VM moves by 10-30% between runs of the same tree
(steal, frequency, the other core's load), more than most single changes to
the gateway's own code. An instruction count does not: it depends on the
code and its inputs, not on the machine's mood. One gateway (one worker, log
level info, as deployed) runs under `valgrind --tool=callgrind` with
instrumentation off; after `--warmup` calls (imports done, caches warm,
session open) its counters are zeroed and turned on for `--calls` calls from
one client, one at a time (c1: every call alone in its loop iteration, the
cell where the fixed per-call work shows most), then dumped. Printed: the
gateway's instructions per call (Ir), its ten costliest functions by self
cost, and, with several `--tree`, each tree's figure side by side (a tree is
a directory holding `app/` and `translators/`, e.g. `git archive REV`
unpacked; the default is this checkout). The upstream (stdio server or HTTP
fixture) runs outside valgrind; the client is this script. `PYTHONHASHSEED`
is fixed so that two runs of one tree hash alike; what is left to vary is
timers and the garbage collector, well under 1% (run it twice to see).

Instructions are not time: a cache miss or a system call's wait costs no
more instructions than a hit. Use this to compare two versions of the
gateway's own code; use bench/peers.py and bench/wrk.sh for time.
"""

from __future__ import annotations

import argparse
import http.client
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

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


def _upstream_env(kind: str, stack: ExitStack) -> dict[str, str]:
    if kind in _STDIO:
        return {"MCP_SHIM_UPSTREAM_COMMAND": shlex.join(peers.servers()[_STDIO[kind]].argv)}
    url, _ = stack.enter_context(common.fast_upstream())
    return {"MCP_SHIM_UPSTREAM_URL": url}


class Client:
    """One keep-alive connection sending calls one at a time, as wrk -c1 does."""

    def __init__(self, port: int, modern: bool, everything: bool) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self._modern = modern
        self._arguments = {"message": "hi"} if everything else {"text": "hi"}
        self._headers: dict[str, str] = {
            "accept": common.ACCEPT,
            "content-type": "application/json",
        }
        if not modern:
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
        self._conn.request("POST", "/mcp", body=body, headers=headers)
        response = self._conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def call(self, i: int) -> None:
        if self._modern:
            body, headers = common.modern_call(i, arguments=self._arguments)
        else:
            body, headers = common.legacy_call(i, arguments=self._arguments), self._headers
        status, _, data = self._post(body, headers)
        if status != 200 or b'"result"' not in data:
            raise SystemExit(f"call {i} answered {status}: {data[:200]!r}")


def _control(pid: int, *options: str) -> None:
    subprocess.run(["callgrind_control", *options, str(pid)], check=True, capture_output=True)


def measure(tree: Path, args: argparse.Namespace, out: Path) -> tuple[int, list[str]]:
    """Instructions of `args.calls` calls through the gateway of `tree`, and
    the costliest functions' lines of callgrind_annotate."""
    port = procs.free_port()
    dump = out / f"callgrind.{tree.name or 'tree'}.{port}.out"
    run = f"import sys; sys.path.insert(0, {str(tree)!r}); from app.cli import main; main()"
    if args.bare:
        run = _BARE
    argv = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={dump}",
        sys.executable,
        "-c",
        run,
    ]
    with ExitStack() as stack:
        env = {**common.gateway_env(None, port), "PYTHONHASHSEED": "0"}
        env.update(item.split("=", 1) for item in args.env)
        if not args.bare:
            env.update(_upstream_env(args.upstream, stack))
        gateway = stack.enter_context(
            procs.running(
                argv,
                f"http://127.0.0.1:{port}/{'mcp' if args.bare else 'healthz'}",
                env=env,
                log_path=out / f"instructions-{port}.log",
                # Under valgrind the gateway starts in tens of seconds, not one.
                ready_timeout_s=300.0,
            )
        )
        client = Client(port, args.modern or args.bare, args.upstream == "everything")
        for i in range(args.warmup):
            client.call(i + 1)
        _control(gateway.pid, "-z")  # zeroed, then counted for the calls alone
        _control(gateway.pid, "-i", "on")
        for i in range(args.calls):
            client.call(args.warmup + i + 1)
        _control(gateway.pid, "-i", "off")
        _control(gateway.pid, "-d")
    dumps = sorted(out.glob(dump.name + "*"), key=lambda p: p.stat().st_mtime)
    # callgrind_control -d writes <file>.1 (the window); the exit writes <file> (empty: off).
    window = [p for p in dumps if p.name != dump.name] or dumps
    data = window[-1].read_bytes()
    totals = _TOTALS.findall(data)
    if not totals:
        raise SystemExit(f"no totals in {window[-1]}")
    annotate = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(window[-1])],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    top = [line for line in annotate if re.match(r"^\s*[\d,]+ \(", line)][:10]
    return int(totals[0]), top


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
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--tree", action="append", type=Path, help="a source tree (repeatable)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="each tree this many times, alternating"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is missing: apt-get install valgrind")
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    out = Path(tempfile.mkdtemp(prefix="instructions-", dir=common.results_dir()))
    kind = "modern" if args.modern else "legacy"
    what = "bare uvicorn, no gateway" if args.bare else f"{args.upstream}, {kind} client"
    print(f"{what}, c1, {args.calls} calls after {args.warmup}")
    print(f"callgrind's files and the gateway's log: {out}")
    figures: dict[Path, list[float]] = {t: [] for t in trees}
    for r in range(args.rounds):
        for tree in trees if r % 2 == 0 else list(reversed(trees)):
            total, top = measure(tree, args, out)
            figures[tree].append(total / args.calls)
            print(f"  {tree}: {total / args.calls:,.0f} instructions per call")
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
