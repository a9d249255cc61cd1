"""Fan-out latency of subscriptions/listen: one upstream list_changed to N streams.

    .venv/bin/python bench/listen.py [--streams 1000] [--rounds 5]

Starts the legacy fixture server (mcp 1.x, .peers/legacy) and a gateway in
front of it, opens N `subscriptions/listen {toolsListChanged: true}` streams
through the gateway (all with the same capabilities and no credentials, so
they share one legacy session and one upstream GET stream), and then, per
round, makes the fixture emit one `notifications/tools/list_changed`.

The bench holds its own legacy session on the fixture with its own GET
stream: the moment the notification arrives there is the reference "the
upstream sent it" (t0). For every listen stream it records when the tagged
notification arrived (t); the figures are t - t0 over all streams: p50, p99,
max. The trigger is `burst_list_changed {count: 1}` posted straight to the
fixture on the bench's session, so no gateway request sits in the path.

The client side uses plain asyncio sockets (one task per stream, no HTTP
library) to keep its own overhead small; on a 2-core machine client and
gateway still share the CPUs, which is included in the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import statistics
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import ACCEPT, INITIALIZED, LEGACY, initialize
from tests import procs

MODERN = "2026-07-28"
MARK = b"notifications/tools/list_changed"
ACK = b"notifications/subscriptions/acknowledged"
ARRIVED = asyncio.Event()  # set by every reader that saw a notification


def _request(port: int, path: str, headers: dict[str, str], body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + b"\r\n" + body


def _listen_request(port: int, rid: int) -> bytes:
    body = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "subscriptions/listen",
            "params": {
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
                "notifications": {"toolsListChanged": True},
            },
        }
    )
    headers = {
        "content-type": "application/json",
        "accept": ACCEPT,
        "mcp-protocol-version": MODERN,
        "mcp-method": "subscriptions/listen",
    }
    return _request(port, "/mcp", headers, body)


class Stream:
    """One listen stream on a raw socket; records when each round's notification lands."""

    def __init__(self, rid: int) -> None:
        self.rid = rid
        self.acked = asyncio.Event()
        self.ack_s = 0.0
        self.arrivals: list[float] = []
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self, port: int) -> None:
        started = time.perf_counter()
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        self.writer.write(_listen_request(port, self.rid))
        await self.writer.drain()
        buffer = b""
        while ACK not in buffer:
            chunk = await self.reader.read(65536)
            if not chunk:
                raise RuntimeError(f"listen {self.rid} closed before its ack: {buffer[-300:]!r}")
            buffer += chunk
        self.ack_s = time.perf_counter() - started
        self.acked.set()

    async def pump(self) -> None:
        assert self.reader is not None
        while chunk := await self.reader.read(65536):
            now = time.perf_counter()
            self.arrivals.extend([now] * chunk.count(MARK))
            ARRIVED.set()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class LegacyPeer:
    """The bench's own legacy session on the fixture: its GET stream is the reference clock."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.headers: dict[str, str] = {}
        self.arrivals: list[float] = []
        self._get: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def _post(self, message: dict[str, object]) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        headers = {"content-type": "application/json", "accept": ACCEPT, "connection": "close"}
        writer.write(
            _request(self.port, "/mcp", {**headers, **self.headers}, orjson.dumps(message))
        )
        await writer.drain()
        answer = await reader.read()
        writer.close()
        return answer

    async def start(self) -> None:
        answer = await self._post(initialize("bench-listen"))
        head = answer.split(b"\r\n\r\n", 1)[0].decode()
        sid = next(
            line.split(":", 1)[1].strip()
            for line in head.split("\r\n")
            if line.lower().startswith("mcp-session-id:")
        )
        self.headers = {"mcp-session-id": sid, "mcp-protocol-version": LEGACY}
        await self._post(INITIALIZED)
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        head_lines = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
        writer.write(
            f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"accept: text/event-stream\r\n{head_lines}\r\n".encode()
        )
        await writer.drain()
        self._get = (reader, writer)

    async def pump(self) -> None:
        assert self._get is not None
        reader = self._get[0]
        while chunk := await reader.read(65536):
            now = time.perf_counter()
            self.arrivals.extend([now] * chunk.count(MARK))
            ARRIVED.set()

    async def trigger(self) -> None:
        await self._post(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "burst_list_changed", "arguments": {"count": 1}},
            }
        )

    def close(self) -> None:
        if self._get is not None:
            self._get[1].close()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def _bench(gateway_port: int, fixture_port: int, streams: int, rounds: int) -> None:
    peer = LegacyPeer(fixture_port)
    await peer.start()
    tasks = [asyncio.create_task(peer.pump())]

    listeners = [Stream(i) for i in range(1, streams + 1)]
    opened = time.perf_counter()
    # Open in batches so the connect backlog is not the thing being measured.
    for start in range(0, streams, 100):
        await asyncio.gather(*(s.open(gateway_port) for s in listeners[start : start + 100]))
    open_s = time.perf_counter() - opened
    acks = [s.ack_s * 1000 for s in listeners]
    tasks += [asyncio.create_task(s.pump()) for s in listeners]
    await asyncio.sleep(1.0)

    print(
        f"{streams} listen streams opened in {open_s:.2f} s "
        f"(ack p50 {statistics.median(acks):.1f} ms, p99 {_pct(acks, 0.99):.1f} ms)"
    )
    print(
        f"{'round':>5} {'min ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'received':>9}   "
        f"{'t0-trigger':>9} {'trigger->all':>12}"
    )
    all_latencies: list[float] = []
    all_from_trigger: list[float] = []
    for n in range(rounds):
        before = len(peer.arrivals)
        sent = time.perf_counter()
        await peer.trigger()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                while len(peer.arrivals) <= before or any(len(s.arrivals) <= n for s in listeners):
                    ARRIVED.clear()
                    await ARRIVED.wait()
        t0 = peer.arrivals[before]
        latencies = [(s.arrivals[n] - t0) * 1000 for s in listeners if len(s.arrivals) > n]
        all_latencies += latencies
        from_trigger = [(s.arrivals[n] - sent) * 1000 for s in listeners if len(s.arrivals) > n]
        all_from_trigger += from_trigger
        print(
            f"{n + 1:>5} {min(latencies):>8.2f} {statistics.median(latencies):>8.2f} "
            f"{_pct(latencies, 0.99):>8.2f} "
            f"{max(latencies):>8.2f} {len(latencies):>5}/{streams}   "
            f"{(t0 - sent) * 1000:>9.2f} {max(from_trigger):>12.2f}"
        )
        await asyncio.sleep(0.5)
    print(
        f"{'all':>5} {min(all_latencies):>8.2f} {statistics.median(all_latencies):>8.2f} "
        f"{_pct(all_latencies, 0.99):>8.2f} {max(all_latencies):>8.2f} "
        f"{len(all_latencies):>5}/{streams * rounds}   {'':>9} {max(all_from_trigger):>12.2f}"
    )
    for s in listeners:
        s.close()
    peer.close()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.streams + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    logs = Path("results")
    logs.mkdir(exist_ok=True)
    fixture_port, gateway_port = procs.free_port(), procs.free_port()
    upstream = f"http://127.0.0.1:{fixture_port}/mcp"
    fixture_argv = [
        str(procs.require_peer(procs.LEGACY_PY)),
        str(procs.FIXTURE),
        "--port",
        str(fixture_port),
    ]
    env = {
        "MCP_SHIM_UPSTREAM_URL": upstream,
        "MCP_SHIM_PORT": str(gateway_port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_WORKERS": "1",  # one process: bench/workers.py measures more
        "MCP_SHIM_LOG_LEVEL": "warning",
    }
    with (
        procs.running(fixture_argv, upstream, log_path=logs / "bench-listen-legacy.log"),
        procs.running(
            [sys.executable, "-m", "app.serving.cli"],
            f"http://127.0.0.1:{gateway_port}/healthz",
            env=env,
            log_path=logs / "bench-listen-gateway.log",
        ),
    ):
        print(
            f"subscriptions/listen fan-out: one upstream tools/list_changed to {args.streams} "
            f"streams, {args.rounds} rounds (latency from the fixture's own GET stream)"
        )
        asyncio.run(_bench(gateway_port, fixture_port, args.streams, args.rounds))


if __name__ == "__main__":
    main()
