"""Slow, partial and greedy clients cannot hurt the gateway (issue 7, defects 4,
5, 10 and 11).

Real processes on loopback: the legacy fixture (its own process, so its
change-notification floods reach no other module) and gateway processes
started here, one with a small file-descriptor limit (RLIMIT_NOFILE 256), short
read and write timeouts and a small connection bound, one with a short call
deadline. Hostile clients are raw sockets: half headers, bodies shorter than
their Content-Length, small receive buffers that are never read. What the
gateway holds is read from /proc/<pid> (open descriptors, VmRSS), what it
said from its JSON log, what reached the upstream from the fixture's ledger.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire

NOFILE = 256
READ_TIMEOUT_S = 2.0
WRITE_TIMEOUT_S = 1.5
MAX_CONNECTIONS = 64
DEADLINE_S = 2.0

GUARDED_ENV = {
    "MCP_SHIM_READ_TIMEOUT_S": str(READ_TIMEOUT_S),
    "MCP_SHIM_WRITE_TIMEOUT_S": str(WRITE_TIMEOUT_S),
    "MCP_SHIM_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
    # Within 256 descriptors: 2 x 10 parked + 64 spare upstream connections.
    "MCP_SHIM_MAX_PARKED": "10",
    "MCP_SHIM_MAX_UPSTREAM_CONNECTIONS": "84",
    "MCP_SHIM_LISTEN_KEEPALIVE_S": "0.5",
}


@dataclass
class Gateway:
    base: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def mcp(self) -> str:
        return self.base + "/mcp"

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def lines(self) -> list[dict[str, Any]]:
        return list(wire.log_lines(self.log))


@contextmanager
def start_gateway(
    upstream: str, log: Path, env: dict[str, str], nofile: int | None = None
) -> Iterator[Gateway]:
    port = procs.free_port()
    full_env = {
        **os.environ,
        "MCP_SHIM_UPSTREAM_URL": upstream,
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_LOG_LEVEL": "info",
        **env,
    }

    def limit_fds() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.serving.cli"],
            env=full_env,
            stdout=out,
            stderr=out,
            cwd=procs.ROOT,
            preexec_fn=limit_fds,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            procs.wait_until_up(base + "/healthz", proc)
            yield Gateway(base, proc, log)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def legacy(logs_dir: Path) -> Iterator[str]:
    with procs.legacy_server(procs.free_port(), log_path=logs_dir / "legacy-slow.log") as url:
        yield url


@pytest.fixture(scope="module")
def guarded(legacy: str, logs_dir: Path) -> Iterator[Gateway]:
    with start_gateway(legacy, logs_dir / "gateway-guarded.log", GUARDED_ENV, NOFILE) as gw:
        yield gw


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def call(url: str, name: str, arguments: dict[str, Any], timeout: float = 30.0) -> httpx.Response:
    message = wire.body("tools/call", {"name": name, "arguments": arguments})
    with httpx.Client(timeout=timeout) as client:
        return wire.post(client, url, message, wire.headers_for(message))


def echo_ok(url: str, timeout: float = 30.0) -> None:
    response = call(url, "echo", {"text": "still here"}, timeout)
    assert response.status_code == 200, response.text[:300]
    (answer,) = wire.answer_messages(response)
    assert answer["result"]["content"][0]["text"] == "still here"


def raw_request(port: int, message: dict[str, Any], *, rcvbuf: int | None = None) -> socket.socket:
    """A socket that sent one complete POST /mcp and will never read."""
    sock = socket.socket()
    if rcvbuf is not None:
        # Before connect, so the advertised window stays small.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    payload = json.dumps(message).encode()
    headers = wire.headers_for(message)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(
        f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{head}"
        f"content-length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    return sock


def closed_by_peer(sock: socket.socket, quiet_s: float = 1.0, cap: int = 64 << 20) -> bool:
    """Reads what is left: True if the gateway closed the connection (EOF or
    reset), False if it is still open (nothing more for `quiet_s`)."""
    sock.settimeout(quiet_s)
    received = 0
    try:
        while received < cap:
            data = sock.recv(1 << 20)
            if not data:
                return True
            received += len(data)
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return False


def wait_fds_at_most(gw: Gateway, limit: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        fds = gw.open_fds()
        if fds <= limit or time.monotonic() > deadline:
            return fds
        time.sleep(0.2)


# ---------------------------------------------------------------------------
# Defect 4: partial requests
# ---------------------------------------------------------------------------


def test_half_headers_get_408_after_the_read_timeout(guarded: Gateway) -> None:
    sock = socket.create_connection(("127.0.0.1", guarded.port))
    with sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        started = time.monotonic()
        sock.settimeout(READ_TIMEOUT_S + 5)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        elapsed = time.monotonic() - started
    assert READ_TIMEOUT_S - 0.2 <= elapsed < READ_TIMEOUT_S + 3, elapsed
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:200]
    error = json.loads(body)["error"]
    assert error["code"] == -32600
    assert "MCP_SHIM_READ_TIMEOUT_S" in error["message"]


def test_body_shorter_than_its_content_length_gets_408(guarded: Gateway) -> None:
    message = wire.body("tools/list")
    headers = wire.headers_for(message)
    rid = headers["x-request-id"]
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock = socket.create_connection(("127.0.0.1", guarded.port))
    with sock:
        sock.sendall(
            f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}content-length: 500\r\n\r\n".encode()
            + b'{"jsonrpc": "2.0",'
        )
        started = time.monotonic()
        sock.settimeout(READ_TIMEOUT_S + 5)
        answer = b""
        while chunk := sock.recv(65536):  # the gateway closes after answering
            answer += chunk
        elapsed = time.monotonic() - started
    assert elapsed < READ_TIMEOUT_S + 3, elapsed
    head_bytes, _, body = answer.partition(b"\r\n\r\n")
    assert head_bytes.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"connection: close" in head_bytes.lower()
    error = json.loads(body)["error"]
    assert error["code"] == -32600 and "MCP_SHIM_READ_TIMEOUT_S" in error["message"]
    line = wire.wait_for_log(guarded.log, rid, "request_refused")
    assert line["reason"] == "body_timeout" and line["status"] == 408


def _partial(port: int, kind: int) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(True)
    sock.connect(("127.0.0.1", port))
    if kind == 0:
        pass  # connects and says nothing
    elif kind == 1:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: appl")
    else:
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 4000\r\n\r\n{"
        )
    return sock


def test_partial_request_flood_does_not_lock_clients_out(guarded: Gateway) -> None:
    echo_ok(guarded.mcp)
    baseline = guarded.open_fds()
    flood = NOFILE + 100  # more sockets than the gateway has descriptors
    drip_stop = threading.Event()
    with ExitStack() as stack:
        sockets = []
        for i in range(flood):
            sock = stack.enter_context(_partial(guarded.port, i % 3))
            sockets.append(sock)
        # Slowloris: a few of them keep sending one header byte at a time.
        dripping = sockets[-5:]

        def drip() -> None:
            while not drip_stop.wait(0.2):
                for sock in dripping:
                    try:
                        sock.send(b"x")
                    except OSError:
                        pass

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        try:
            # A normal client is served at once: the oldest idle connection
            # makes room for it (at worst it would wait for the read timeout).
            started = time.monotonic()
            echo_ok(guarded.mcp, timeout=READ_TIMEOUT_S + 10)
            served_s = time.monotonic() - started
            assert served_s < READ_TIMEOUT_S + 5
            # The gateway never holds more than its bound, far below its limit.
            fds_under_flood = guarded.open_fds()
            assert fds_under_flood < NOFILE - 64
            print(
                f"{flood} partial requests: a normal call served in {served_s:.2f} s; "
                f"gateway descriptors {baseline} -> {fds_under_flood} (limit {NOFILE})"
            )
            # After the read timeout every partial request is gone, dripping or not.
            time.sleep(READ_TIMEOUT_S + 1.5)
            still_open = [s for s in sockets if not closed_by_peer(s, quiet_s=0.05)]
            assert still_open == [], f"{len(still_open)} partial requests still held"
        finally:
            drip_stop.set()
            dripper.join()
    assert wait_fds_at_most(guarded, baseline + 4, 10) <= baseline + 4
    assert httpx.get(guarded.base + "/healthz", timeout=5).status_code == 200
    echo_ok(guarded.mcp)
    lines = guarded.lines()
    limit_lines = [line for line in lines if line.get("event") == "connection_limit_reached"]
    assert limit_lines, "hitting the connection bound must be logged"
    assert limit_lines[0]["setting"] == "MCP_SHIM_MAX_CONNECTIONS"
    # Rate-limited: hundreds of refusals, a handful of lines, each with its count.
    assert len(limit_lines) <= 5
    assert sum(line["count_since_last"] for line in limit_lines) >= 1
    assert any(line.get("event") == "request_read_timeout" for line in lines)


# ---------------------------------------------------------------------------
# Defect 5: clients that never read
# ---------------------------------------------------------------------------


def _stalled_round(gw: Gateway, clients: int, size: int) -> tuple[float, float]:
    """`clients` raw sockets ask for `size` bytes each and never read; returns the
    gateway's RSS while they stall and once the gateway has closed them."""
    baseline_fds = gw.open_fds()
    text = "x" * size
    sockets = []
    try:
        for i in range(clients):
            message = wire.body("tools/call", {"name": "echo", "arguments": {"text": text}}, rid=i)
            sockets.append(raw_request(gw.port, message, rcvbuf=4096))
        # The answers are written while nobody reads; a normal client is unaffected.
        echo_ok(gw.mcp, timeout=60)
        stalled_rss = gw.rss_mb()
        # Every stalled connection is closed by the gateway (write timeout).
        fds = wait_fds_at_most(gw, baseline_fds + 2, 60)
        assert fds <= baseline_fds + 2, f"{fds - baseline_fds} stalled connections still open"
        assert all(closed_by_peer(sock, quiet_s=2.0) for sock in sockets)
        return stalled_rss, gw.rss_mb()
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.slow
def test_large_answers_to_clients_that_never_read_are_closed_and_freed(
    guarded: Gateway,
) -> None:
    echo_ok(guarded.mcp)
    baseline = guarded.rss_mb()
    clients, size = 20, 3 * 1024 * 1024
    rounds = [_stalled_round(guarded, clients, size) for _ in range(3)]
    print(f"RSS baseline {baseline:.0f} MB; (stalled, after close) per round: {rounds}")
    # What stalled clients cost is given back once they are closed: RSS does
    # not grow round after round. Holding each round's answers until their
    # clients left would add clients x size = 60 MB per round.
    round_mb = clients * size / (1 << 20)
    first_after = rounds[0][1]
    assert rounds[-1][1] - first_after < 1.5 * round_mb, rounds
    stalled = [line for line in guarded.lines() if line.get("event") == "client_stalled"]
    assert stalled and stalled[0]["setting"] == "MCP_SHIM_WRITE_TIMEOUT_S"
    echo_ok(guarded.mcp)


