"""Trace export's cost: CPU per call of the gateway with OTLP export off and on, in one run.

    .venv/bin/python bench/tracing_cpu.py [--seconds 8] [--passes 2] [--concurrency 1,8,32]

Rows: the fast upstream direct (a legacy session), then mcp-shim in front of it
serving 2026-07-28 requests (the translated modern->legacy path) with export
off (the default: no OTEL_* variable) and on (OTEL_EXPORTER_OTLP_ENDPOINT set,
every call sampled: two spans a call, the server span and the upstream request's
client span, batched and sent by the SDK's exporter thread inside the gateway's
process), and on with a tenth of the calls sampled (OTEL_TRACES_SAMPLER=
traceidratio, OTEL_TRACES_SAMPLER_ARG=0.1: the others' spans are not recorded).
The gateway's requests carry a sampled W3C `traceparent`, as a traced
client's would, except in the sampled row: wrk sends one trace id, which a
ratio sampler would keep or drop whole, so there each call starts a trace.
The receiver is oteltap (.peers/otel: run
`bash scripts/setup_peers.sh otel` first); its CPU is not the gateway's and is
not counted. wrk and the cells are bench/wrk.py's (closed loop, `-t1`,
`tools/call echo`, passes alternating the row order, the better pass shown);
CPU per call is the gateway process's, from /proc. The spans the receiver got
per sampled call are printed at the end: about 2.0 means none was dropped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import rss_mb
from bench.common import tree as _tree
from bench.wrk import (
    BENCH,
    MODERN_HEADERS,
    Route,
    legacy_session,
    matrix_parser,
    matrix_setup,
    preflight,
    run_passes,
    run_wrk,
    table,
)
from tests import procs

OTELTAP = procs.PEERS / "otel" / "bin" / "oteltap"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Receiver:
    """oteltap on a free port; the spans it printed, counted and thrown away."""

    def __init__(self, stack: ExitStack) -> None:
        self.port = procs.free_port()
        self.spans = 0
        self._proc = subprocess.Popen(
            [str(procs.require_peer(OTELTAP)), "--port", str(self.port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        stack.callback(self._stop)
        assert self._proc.stdout is not None
        self._out = self._proc.stdout
        threading.Thread(target=self._count, daemon=True).start()
        procs.wait_until_up(f"http://127.0.0.1:{self.port}/v1/traces", self._proc, 20.0)

    def _count(self) -> None:
        for line in self._out:
            if line.startswith(b"{"):
                self.spans += 1

    def _stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)


def main() -> None:
    parser = matrix_parser(__doc__)
    args = parser.parse_args()
    concurrencies, logs, bodies = matrix_setup(args)
    load0 = os.getloadavg()
    with ExitStack() as stack:
        tap = Receiver(stack)
        port = procs.free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        upstream = stack.enter_context(
            procs.running(
                [sys.executable, str(BENCH / "fast_upstream.py"), "--port", str(port)],
                url,
                log_path=logs / "tracing-up.log",
            )
        )
        paths = [Route("fast upstream (JSON, ~10 us) direct", url, "fast", False, None)]
        exported = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{tap.port}"}
        # A tenth of the calls sampled, whatever the client's flag (not parent-based).
        sampled = {
            **exported,
            "OTEL_TRACES_SAMPLER": "traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.1",
        }
        rows = (
            ("export off", {}),
            ("export on (OTLP/HTTP)", exported),
            ("export on, 10% sampled", sampled),
        )
        for name, extra in rows:
            sport = procs.free_port()
            env = {
                "MCP_SHIM_UPSTREAM_URL": url,
                "MCP_SHIM_PORT": str(sport),
                "MCP_SHIM_HOST": "127.0.0.1",
                "MCP_SHIM_LOG_LEVEL": "info",  # as deployed: one JSON line per call
                "MCP_SHIM_WORKERS": "1",
                **extra,
            }
            shim = stack.enter_context(
                procs.running(
                    [sys.executable, "-m", "app.serving.cli"],
                    f"http://127.0.0.1:{sport}/healthz",
                    env=env,
                    log_path=logs / f"tracing-shim-{len(paths)}.log",
                )
            )
            paths.append(
                Route(
                    f"  mcp-shim, {name}", f"http://127.0.0.1:{sport}/mcp", "fast", True, shim.pid
                )
            )
            paths[-1].headers = dict(MODERN_HEADERS)
            if "OTEL_TRACES_SAMPLER" not in extra:
                paths[-1].headers["traceparent"] = TRACEPARENT
        for p in paths:
            p.upstream_pid = upstream.pid
            if not p.modern:
                p.headers = legacy_session(p.url)
            preflight(p)
        for p in paths:
            run_wrk(p, 8, args.warmup, bodies)
            p.rss_idle = rss_mb(*_tree(p.pid)) if p.pid else 0.0
        spans0 = tap.spans
        run_passes(paths, concurrencies, args.passes, args.seconds, bodies)
        on, tenth = paths[-2], paths[-1]
        calls = sum(r["rps"] * args.seconds for runs in on.runs.values() for r in runs)
        calls += 0.1 * sum(r["rps"] * args.seconds for runs in tenth.runs.values() for r in runs)
        received = tap.spans - spans0
    print(
        f"\nwrk -t1, closed loop, tools/call echo with a sampled traceparent (none in the "
        f"sampled row); {args.passes} alternating passes of {args.seconds:g} s per cell; "
        f"req/s of the better pass (x: against "
        f"direct); CPU per call: the gateway's process, range over all cells; load average "
        f"{load0[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end; {os.cpu_count()} CPUs"
    )
    print(table(paths, concurrencies))
    print(f"spans received per sampled call: {received / calls:.2f} (about {calls:,.0f} calls)")


if __name__ == "__main__":
    main()
