"""How the kernel spreads new connections over worker processes: one shared
listening socket (what app/serving/workers.py does) against one SO_REUSEPORT socket
per worker, with uvloop servers like the gateway's.

    .venv/bin/python bench/accept_spread.py [--workers 2] [--rounds 10]

Each worker is a minimal uvloop HTTP server (a fixed 200 answer) counting the
connections it accepted. Two scenarios, each run in both modes:

- idle: `--rounds` runs of `wrk -c8` for 1 s, every run opening 8 new
  connections; the table shows the connections each worker accepted in total
  and the largest share one worker got in a single run;
- busy: worker 0 is busy with other work 80% of the time (20 ms of CPU, 5 ms
  free, in a loop: a worker deep in heavy calls), the others are idle; a
  `wrk -c8` run of 3 s, repeated `--rounds` times: the connections worker 0
  accepted (their requests wait for its free moments) and the total req/s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import asyncio, json, os, signal, socket, sys, time
import uvloop

fd, reuseport_port, busy_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
out = sys.argv[4]
accepted = 0
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

class Http(asyncio.Protocol):
    def connection_made(self, transport):
        global accepted
        accepted += 1
        self.t = transport
        self.buf = b""
    def data_received(self, data):
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            _, self.buf = self.buf.split(b"\r\n\r\n", 1)
            self.t.write(ANSWER)

def burn():
    # Busy with other work 80% of the time: 20 ms of CPU, 5 ms free.
    end = time.perf_counter() + busy_ms / 1000
    while time.perf_counter() < end:
        pass
    asyncio.get_running_loop().call_later(0.005, burn)

async def main():
    if fd >= 0:
        sock = socket.socket(fileno=fd)
    else:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", reuseport_port))
        sock.listen(2048)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    server = await loop.create_server(Http, sock=sock)
    if busy_ms:
        loop.call_soon(burn)
    open(out + ".ready", "w").close()
    await stop.wait()
    server.close()
    with open(out, "w") as f:
        json.dump(accepted, f)

uvloop.run(main())
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(mode: str, workers: int, busy: bool, seconds: float, tmp: Path) -> tuple[list[int], float]:
    """One wrk -c8 run against fresh workers: connections each accepted, req/s."""
    port = free_port()
    shared: socket.socket | None = None
    if mode == "shared":
        shared = socket.socket()
        shared.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        shared.bind(("127.0.0.1", port))
        shared.listen(2048)
    procs = []
    outs = []
    for i in range(workers):
        out = tmp / f"{mode}-{i}-{time.monotonic_ns()}"
        outs.append(out)
        fd = shared.fileno() if shared is not None else -1
        argv = [sys.executable, "-c", CHILD, str(fd), str(port), "20" if busy and i == 0 else "0"]
        procs.append(
            subprocess.Popen([*argv, str(out)], pass_fds=(fd,) if shared is not None else ())
        )
    try:
        deadline = time.monotonic() + 20
        while not all(Path(str(o) + ".ready").exists() for o in outs):
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not start")
            time.sleep(0.05)
        wrk = subprocess.run(
            ["wrk", "-t1", "-c8", f"-d{seconds:g}s", f"http://127.0.0.1:{port}/"],
            capture_output=True,
            text=True,
            check=True,
        )
        match = re.search(r"Requests/sec:\s+([\d.]+)", wrk.stdout)
        rps = float(match.group(1)) if match else 0.0
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(10)
        if shared is not None:
            shared.close()
    return [json.loads(o.read_text()) for o in outs], rps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="accept-spread-") as name:
        tmp = Path(name)
        print(f"{args.workers} workers, wrk -c8; load average {os.getloadavg()[0]:.1f}")
        for mode in ("shared", "reuseport"):
            totals = [0] * args.workers
            worst = 0.0
            for _ in range(args.rounds):
                counts, _rps = run(mode, args.workers, False, 1, tmp)
                totals = [a + b for a, b in zip(totals, counts, strict=True)]
                worst = max(worst, max(counts) / max(1, sum(counts)))
            print(
                f"idle  {mode:<9} connections per worker {totals}, "
                f"largest share in one run {worst:.0%}"
            )
        for mode in ("shared", "reuseport"):
            slow, rates = [], []
            for _ in range(args.rounds):
                counts, rps = run(mode, args.workers, True, 3, tmp)
                slow.append(counts[0])
                rates.append(rps)
            print(
                f"busy  {mode:<9} connections on the slow worker per run {slow} "
                f"(of 8), req/s median {sorted(rates)[len(rates) // 2]:,.0f}"
            )


if __name__ == "__main__":
    main()