@pytest.mark.slow
def test_listen_streams_that_never_read_are_closed(guarded: Gateway) -> None:
    streams = 10
    baseline_fds = guarded.open_fds()
    sockets = []
    try:
        for i in range(streams):
            message = wire.body(
                "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, rid=i
            )
            sockets.append(raw_request(guarded.port, message, rcvbuf=4096))
        time.sleep(1.0)  # acknowledged, subscribed
        # Far more than socket buffers hold: each stream has megabytes to take.
        response = call(guarded.mcp, "burst_list_changed", {"count": 30000}, timeout=120)
        assert response.status_code == 200, response.text[:300]
        fds = wait_fds_at_most(guarded, baseline_fds + 2, 30)
        assert fds <= baseline_fds + 2, f"{fds - baseline_fds} stalled listen streams still open"
        assert all(closed_by_peer(sock, quiet_s=2.0) for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()
    echo_ok(guarded.mcp)


# ---------------------------------------------------------------------------
# Defect 10: Host handling, no redirects
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("[::1]evil.example", 400),
        ("127.0.0.1:80x", 400),
        ("evil.example", 403),
        ("localhost:8080", 200),
        ("[::1]:8080", 200),
    ],
)
def test_host_is_parsed_strictly(guarded: Gateway, host: str, status: int) -> None:
    message = wire.body("tools/list")
    headers = {**wire.headers_for(message), "host": host}
    with httpx.Client(timeout=10) as client:
        response = wire.post(client, guarded.mcp, message, headers)
    assert response.status_code == status, response.text[:300]
    if status != 200:
        assert response.json()["error"]["code"] == -32600


