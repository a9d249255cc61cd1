"""What a legacy session's calls cost on each replica: served by its owner,
served by another replica holding a guest copy of the session, and relayed to
the owner by a replica that cannot hold one (app/cluster/replicas.py), in one run.

    .venv/bin/python bench/relay.py [--seconds 8] [--passes 2] [--concurrency 1,8,32]

Three gateway replicas (one worker each, the same MCP_SHIM_STATE_KEY) in front
of the fast upstream (bench/fast_upstream.py); a legacy session (2025-11-25)
opened on replica A. Rows: the calls sent to A (the owner); the same calls
sent to B, which joins the session once and sends them upstream itself
(app/cluster/notes.py); and sent to C, which advertises no URL (so no
owner can send it notes), and relays each to A. wrk and the cells are
bench/wrk.py's (closed loop, `-t1`, `tools/call echo`, passes alternating the
row order, the better pass shown). CPU per call is read from /proc for each
replica: what the owner spends, and what the other replica spends. The added
p50 at c1 of the relayed row is the relay's latency.
"""

from __future__ import annotations

import base64
import os
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.wrk import (
    BENCH,
    Route,
    legacy_session,
    matrix_parser,
    matrix_setup,
    preflight,
    run_passes,
    run_wrk,
)
from tests import procs


def main() -> None:
    parser = matrix_parser(__doc__)
    args = parser.parse_args()
    concurrencies, logs, bodies = matrix_setup(args)
    load0 = os.getloadavg()
    key = base64.b64encode(os.urandom(32)).decode()
    with ExitStack() as stack:
        port = procs.free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        stack.enter_context(
            procs.running(
                [sys.executable, str(BENCH / "fast_upstream.py"), "--port", str(port)],
                url,
                log_path=logs / "relay-up.log",
            )
        )
        replicas = {}
        for name in ("a", "b", "c"):
            rport = procs.free_port()
            env = {
                "MCP_SHIM_UPSTREAM_URL": url,
                "MCP_SHIM_PORT": str(rport),
                "MCP_SHIM_HOST": "127.0.0.1",
                "MCP_SHIM_LOG_LEVEL": "info",  # as deployed: one JSON line per call
                "MCP_SHIM_WORKERS": "1",
                "MCP_SHIM_STATE_KEY": key,
            }
            if name != "c":
                # C advertises no URL: no owner can send it notes, so it joins no
                # session and relays every request, as every replica did before.
                env["MCP_SHIM_ADVERTISE_URL"] = f"http://127.0.0.1:{rport}"
            proc = stack.enter_context(
                procs.running(
                    [sys.executable, "-m", "app.serving.cli"],
                    f"http://127.0.0.1:{rport}/healthz",
                    env=env,
                    log_path=logs / f"relay-shim-{name}.log",
                )
            )
            replicas[name] = (f"http://127.0.0.1:{rport}/mcp", proc.pid)
        (a_url, a_pid), (b_url, b_pid), (c_url, c_pid) = (
            replicas["a"],
            replicas["b"],
            replicas["c"],
        )
        session = legacy_session(a_url)  # owned by A
        # `upstream_pid` is the other replica: on the other rows, the owner.
        owner = Route("legacy session, sent to its owner", a_url, "fast", False, a_pid, session)
        owner.upstream_pid = b_pid
        guest = Route("  the same, via a replica serving it", b_url, "fast", False, b_pid, session)
        guest.upstream_pid = a_pid
        relayed = Route("  the same, via a replica relaying", c_url, "fast", False, c_pid, session)
        relayed.upstream_pid = a_pid
        rows = [owner, guest, relayed]
        for route in rows:
            preflight(route)
            run_wrk(route, 8, args.warmup, bodies)
        run_passes(rows, concurrencies, args.passes, args.seconds, bodies)
    print(
        f"\nwrk -t1, closed loop, tools/call echo on a legacy session; {args.passes} "
        f"alternating passes of {args.seconds:g} s per cell; the better pass by req/s; CPU per "
        f"call read from /proc, range over all cells; load average {load0[0]:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at end; {os.cpu_count()} CPUs"
    )
    head = ["path"] + [f"c{c} req/s" for c in concurrencies]
    head += [f"p50 c{concurrencies[0]} ms"] + [f"p99 c{c} ms" for c in concurrencies[1:]]
    head += ["owner CPU/call us", "other replica CPU/call us"]
    table = [head]
    for route in rows:
        best = {c: max(route.runs[c], key=lambda r: r["rps"]) for c in concurrencies}
        cells = [route.name] + [f"{best[c]['rps']:,.0f}" for c in concurrencies]
        cells.append(f"{best[concurrencies[0]]['p50_ms']:.2f}")
        cells += [f"{best[c]['p99_ms']:.1f}" for c in concurrencies[1:]]
        runs = [r for c in concurrencies for r in route.runs[c]]
        mine = [r["cpu_us"] for r in runs]
        other = [r["upstream_cpu_us"] for r in runs]
        own_cpu, relay_cpu = (mine, other) if route is owner else (other, mine)
        cells.append(f"{min(own_cpu):.0f}-{max(own_cpu):.0f}")
        cells.append("-" if route is owner else f"{min(relay_cpu):.0f}-{max(relay_cpu):.0f}")
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for i, row in enumerate(table):
        print(" | ".join(cell.ljust(widths[j]) for j, cell in enumerate(row)))
        if i == 0:
            print("-|-".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
