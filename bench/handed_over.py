"""Whether a connection handed to the worker that owns its legacy session
(app/serving/handoff.py) costs more per call than one that worker accepted itself.

    .venv/bin/python bench/handed_over.py [--server everything|python]
                                          [--concurrency 32] [--seconds 4] [--rounds 4]

One gateway with 2 workers in front of a stdio server (bench/peers.py's
commands), one legacy session, whose server process belongs to the worker
that took the initialize (the owner). wrk (`-t1`, bench/call.lua) sends the
session's `tools/call echo` to the owner's own listener (`direct`: every
connection accepted there) or to the other worker's (`handed`: every
connection's first request is handed over with its socket, and the owner
serves the connection from then on), the two in alternating order round by
round. Per run: calls/s, CPU per call of both workers together (utime +
stime from /proc), and the handovers the log counts; at the end the medians.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import common, moves, peers  # noqa: E402


def handovers(path: Path) -> int:
    return path.read_text().count('"replica_handed_off"')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="everything", choices=["everything", "python"])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    server = peers.servers()[args.server]
    log_name = "handed-over.log"
    log_path = common.results_dir() / log_name
    settings = {"MCP_SHIM_UPSTREAM_COMMAND": shlex.join(server.argv), "MCP_SHIM_WORKERS": "2"}
    with (
        common.gateway(None, log_name, **settings) as (url, _),
        tempfile.TemporaryDirectory() as tmp,
    ):
        headers = peers.open_session(url)
        time.sleep(0.5)  # the workers' start lines written
        pid_of, listeners, owner = common.workers_in_log(log_path)
        pids = list(pid_of.values())
        other = next(worker for worker in listeners if worker != owner)
        body = Path(tmp) / "call.json"
        body.write_bytes(orjson.dumps(peers.call_body(server, "legacy")))
        print(f"{server.label}: the session's server is worker {owner}'s", flush=True)
        runs: dict[str, list[tuple[float, float]]] = {"direct": [], "handed": []}
        for round_ in range(args.rounds):
            kinds = ["direct", "handed"] if round_ % 2 == 0 else ["handed", "direct"]
            for kind in kinds:
                target = listeners[owner if kind == "direct" else other] + "/mcp"
                handed0 = handovers(log_path)
                cpu0 = common.cpu_seconds(*pids)
                summary = moves.wrk(target, body, headers, args.concurrency, args.seconds)
                cpu = common.cpu_seconds(*pids) - cpu0
                calls = summary["requests"]
                if not calls or peers.wrk_errors(summary):
                    raise RuntimeError(f"{kind}: {calls} calls, {peers.wrk_errors(summary)}")
                runs[kind].append((calls / args.seconds, cpu / calls * 1e6))
                print(
                    f"round {round_ + 1} {kind:6}  {calls / args.seconds:7,.0f} calls/s  "
                    f"{cpu / calls * 1e6:5.0f} us/call  handed over: "
                    f"{handovers(log_path) - handed0}",
                    flush=True,
                )
    for kind, values in runs.items():
        rate = statistics.median(v[0] for v in values)
        cost = statistics.median(v[1] for v in values)
        print(f"{kind:6} median: {rate:7,.0f} calls/s  {cost:5.0f} us/call")


if __name__ == "__main__":
    main()