def test_trailing_slash_is_not_redirected(guarded: Gateway) -> None:
    message = wire.body("tools/list")
    headers = {**wire.headers_for(message), "host": "localhost"}
    with httpx.Client(timeout=10, follow_redirects=False) as client:
        response = wire.post(client, guarded.mcp + "/", message, headers)
    assert response.status_code == 404
    assert "location" not in response.headers
    error = response.json()["error"]
    assert error["code"] == -32600 and "/mcp" in error["message"]


# ---------------------------------------------------------------------------
# Defect 11: logs, the call deadline
# ---------------------------------------------------------------------------


def test_client_leaving_mid_upload_is_one_info_line(guarded: Gateway) -> None:
    message = wire.body("tools/list")
    headers = wire.headers_for(message)
    rid = headers["x-request-id"]
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    before = len(guarded.lines())
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        sock.sendall(
            f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}content-length: 5000\r\n\r\n".encode()
            + b'{"jsonrpc": "2.0", "id": 1,'
        )
        time.sleep(0.3)
    line = wire.wait_for_log(guarded.log, rid, "client_disconnected")
    assert line["level"] == "info"
    time.sleep(0.3)
    after = guarded.lines()[before:]
    assert [entry for entry in after if entry.get("level") == "error"] == []
    assert not any("Exception in ASGI" in str(entry.get("event")) for entry in after)


