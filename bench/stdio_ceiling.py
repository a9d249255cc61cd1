"""How many calls a stdio server answers with no gateway at all: the ceiling
every gateway in front of one of its processes stays under.

    .venv/bin/python bench/stdio_ceiling.py [--servers python,everything]
        [--concurrency 1,8,32] [--seconds 4] [--passes 3]

A legacy session over stdio is one server process (mcp-shim and supergateway
--stateful alike, bench/peers.py). When that process takes a whole core, the
gateway in front of it cannot give more calls per second than the process can
answer, however little CPU the gateway spends. This script measures that
figure: it starts the server as bench/peers.py does, initializes it over its
pipes, then keeps `--concurrency` `tools/call echo` requests in flight for
`--seconds` (each answer sends the next request; the requests of one loop
iteration go out in one write, the best case for the server's reads), and
prints, per cell, the best pass's calls/s, the server's CPU per call and its
share of one core (utime + stime of the server's processes, from /proc). The
client is this process (asyncio, uvloop), which spends far less per call than
the servers measured here; its own CPU per call is printed too.

Compare the calls/s with bench/peers.py's rows in front of the same server: a
target of "1.2x the best peer's calls/s" is out of any gateway's reach where
1.2x the peer's figure is above this ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import common, peers  # noqa: E402


class _Server(asyncio.SubprocessProtocol):
    """The server's stdout, line by line, to `on_line`."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.on_line: Any = None
        self.exited = asyncio.get_running_loop().create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            return
        self.buffer += data
        lines = self.buffer.split(b"\n")
        self.buffer = bytearray(lines.pop())
        for line in lines:
            if line.strip():
                self.on_line(orjson.loads(line))

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def _call(i: int, arguments: dict[str, str]) -> bytes:
    return common.legacy_call(i, arguments=arguments) + b"\n"


async def one_pass(server: peers.Server, concurrency: int, seconds: float) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        _Server, *server.argv, stdin=-1, stdout=-1, stderr=asyncio.subprocess.DEVNULL
    )
    stdin: Any = transport.get_pipe_transport(0)  # uvloop's, not an asyncio.WriteTransport
    try:
        answered: asyncio.Future[Any] = loop.create_future()
        protocol.on_line = lambda m: answered.done() or answered.set_result(m)
        init = common.initialize("stdio-ceiling")
        stdin.write(orjson.dumps(init) + b"\n")
        reply = await asyncio.wait_for(answered, 30)
        if "result" not in reply:
            raise SystemExit(f"{server.label}: initialize answered {reply}")
        stdin.write(orjson.dumps(common.INITIALIZED) + b"\n")

        counter = iter(range(1, 1 << 62))
        done = 0
        measuring = False
        pending: list[bytes] = []
        ending = time.monotonic() + seconds + 1.0  # 1 s of warm-up, not counted

        def flush() -> None:
            if pending:
                stdin.write(b"".join(pending))
                pending.clear()

        def on_line(message: dict[str, Any]) -> None:
            nonlocal done
            if "id" not in message or "method" in message:
                return  # a notification (or a request: these servers send none for echo)
            if "result" not in message:
                raise SystemExit(f"{server.label}: a call answered {message}")
            if measuring:
                done += 1
            if time.monotonic() < ending:
                if not pending:
                    loop.call_soon(flush)
                pending.append(_call(next(counter), server.arguments))

        protocol.on_line = on_line
        for _ in range(concurrency):
            pending.append(_call(next(counter), server.arguments))
        flush()
        await asyncio.sleep(1.0)
        pids = common.tree(transport.get_pid())
        cpu0, own0, t0 = common.cpu_seconds(*pids), time.process_time(), time.monotonic()
        measuring = True
        await asyncio.sleep(max(ending - time.monotonic(), 0.0))
        measuring = False
        elapsed = time.monotonic() - t0
        cpu = common.cpu_seconds(*pids) - cpu0
        own = time.process_time() - own0
        calls = max(done, 1)
        return {
            "calls_s": done / elapsed,
            "server_us": cpu / calls * 1e6,
            "core": cpu / elapsed,
            "client_us": own / calls * 1e6,
        }
    finally:
        transport.close()
        with_timeout = asyncio.wait_for(asyncio.shield(protocol.exited), 10)
        try:
            await with_timeout
        except TimeoutError:
            os.kill(transport.get_pid(), 9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--servers", default="python,everything")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    known = peers.servers()
    chosen = [known[s] for s in args.servers.split(",")]
    levels = [int(c) for c in args.concurrency.split(",")]
    for server in chosen:
        if not server.argv:
            raise SystemExit(f"{server.key} is not a stdio server")
        print(f"{server.label}, direct over its pipes, best pass of {args.passes}:")
        for c in levels:
            runs = [uvloop.run(one_pass(server, c, args.seconds)) for _ in range(args.passes)]
            best = max(runs, key=lambda r: r["calls_s"])
            each = ", ".join(f"{r['calls_s']:,.0f}" for r in runs)
            print(
                f"  c{c}: {best['calls_s']:,.0f} calls/s, server CPU {best['server_us']:,.0f} us "
                f"per call, {best['core']:.2f} of a core; this client {best['client_us']:.0f} us "
                f"per call (passes: {each})"
            )


if __name__ == "__main__":
    main()
