"""A stdio server's process: how it is started (its environment, its own
process group, a parent death signal, its cgroup joined before exec), its
pipes (stdout cut into lines in the pipe's own callback, stderr logged
sparingly with its last lines kept) and the signals that end its group.
What the process means to the gateway (one legacy session) is session.py's;
how many run and when one is stopped, transport.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import structlog

from app.upstream.errors import UpstreamUnavailable

log = structlog.get_logger("mcp_shim.stdio")

# What the child inherits from the gateway's environment besides the allow-list.
BASE_ENV = ("PATH", "HOME", "LANG")
# One JSON-RPC line from the server; beyond it the process is stopped (a tool
# result of this size is already far past what a client would accept).
MAX_LINE_BYTES = 64 * 1024 * 1024
# stderr: lines are cut to this many characters, logged at most this rate.
STDERR_LINE_CHARS = 500
STDERR_LINES_PER_S = 20.0
STDERR_BURST = 50
STDERR_TAIL = 20  # last lines kept for the exit log


class StdioProcessExited(UpstreamUnavailable):
    """The stdio server process ended (or was stopped) while a message waited on it."""


def child_environment(source: Mapping[str, str], allowed: Sequence[str]) -> dict[str, str]:
    """The child's whole environment: PATH, HOME, LANG and the allow-listed names
    that are set. Nothing else of the gateway's (its MCP_SHIM_* secrets above all)."""
    env = {name: source[name] for name in (*BASE_ENV, *allowed) if name in source}
    env.setdefault("PATH", os.defpath)
    return env


_PR_SET_PDEATHSIG = 1
# Looked up here, not in the child: between fork and exec only the call is safe.
_prctl: Any = None
if sys.platform.startswith("linux"):
    with contextlib.suppress(Exception):
        _prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    # The child gets SIGKILL when the gateway thread that started it dies, so even
    # a gateway killed with SIGKILL leaves no server behind.
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _prepare_child(cgroup_fd: int | None) -> None:  # pragma: no cover - in the child
    _die_with_parent()
    if cgroup_fd is not None:
        # Into its cgroup before exec, so all it starts is in it from the first.
        with contextlib.suppress(OSError):
            os.write(cgroup_fd, b"0")


