"""What a small socket write costs the writer when its reader sleeps, and
when the reader is already running (app/write_coalescer.py).

    python bench/wake_cost.py [--writes 3000] [--gap-us 300] [--size 300]

A child process reads a loopback connection (TCP, then a Unix socket pair);
the parent writes `--size` bytes, either `--gap-us` apart (the reader has gone
back to sleep in `recv` by then: the write must wake it) or back to back (the
reader is still running). Prints the write call's median and mean time, which
is the writer's system time: waking a sleeping reader on another CPU is an
inter-processor interrupt, which a virtual machine pays dearly.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time


def _pair(kind: str) -> tuple[socket.socket, socket.socket]:
    if kind == "unix":
        return socket.socketpair(socket.AF_UNIX)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    writer = socket.create_connection(listener.getsockname())
    writer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader, _ = listener.accept()
    listener.close()
    return writer, reader


def _timed_writes(writer: socket.socket, message: bytes, writes: int, gap_s: float) -> list[float]:
    took = []
    for _ in range(writes):
        if gap_s:
            until = time.perf_counter() + gap_s
            while time.perf_counter() < until:  # busy: this process stays on its CPU
                pass
        started = time.perf_counter()
        writer.send(message)
        took.append(time.perf_counter() - started)
    return took


def measure(kind: str, writes: int, gap_s: float, size: int) -> dict[str, tuple[float, float]]:
    writer, reader = _pair(kind)
    child = os.fork()
    if child == 0:  # the reader: blocks in recv between messages
        writer.close()
        while reader.recv(65536):
            pass
        os._exit(0)
    reader.close()
    message = b"x" * size
    try:
        results = {}
        for label, gap in (("reader asleep", gap_s), ("reader running", 0.0)):
            took = _timed_writes(writer, message, writes, gap)
            results[label] = (statistics.median(took) * 1e6, statistics.fmean(took) * 1e6)
        return results
    finally:
        writer.close()
        os.waitpid(child, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=3000)
    parser.add_argument("--gap-us", type=float, default=300.0)
    parser.add_argument("--size", type=int, default=300)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; {args.writes} writes of {args.size} bytes per row")
    for kind in ("tcp", "unix"):
        for label, (median, mean) in measure(
            kind, args.writes, args.gap_us / 1e6, args.size
        ).items():
            print(f"{kind:4s}  {label:15s}  median {median:5.1f} us  mean {mean:5.1f} us")


if __name__ == "__main__":
    main()
