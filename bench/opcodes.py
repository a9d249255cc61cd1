"""Python bytecodes the gateway runs per call, by module and by function.

    .venv/bin/python bench/opcodes.py [--upstream python-stdio|everything|fast]
        [--modern] [--calls 300] [--top 40] [--tree DIR]

bench/instructions.py counts a call's machine instructions, all in the
interpreter's C code: it says how much, not where in our Python. This says
where. One gateway (one worker, log level info) runs with a trace function
installed on a signal after `--warmup` calls; every bytecode executed from
then on is counted against its function (`sys.settrace` with opcode events,
deterministic, and so slow that only counts mean anything, never time); a
second signal writes the counts. Printed per call: bytecodes and frames
(a coroutine's resumption counts as a frame), the modules by bytecodes, and
the `--top` functions with their bytecodes and frames. What C does on the
way (a regex, orjson, a system call) is not counted: read it beside
bench/instructions.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import common  # noqa: E402
import instructions  # noqa: E402
from common import ROOT, procs  # noqa: E402

# Run in the gateway's process: SIGUSR1 starts the counting, SIGUSR2 writes it.
_TRACED = """
import collections, json, os, signal, sys
sys.path.insert(0, {root!r})
counts = collections.Counter()
prefixes = sorted((p for p in sys.path if p), key=len, reverse=True)

def where(code):
    name = code.co_filename
    for prefix in prefixes:
        if name.startswith(prefix + os.sep):
            name = name[len(prefix) + 1:]
            break
    return name + ":" + code.co_name

def tracer(frame, event, arg):
    frame.f_trace_opcodes = True
    key = where(frame.f_code)
    counts["FRAMES " + key] += 1
    def local(frame, event, arg):
        if event == "opcode":
            counts[key] += 1
        return local
    return local

def start(*_):
    sys.settrace(tracer)

def stop(*_):
    sys.settrace(None)
    with open({out!r}, "w") as f:
        json.dump(counts, f)

signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
try:
    from app.serving.cli import main
except ModuleNotFoundError:  # a tree whose app/ has no serving/
    from app.cli import main
main()
"""


def count(args: argparse.Namespace, out: Path) -> dict[str, int]:
    port = procs.free_port()
    run = _TRACED.format(root=str(args.tree.resolve()), out=str(out))
    with ExitStack() as stack:
        env = {**common.gateway_env(None, port), "PYTHONHASHSEED": "0"}
        env.update(instructions._upstream_env(args.upstream, stack))
        gateway = stack.enter_context(
            procs.running(
                [sys.executable, "-c", run],
                f"http://127.0.0.1:{port}/healthz",
                env=env,
                log_path=out.with_suffix(".log"),
            )
        )
        client = instructions.Client(port, args.modern, args.upstream == "everything")
        for i in range(args.warmup):
            client.call(i + 1)
        os.kill(gateway.pid, signal.SIGUSR1)
        time.sleep(0.5)  # the handler runs at the loop's next turn
        for i in range(args.calls):
            client.call(args.warmup + i + 1)
        os.kill(gateway.pid, signal.SIGUSR2)
        for _ in range(100):
            if out.exists() and out.stat().st_size:
                break
            time.sleep(0.1)
    counts: dict[str, int] = json.loads(out.read_text())
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--upstream", choices=["python-stdio", "everything", "fast"], default="everything"
    )
    parser.add_argument("--modern", action="store_true", help="2026-07-28 calls")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument(
        "--tree", type=Path, default=ROOT, help="a source tree holding app/ (default: this one)"
    )
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="opcodes-", dir=common.results_dir())) / "counts.json"
    counts = count(args, out)
    n = args.calls
    ops = {k: v for k, v in counts.items() if not k.startswith("FRAMES ")}
    frames = {k[len("FRAMES ") :]: v for k, v in counts.items() if k.startswith("FRAMES ")}
    kind = "modern" if args.modern else "legacy"
    print(f"{args.upstream}, {kind} client, c1, {n} calls after {args.warmup}, {args.tree}")
    print(f"counts and the gateway's log: {out.parent}")
    print(
        f"per call: {sum(ops.values()) / n:,.0f} bytecodes, {sum(frames.values()) / n:,.0f} frames"
    )
    modules: Counter[str] = Counter()
    for key, value in ops.items():
        modules[key.rsplit(":", 1)[0]] += value
    print("\nbytecodes per call, by module")
    for module, value in modules.most_common(25):
        print(f"{value / n:8.0f}  {module}")
    print("\nbytecodes and frames per call, by function")
    for key, value in sorted(ops.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{value / n:8.0f} {frames.get(key, 0) / n:5.1f}  {key}")


if __name__ == "__main__":
    main()