def killpg(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def start_process(
    argv: Sequence[str], env: Mapping[str, str], cgroup_fd: int | None, cwd: str | None = None
) -> tuple[asyncio.subprocess.Process, ServerPipes]:
    """The server command started with its pipes; into the cgroup whose
    `cgroup.procs` is `cgroup_fd` before exec, when there is one. OSError:
    it could not be."""
    loop = asyncio.get_running_loop()
    process, pipes = await loop.subprocess_exec(
        functools.partial(ServerPipes, loop),
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,  # its own process group: stopped as a whole
        preexec_fn=functools.partial(_prepare_child, cgroup_fd),
    )
    return asyncio.subprocess.Process(process, pipes, loop), pipes


class LineReader(Protocol):
    """Where a server's stdout lines go (a StdioSession)."""

    @property
    def pid(self) -> int: ...

    def stdout_line(self, line: bytes) -> None: ...

    def stdout_unreadable(self, reason: str) -> None: ...


class ServerPipes(asyncio.subprocess.SubprocessStreamProtocol):
    """A server process's pipes as asyncio keeps them (stdin a StreamWriter,
    stderr a StreamReader, the exit for `Process.wait()`), except stdout: its
    lines are split in the pipe's own callback and handed to the session there,
    in the loop iteration that read them. Through a StreamReader, each line
    woke a reading task, which ran one iteration later and only then handed
    the answer on, to wake its caller one iteration later still: an iteration
    (an `epoll_wait`, a task step, a future) more per answer.

    What arrives before the session is attached (a banner at start-up) is held
    until it is. A line longer than MAX_LINE_BYTES is not gathered: the session
    is told, and what follows is dropped. `stdout_ended` resolves once stdout
    is at its end, or unreadable, after every line before it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=MAX_LINE_BYTES, loop=loop)
        self.stdout_ended: asyncio.Future[None] = loop.create_future()
        # Why stdout is read no further, once it is not.
        self.unreadable: str | None = None
        self._session: LineReader | None = None
        self._partial = bytearray()
        self._held = bytearray()

    def attach(self, session: LineReader) -> None:
        self._session = session
        if self.unreadable is not None:
            session.stdout_unreadable(self.unreadable)
        elif self._held:
            held = bytes(self._held)
            self._held.clear()
            if self.stdout_ended.done() and not held.endswith(b"\n"):
                held += b"\n"  # ended before the session came: its last line whole
            self._read(held)

    def pipe_data_received(self, fd: int, data: bytes) -> None:  # type: ignore[override]
        if fd != 1:
            super().pipe_data_received(fd, data)
        elif self.unreadable is not None:
            return
        elif self._session is None:
            self._held += data
            if len(self._held) > MAX_LINE_BYTES:
                self._stop_reading(f"it wrote a line longer than {MAX_LINE_BYTES} bytes")
        else:
            self._read(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        super().pipe_connection_lost(fd, exc)
        if fd != 1 or self.stdout_ended.done():
            return
        if self._partial and self.unreadable is None and self._session is not None:
            # A last line without its end is handed on whole, as readline() did.
            last = bytes(self._partial)
            self._partial.clear()
            self._read(last + b"\n")
        self.stdout_ended.set_result(None)

    def _read(self, data: bytes) -> None:
        session = self._session
        assert session is not None
        try:
            self._lines(session, data)
        except Exception:
            # The server's bytes are parsed where their faults are caught: this is
            # a fault of ours, which must not leave the process half read.
            log.exception("upstream_stdout_failed", pid=session.pid)
            self._stop_reading("the gateway failed to read its stdout")

    def _lines(self, session: LineReader, data: bytes) -> None:
        partial = self._partial
        end = data.find(b"\n")
        start = 0
        if partial and end >= 0:
            partial += data[:end]
            line = bytes(partial)
            partial.clear()
            if len(line) > MAX_LINE_BYTES:
                self._stop_reading(f"it wrote a line longer than {MAX_LINE_BYTES} bytes")
                return
            session.stdout_line(line)
            start = end + 1
            end = data.find(b"\n", start)
        while end >= 0:
            if end - start > MAX_LINE_BYTES:
                self._stop_reading(f"it wrote a line longer than {MAX_LINE_BYTES} bytes")
                return
            session.stdout_line(data[start:end])
            start = end + 1
            end = data.find(b"\n", start)
        if start < len(data):
            partial += data[start:]
            if len(partial) > MAX_LINE_BYTES:
                self._stop_reading(f"it wrote a line longer than {MAX_LINE_BYTES} bytes")

    def _stop_reading(self, reason: str) -> None:
        if self.unreadable is not None:
            return
        self.unreadable = reason
        self._partial.clear()
        self._held.clear()
        if self._session is not None:
            self._session.stdout_unreadable(reason)
        if not self.stdout_ended.done():
            self.stdout_ended.set_result(None)


async def read_stderr(proc: asyncio.subprocess.Process, tail: deque[str]) -> None:
    """The server's log, until its stderr ends: each line cut to
    STDERR_LINE_CHARS, logged at most STDERR_LINES_PER_S (bursts of
    STDERR_BURST; the lines dropped are counted), the last ones kept in `tail`."""
    stderr = proc.stderr
    assert stderr is not None
    buffer = bytearray()
    tokens = float(STDERR_BURST)
    refilled = time.monotonic()
    dropped = 0
    while True:
        try:
            chunk = await stderr.read(65536)
        except (ConnectionError, OSError):
            chunk = b""
        if not chunk:
            lines = [bytes(buffer)] if buffer else []
            buffer.clear()
        else:
            buffer += chunk
            *lines, rest = bytes(buffer).split(b"\n")
            buffer[:] = rest[: STDERR_LINE_CHARS * 4]  # a line without end stays bounded
        for raw in lines:
            text = raw.decode("utf-8", "replace").rstrip()[:STDERR_LINE_CHARS]
            if not text:
                continue
            tail.append(text)
            now = time.monotonic()
            tokens = min(STDERR_BURST, tokens + (now - refilled) * STDERR_LINES_PER_S)
            refilled = now
            if tokens < 1:
                dropped += 1
                continue
            tokens -= 1
            if dropped:
                log.info("upstream_stderr_dropped", pid=proc.pid, lines=dropped)
                dropped = 0
            log.info("upstream_stderr", pid=proc.pid, line=text)
        if not chunk:
            if dropped:
                log.info("upstream_stderr_dropped", pid=proc.pid, lines=dropped)
            return