@pytest.fixture(scope="module")
def deadline_gateway(legacy: str, logs_dir: Path) -> Iterator[Gateway]:
    env = {"MCP_SHIM_CALL_DEADLINE_S": str(DEADLINE_S), "MCP_SHIM_LISTEN_KEEPALIVE_S": "0.5"}
    with start_gateway(legacy, logs_dir / "gateway-deadline.log", env) as gw:
        yield gw


def _cancellations(legacy: str) -> int:
    stats = httpx.get(legacy.removesuffix("/mcp") + "/debug/stats", timeout=10).json()
    return int(stats["toolCancellations"].get("slow_echo", 0))


def test_hung_upstream_call_ends_at_the_deadline(deadline_gateway: Gateway, legacy: str) -> None:
    cancelled_before = _cancellations(legacy)
    message = wire.body(
        "tools/call", {"name": "slow_echo", "arguments": {"ms": 60000, "steps": 1}}, rid="slow"
    )
    headers = wire.headers_for(message)
    started = time.monotonic()
    with httpx.Client(timeout=30) as client:
        response = wire.post(client, deadline_gateway.mcp, message, headers)
    elapsed = time.monotonic() - started
    assert DEADLINE_S - 0.1 <= elapsed < DEADLINE_S + 3, elapsed
    assert response.status_code == 504
    (answer,) = wire.answer_messages(response)
    assert answer["id"] == "slow"
    assert answer["error"]["code"] == -32603
    assert "MCP_SHIM_CALL_DEADLINE_S" in answer["error"]["message"]
    # The upstream call got notifications/cancelled.
    deadline = time.monotonic() + 10
    while _cancellations(legacy) <= cancelled_before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _cancellations(legacy) == cancelled_before + 1
    line = wire.wait_for_log(deadline_gateway.log, headers["x-request-id"], "call")
    assert line["status"] == 504 and line["outcome"] == "deadline_exceeded"
    # Everything was released: the next calls go through.
    for _ in range(3):
        echo_ok(deadline_gateway.mcp)


def test_listen_stream_outlives_the_call_deadline(deadline_gateway: Gateway) -> None:
    message = wire.body("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    headers = wire.headers_for(message)
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", deadline_gateway.mcp, content=json.dumps(message), headers=headers
        ) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        started = time.monotonic()
        while time.monotonic() - started < DEADLINE_S + 1.5:
            next(lines)  # acknowledgment, then keep-alive comments
        call(deadline_gateway.mcp, "add_tool", {"name": "after-deadline"})
        try:
            for line in lines:
                if "notifications/tools/list_changed" in line:
                    break
            else:
                raise AssertionError("the listen stream ended")
        finally:
            call(deadline_gateway.mcp, "remove_tool", {"name": "after-deadline"})
