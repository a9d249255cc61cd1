"""What one large answer costs the gateway: peak RSS growth and CPU per MB.

    .venv/bin/python bench/answers.py [--sizes 1,10,50] [--calls 2] [--source DIR]

For each cell (answer size in MB, the answer's form, and the client, modern
or legacy) a fresh gateway process (VmHWM cannot be reset) in front of the
legacy fixture (mcp 1.x): JSON, the fixture answers in JSON
(`--json-response`) and so does the gateway; SSE, the fixture answers on SSE
and the client accepts only `text/event-stream`, so the gateway answers on
SSE too. A small call and a 0.6 MB one load what a call loads, then `--calls` calls of
`large_result` one after another (more for small answers: 50 MB in all).
Printed per cell: the growth of the peak RSS (VmHWM after the first call
minus VmRSS before it) in MiB and as a multiple of the answer, and the
gateway's CPU (utime + stime, /proc/<pid>/stat) per MB of answer over all
the calls. `--source DIR` runs the gateway of another source tree (a
checkout of an older commit) with this script and fixture. The machine's
load shows in the CPU figures: compare runs made side by side.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

MB = 1000 * 1000


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def _modern(http: httpx.Client, url: str, size: int, i: int, accept: str) -> tuple[int, str]:
    body, headers = common.modern_call(i, "large_result", {"bytes": size})
    answer = http.post(url, content=body, headers={**headers, "accept": accept})
    return _text_length(answer), answer.headers.get("content-type", "")


def _legacy_session(http: httpx.Client, url: str, accept: str) -> dict[str, str]:
    headers = {"accept": accept, "content-type": "application/json"}
    opened = http.post(url, json=common.initialize(), headers=headers)
    opened.raise_for_status()
    session = {
        **headers,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": common.LEGACY,
    }
    http.post(url, json=common.INITIALIZED, headers=session).raise_for_status()
    return session


def _text_length(answer: httpx.Response) -> int:
    answer.raise_for_status()
    message: Any = common.answer(answer.content, answer.headers.get("content-type", ""))
    return len(message["result"]["content"][0]["text"])


def _cell(
    upstream_url: str, source: Path | None, client: str, size: int, calls: int, accept: str
) -> dict[str, Any]:
    env: dict[str, str] = {}
    if source is not None:
        # The other tree's `app`, not this one's (the gateway's cwd is this tree).
        env = {"PYTHONSAFEPATH": "1", "PYTHONPATH": str(source)}
    with (
        common.gateway(upstream_url, "answers-gw.log", None, **env) as (url, proc),
        httpx.Client(timeout=120) as http,
    ):
        session = _legacy_session(http, url, accept) if client == "legacy" else None

        def call(n: int, i: int) -> tuple[int, str]:
            if session is None:
                return _modern(http, url, n, i, accept)
            body = common.legacy_call(i, "large_result", {"bytes": n})
            answer = http.post(url, content=body, headers=session)
            return _text_length(answer), answer.headers.get("content-type", "")

        # What a call and a large answer load (code, buffers), loaded first: the
        # growth measured is the answer's own.
        call(1000, 0)
        call(600 * 1000, 1)
        before = _status_kib(proc.pid, "VmRSS")
        kind = ""
        # At least 50 MB in all: CPU time comes in clock ticks (10 ms).
        repeats = max(calls, -(-50 * MB // size))
        started = common.cpu_seconds(proc.pid)
        grown = 0.0
        for i in range(repeats):
            length, kind = call(size, 2 + i)
            assert length == size, (length, size)
            if i == 0:
                # One answer's peak: the next call may start before the gateway
                # has dropped this one (its log line, its cleanup).
                grown = (_status_kib(proc.pid, "VmHWM") - before) / 1024
        cpu = common.cpu_seconds(proc.pid) - started
    answer_mib = size / (1024 * 1024)
    return {
        "grown_mib": grown,
        "times": grown / answer_mib,
        "cpu_ms_per_mb": cpu * 1000 / (repeats * size / MB),
        "client_gets": kind.partition(";")[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,10,50", help="answer sizes in MB")
    parser.add_argument("--calls", type=int, default=2, help="large calls per cell")
    parser.add_argument("--forms", default="json,sse", help="the upstream's answer forms")
    parser.add_argument("--clients", default="modern,legacy")
    parser.add_argument("--source", type=Path, default=None, help="the gateway's source tree")
    args = parser.parse_args()
    sizes = [int(float(s) * MB) for s in args.sizes.split(",")]
    print(f"source: {args.source or common.ROOT}; load average {os.getloadavg()[0]:.1f}")
    print("form  client  MB   peak RSS growth      CPU ms/MB  client gets")
    started = time.monotonic()
    for form in args.forms.split(","):
        extra = ("--json-response",) if form == "json" else ()
        # SSE: the upstream answers on SSE, and the client accepts only SSE, so
        # the gateway's answer is an SSE event too (its framing around the answer).
        accept = common.ACCEPT if form == "json" else "text/event-stream"
        with common.upstream("legacy", *extra) as (upstream_url, _):
            for client in args.clients.split(","):
                for size in sizes:
                    cell = _cell(upstream_url, args.source, client, size, args.calls, accept)
                    print(
                        f"{form:5} {client:7} {size / MB:3g}  "
                        f"+{cell['grown_mib']:6.1f} MiB ({cell['times']:.2f}x)  "
                        f"{cell['cpu_ms_per_mb']:8.1f}   {cell['client_gets']}",
                        flush=True,
                    )
    print(f"{time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
