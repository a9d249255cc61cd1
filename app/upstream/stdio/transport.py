"""stdio upstreams: an MCP server the gateway starts itself, one process per session.

The stdio transport (2025-03-26 .. 2025-11-25 basic/transports) is one stream
of newline-delimited JSON-RPC messages each way on the child's stdin and
stdout; stderr is the server's log. A process serves one client, so here a
process *is* one legacy session: `StdioTransport.open_session` spawns it and
runs `initialize` / `notifications/initialized`, and the session pool and the
MRTR lanes above use it as they use a Streamable HTTP session (same keys, same
lanes), with no lock anywhere: any number of calls run on one process at once.

Where a message goes, since stdio carries nothing but the message:

- a response goes to the exchange of its request id;
- `notifications/progress` to the exchange whose request carried its token;
- a server request, and `notifications/message`, to the one call (`tools/call`,
  `prompts/get`, `resources/read`) in flight when there is exactly one (always
  so on an MRTR lane): only that call can have caused it, and the gateway then
  treats it as one on a call's HTTP stream (the bridge asks the client; a
  caller without the capability gets -32021);
- otherwise, and for other notifications, to the session's `listen()` stream
  when one is open (the MRTR lane's listener, the subscriptions hub), which is
  what a legacy HTTP session's standalone GET stream carries. With no stream
  open, notifications are dropped and requests get the listener's
  `default_answer` (`ping` answered, anything else refused), so the server
  never waits for an answer that cannot come.

A process that exits, or stops answering (silent for `liveness_s` with calls
in flight and no answer to a ping within as long), fails its calls in flight
at once with `StdioProcessExited`; the session is gone (`request` raises
`SessionExpired`, so the pool and the lanes open a new process, with backoff
after repeated failures). Stopping is always the same: stdin closed, SIGTERM
to the process group after a grace period, SIGKILL after another. Children
start in their own process group, so the whole group goes, and with a parent
death signal, so a gateway that dies leaves no orphan either.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import functools
import itertools
import os
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import structlog

from app import jsonio, write_coalescer
from app.quoting import quoted
from app.upstream.base import Message, OwnerEnd, SharedFlag
from app.upstream.errors import (
    PoolExhausted,
    SessionExpired,
    SessionShareExceeded,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.pool import credential_hash
from app.upstream.routing import Exchange, Router, id_key, initialize_result
from app.upstream.stdio import room
from app.upstream.stdio.containment import Cgroup, OrphanReaper, ServerCgroups

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
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 10.0


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


def _killpg(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# The routing (app/upstream/routing.py) is the same as HTTP+SSE's: one exchange class.
StdioExchange = Exchange


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
        self._session: StdioSession | None = None
        self._partial = bytearray()
        self._held = bytearray()

    def attach(self, session: StdioSession) -> None:
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

    def _lines(self, session: StdioSession, data: bytes) -> None:
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


class StdioSession:
    """One server process: one legacy session."""

    session_id: str | None = None

    def __init__(
        self,
        transport: StdioTransport,
        proc: asyncio.subprocess.Process,
        pipes: ServerPipes,
        *,
        request_timeout_s: float,
        liveness_s: float,
        credentials: str,
    ) -> None:
        self._transport = transport
        self.proc = proc
        self._pipes = pipes
        self.pid = proc.pid
        self.credentials = credentials  # whose share of the processes it counts in
        # A legacy client's own session (SessionPool.open_owned): its client holds
        # state on it, so it is stopped to make room only by its owner, through
        # `end_owned`, which ends the client's session with it (False: busy).
        self.owned = False
        self.end_owned: OwnerEnd | None = None
        # Where it and all it starts run, when the gateway could make one (containment.py).
        self.cgroup: Cgroup | None = None
        self._request_timeout_s = request_timeout_s
        self._liveness_s = liveness_s
        self._routes = Router(
            "stdio upstream", initialized=lambda: self.initialized, respond=self.respond
        )
        self.gone: UpstreamError | None = None  # set once the process is (being) stopped
        self.closing = False
        self.started_at = time.monotonic()
        self.last_active = time.monotonic()
        self._last_output = time.monotonic()
        self.initialized = False  # set once initialize / initialized went through
        # Until its opener's first request is sent: between the open and that request
        # it has nothing in flight, yet it is no idle process to stop for room.
        self.unused = True
        self.proven = False  # answered a request after initialize
        self.failure_counted = False  # in the transport's backoff
        self.not_json = 0  # stdout lines that were not JSON-RPC
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        # Since the last notifications/cancelled written, the ids of the requests
        # written after it; None once one of them was answered (the process
        # survived it) or before any cancellation.
        self._unconfirmed: set[tuple[str, Any]] | None = None
        self._ping_ids = itertools.count(1)
        loop = asyncio.get_running_loop()
        # The lines of one loop iteration go to the server's stdin as one write at
        # the next (app/write_coalescer.py): a write to a server asleep in its
        # read wakes it, and the writer pays for that waking, once per write.
        self._writes = write_coalescer.for_loop(loop)
        # A fresh context: the process outlives the request that started it, and its
        # log lines must not carry that request's id.
        self._tasks = [
            loop.create_task(coro, context=contextvars.Context())
            for coro in (self._read_stdout(), self._read_stderr(), self._watch())
        ]
        self.exited = loop.create_task(self._wait_exit(), context=contextvars.Context())
        pipes.attach(self)  # last: what it holds is dispatched now

    # -- the seam -----------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._routes.pending)

    @property
    def listening(self) -> bool:
        return self._routes.listening is not None

    @property
    def stopped(self) -> bool:
        return self.gone is not None

    async def request(self, message: Message) -> StdioExchange:
        if self.gone is not None or self.closing:
            # Never written: its handler never ran, a new process may take it.
            raise SessionExpired("the stdio upstream process has ended")
        exchange = self._routes.open(message, self._request_timeout_s)
        self.last_active = time.monotonic()
        if self.initialized:
            self.unused = False  # in flight from here: counted as such until it ends
        try:
            await self._write(message, quoted(exchange.what))
        except BaseException:
            self._routes.forget(exchange)
            raise
        if self._unconfirmed is not None:
            self._unconfirmed.add(id_key(message.get("id")))
        return exchange

    async def notify(self, message: Message) -> None:
        cancelling = message.get("method") == "notifications/cancelled"
        if cancelling and not self._transport.cancels:
            # Withheld (MCP_SHIM_STDIO_CANCEL): the call ends here all the same,
            # and the server's answer, when it comes, is dropped.
            self._routes.cancelled(message)
            return
        await self._write(message, quoted(message.get("method")))
        if cancelling:
            self._unconfirmed = set()
        self._routes.cancelled(message)

    async def respond(self, message: Message) -> None:
        await self._write(message, "a response to a server request")

    async def listen(self, last_event_id: str | None = None) -> StdioExchange:
        if self.gone is not None or self.closing:
            raise SessionExpired("the stdio upstream process has ended")
        return self._routes.listen()

    def mark_owned(self, end: OwnerEnd | None = None) -> None:
        self.owned = True
        self.end_owned = end

    def close_stdin(self) -> None:
        """End of input for the server, after the lines still queued for it."""
        stdin = self.proc.stdin
        if stdin is not None:
            self._writes.flush(stdin.transport)
            with contextlib.suppress(Exception):
                stdin.close()

    async def close(self) -> None:
        """Stop the process (stdin closed, then SIGTERM, then SIGKILL), in the background:
        the transport waits for it at shutdown, and counts it until it is gone."""
        if self.closing:
            return
        self.closing = True
        self._transport.stop_in_background(self)

    # -- writing ------------------------------------------------------------------

    async def _write(self, message: Message, what: str) -> None:
        if self.gone is not None:
            raise self.gone
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            # Whole lines, queued in order: concurrent writers never interleave.
            transport = stdin.transport
            self._writes.write(transport, jsonio.dumps(message) + b"\n")
            # A server that stops reading its stdin stops answering too (a line
            # queued here meets the pipe's flow control at the next write). With
            # nothing buffered in the pipe's transport its writing is not paused
            # (it resumes below the low-water mark): no wait, and no timer to arm.
            if transport.get_write_buffer_size() or transport.is_closing():
                async with asyncio.timeout(self._liveness_s):
                    await stdin.drain()
        except TimeoutError:
            self.stop(f"it stopped reading its stdin (sending {what})")
            raise self.gone or StdioProcessExited("stdio upstream stopped") from None
        except (ConnectionError, OSError, RuntimeError) as exc:
            raise self.gone or StdioProcessExited(
                f"stdio upstream process could not receive {what}: {type(exc).__name__}"
            ) from None

    # -- reading ------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        """Until stdout ends: its lines come through `stdout_line`, from the pipe's
        own callback (ServerPipes)."""
        await self._pipes.stdout_ended
        if self._pipes.unreadable is not None:
            return  # stopped for it
        # Usually the process is ending: let its exit code tell what happened.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5):
                await self.proc.wait()
        if self.proc.returncode is None and self.gone is None and not self.closing:
            # The spec lets a server end the session by closing its output.
            self.stop("it closed its stdout", graceful=True)

    def stdout_unreadable(self, reason: str) -> None:
        self.stop(reason)

    def stdout_line(self, line: bytes) -> None:
        """One line of stdout, without its end, in the callback that read it."""
        self._last_output = time.monotonic()
        line = line.strip()
        if not line:
            return
        try:
            parsed = jsonio.loads(line)
        except (jsonio.JSONDecodeError, UnicodeDecodeError):
            # Skipped (some servers print banners there); logged sparingly.
            self.not_json += 1
            if self.not_json <= 5 or self.not_json % 1000 == 0:
                log.info(
                    "upstream_stdout_not_json",
                    pid=self.pid,
                    length=len(line),
                    count=self.not_json,
                )
            return
        for message in parsed if isinstance(parsed, list) else [parsed]:
            if isinstance(message, dict):
                self._dispatch(message)

    def _dispatch(self, message: Message) -> None:
        unconfirmed = self._unconfirmed
        if unconfirmed and "method" not in message and id_key(message.get("id")) in unconfirmed:
            self._unconfirmed = None  # it read on after the cancellation
        if self._routes.dispatch(message) and self.initialized and not self.proven:
            self.proven = True
            self._transport.proven()

    async def _read_stderr(self) -> None:
        stderr = self.proc.stderr
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
                self.stderr_tail.append(text)
                now = time.monotonic()
                tokens = min(STDERR_BURST, tokens + (now - refilled) * STDERR_LINES_PER_S)
                refilled = now
                if tokens < 1:
                    dropped += 1
                    continue
                tokens -= 1
                if dropped:
                    log.info("upstream_stderr_dropped", pid=self.pid, lines=dropped)
                    dropped = 0
                log.info("upstream_stderr", pid=self.pid, line=text)
            if not chunk:
                if dropped:
                    log.info("upstream_stderr_dropped", pid=self.pid, lines=dropped)
                return

    # -- liveness -----------------------------------------------------------------

    async def _watch(self) -> None:
        """Calls in flight and nothing heard for `liveness_s`: ping; no answer within
        as long again: the process stopped answering and is stopped."""
        while self.gone is None:
            await asyncio.sleep(self._liveness_s / 4)
            if not self._routes.pending or self.closing:
                continue
            if time.monotonic() - self._last_output < self._liveness_s:
                continue
            ping = {"jsonrpc": "2.0", "id": f"shim-ping-{next(self._ping_ids)}", "method": "ping"}
            try:
                exchange = await self.request(ping)
            except UpstreamError:
                return
            try:
                async with asyncio.timeout(self._liveness_s):
                    async for _ in exchange:
                        pass
            except TimeoutError:
                self.stop(f"it did not answer a ping within {self._liveness_s:g}s")
                return
            except UpstreamError:
                return
            finally:
                await exchange.aclose()

    # -- the end ------------------------------------------------------------------

    def stop(self, reason: str, *, graceful: bool = False) -> None:
        """The process is of no further use: fail what waits on it now, and end it."""
        if self.gone is None:
            self.gone = StdioProcessExited(f"stdio upstream process stopped: {reason}")
            log.warning("upstream_process_stopping", pid=self.pid, reason=reason)
            self._routes.fail_all(self.gone)
        if graceful:
            self.closing = True
            self._transport.stop_in_background(self)
        else:
            self.kill()

    def kill(self) -> None:
        """SIGKILL to its process group and to everything in its cgroup."""
        _killpg(self.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill()

    def signal_all(self, sig: signal.Signals) -> None:
        _killpg(self.pid, sig)
        if self.cgroup is not None:
            self.cgroup.signal(sig)

    async def _wait_exit(self) -> int:
        code = await self.proc.wait()
        # Whatever the server started in its group (and its cgroup) goes with it.
        self.kill()
        # What it wrote just before exiting (last responses, last stderr lines) is read.
        await asyncio.wait(self._tasks[:2], timeout=1.0)
        for task in self._tasks:
            task.cancel()
        if self.gone is None:
            self.gone = StdioProcessExited(
                f"stdio upstream process exited with code {code}"
                if code >= 0
                else f"stdio upstream process was killed by signal {-code}"
            )
        self._routes.fail_all(self.gone)
        expected = self.closing
        fields: dict[str, Any] = {
            "pid": self.pid,
            "exit_code": code,
            "lived_s": round(time.monotonic() - self.started_at, 2),
        }
        after_cancel = not expected and self._unconfirmed is not None
        if expected:
            log.info("upstream_process_ended", **fields)
        else:
            if after_cancel:
                fields["after_cancellation"] = True
            log.warning("upstream_process_exited", **fields, stderr_tail=list(self.stderr_tail))
        self._transport.exited(self, expected=expected)
        if after_cancel:
            self._transport.exited_after_cancel(self)
        if self.cgroup is not None:
            await self.cgroup.remove()
        return code


class StdioTransport:
    """Starts the server command, one process per session, at most `max_processes`,
    at most `max_per_credential` of them for one credential (the hash of an
    `Authorization` value; all anonymous callers together)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        max_processes: int,
        start_timeout_s: float,
        slot_wait_s: float,
        request_timeout_s: float,
        liveness_s: float,
        max_per_credential: int | None = None,
        stdin_grace_s: float = 2.0,
        term_grace_s: float = 2.0,
        cancel: Literal["auto", "always", "never"] = "auto",
        contain: bool = False,
    ) -> None:
        """`cancel`: MCP_SHIM_STDIO_CANCEL (auto, always, never). `contain`: the
        gateway's own transport (not a test's in a shared process): a cgroup per
        server where one is writable, and the gateway a subreaper that reaps
        and, at shutdown, ends what its servers leave behind."""
        self._argv = list(argv)
        self._env = dict(env)
        self.max_processes = max_processes
        self.max_per_credential = min(max_per_credential or max_processes, max_processes)
        self._start_timeout_s = start_timeout_s
        self._slot_wait_s = slot_wait_s
        self._request_timeout_s = request_timeout_s
        self._liveness_s = liveness_s
        self._stdin_grace_s = stdin_grace_s
        self._term_grace_s = term_grace_s
        self._cancel = cancel
        # Whether a call its caller abandoned is cancelled on its server. Optional
        # in the legacy revisions (2025-11-25 basic/utilities/cancellation), and
        # some servers die of it: the Python SDK 1.x's session can end on a
        # cancellation that races its answer, and its process then exits at
        # the next line it reads (python-sdk issue 2610), failing every other
        # caller's call on it. Under "auto", the first process that exits after
        # a cancellation, with no later request answered, ends them: in every
        # worker, through `_cancel_stop` when the workers share one.
        self._cancels = cancel != "never"
        self._cancel_stop: SharedFlag | None = None
        self._live: set[StdioSession] = set()
        self._starting = 0
        # Processes running or starting, per credential hash.
        self._held: Counter[str] = Counter()
        self._freed = asyncio.Event()
        self._stoppers: dict[StdioSession, asyncio.Task[None]] = {}
        self._failures = 0
        self._not_before = 0.0
        self._closed = False
        self._spawning = 0
        self._cgroups: ServerCgroups | None = None
        self._reaper: OrphanReaper | None = None
        # Every server process asyncio has yet to reap, from the moment it exists:
        # a server that exits before it is counted live (or after it is no longer)
        # is still asyncio's to wait for, and the reaper must not take its status.
        self._unreaped: set[asyncio.subprocess.Process] = set()
        if contain:
            self._contain()

    def _contain(self) -> None:
        self._cgroups, why_not = ServerCgroups.find()
        self._reaper = OrphanReaper(self._server_pids)
        if self._cgroups is not None:
            log.info("stdio_containment", mechanism="cgroup", cgroup=str(self._cgroups.parent))
        else:
            # A setsid() descendant escapes its server's stop, until the gateway stops.
            log.info("stdio_containment", mechanism="process_group", reason=why_not)

    def _server_pids(self) -> list[int] | None:
        """The children asyncio waits for; None while one is being started."""
        if self._spawning:
            return None
        self._unreaped = {proc for proc in self._unreaped if proc.returncode is None}
        return [proc.pid for proc in self._unreaped]

    def server_pids(self) -> list[int]:
        """The server processes serving calls now, whose load app/balance.py
        weighs. Not one still starting: an SDK server's imports take a core for
        a second, which read as a saturated worker, opened the second worker's
        accepting and had it start a server of its own for a connection or two."""
        return [session.pid for session in self._live if session.initialized]

    @property
    def processes(self) -> int:
        """Processes running or starting (the bound counts both)."""
        return len(self._live) + self._starting

    # -- opening ------------------------------------------------------------------

    async def open_session(
        self, initialize: Message, headers: Mapping[str, str]
    ) -> tuple[StdioSession, Message]:
        # `headers` (the caller's Authorization) has nowhere to go on stdio; it
        # still keys the pool, so callers with different credentials never share,
        # and it decides whose share of the processes this one counts in.
        credentials = credential_hash(headers.get("authorization"))
        await self._take_slot(credentials)
        session: StdioSession | None = None
        try:
            delay = self._not_before - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            session = await self._spawn(credentials)
            result = await self._initialize(session, initialize)
        except BaseException as exc:
            if session is None:
                self._starting -= 1
                self._release(credentials)
            else:
                session.stop("initialize did not complete")
            if isinstance(exc, UpstreamError):
                self._failed(session)
            raise
        return session, result

    async def _take_slot(self, credentials: str = "-") -> None:
        """A place for one more process of `credentials`: within both bounds, making
        room by stopping an idle process (of these credentials when it is their
        share that is full), else waiting `slot_wait_s` for one to end. So a client
        whose calls never end holds at most its share; the others are served."""
        if self._closed:
            raise UpstreamUnavailable("the gateway is shutting down")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._slot_wait_s
        while True:
            if self.processes >= self.max_processes:
                full: str | None = None
            elif self._held[credentials] >= self.max_per_credential:
                full = credentials
            else:
                break
            # Cleared first: a process may end while its owner is asked (an await).
            self._freed.clear()
            reclaimed = await self._reclaim_one(full)
            remaining = deadline - loop.time()
            if remaining <= 0:
                if not reclaimed:
                    raise self._refusal(full)
                # One found idle at the last moment: its stop has a bound of its own.
                remaining = self._stdin_grace_s + self._term_grace_s + 1
                deadline = loop.time() + remaining
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._freed.wait()
        # No await between the checks and the counts: the bounds are strict.
        self._starting += 1
        self._held[credentials] += 1

    def _refusal(self, credentials: str | None) -> PoolExhausted:
        """What each process is busy with, counted now, so the message is true."""
        if credentials is None:
            holding = room.holding(self._live, self._starting)
            log.warning(
                "stdio_processes_exhausted",
                limit=self.max_processes,
                setting="MCP_SHIM_STDIO_MAX_PROCESSES",
                holding=holding,
            )
            return PoolExhausted(
                f"all {self.max_processes} stdio upstream processes are busy: {holding}; "
                "raise MCP_SHIM_STDIO_MAX_PROCESSES or retry later"
            )
        mine = [s for s in self._live if s.credentials == credentials]
        holding = room.holding(mine, max(0, self._held[credentials] - len(mine)))
        log.warning(
            "stdio_process_share_exceeded",
            limit=self.max_per_credential,
            setting="MCP_SHIM_STDIO_MAX_PROCESSES_PER_CREDENTIAL",
            holding=holding,
        )
        return SessionShareExceeded(
            f"this caller's credentials already hold {self.max_per_credential} stdio upstream "
            f"processes, all busy: {holding} (MCP_SHIM_STDIO_MAX_PROCESSES_PER_CREDENTIAL); "
            "retry later"
        )

    def _release(self, credentials: str) -> None:
        self._held[credentials] -= 1
        if self._held[credentials] <= 0:
            del self._held[credentials]
        self._freed.set()

    async def _reclaim_one(self, credentials: str | None = None) -> bool:
        """Stop one idle process (of these credentials, or of any), in the order of
        room.candidates. Whoever held a pooled one sees `SessionExpired` next time
        and gets a new process, as after any exit (the pool, the lanes, the hub);
        a legacy client's own is ended by its owner, with the client's session.
        False: none could be."""
        for victim in room.candidates(self._live, credentials):
            if victim.owned:
                # Its owner may find it busy meanwhile (a request under way there).
                if victim.end_owned is None or not await victim.end_owned():
                    continue
                await victim.close()  # its owner closed it already: in case it could not
            else:
                victim.closing = True
                self.stop_in_background(victim)
            log.info(
                "upstream_process_reclaimed",
                pid=victim.pid,
                owned=victim.owned,
                processes=self.processes,
            )
            return True
        return False

    async def _spawn(self, credentials: str = "-") -> StdioSession:
        if self._reaper is not None:
            self._reaper.start()
        cgroup = self._cgroups.create() if self._cgroups is not None else None
        self._spawning += 1
        try:
            loop = asyncio.get_running_loop()
            process, pipes = await loop.subprocess_exec(
                functools.partial(ServerPipes, loop),
                *self._argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                start_new_session=True,  # its own process group: stopped as a whole
                preexec_fn=functools.partial(
                    _prepare_child, cgroup.procs_fd if cgroup is not None else None
                ),
            )
            proc = asyncio.subprocess.Process(process, pipes, loop)
            if self._reaper is not None:
                self._unreaped.add(proc)
        except OSError as exc:
            if cgroup is not None:
                await cgroup.remove()
            raise UpstreamUnavailable(
                f"the stdio upstream command could not be started: {exc.strerror or exc}"
            ) from None
        finally:
            self._spawning -= 1
            if cgroup is not None:
                cgroup.joined()
            if self._reaper is not None:
                self._reaper.reap()  # a SIGCHLD may have come while it could not
        session = StdioSession(
            self,
            proc,
            pipes,
            request_timeout_s=self._request_timeout_s,
            liveness_s=self._liveness_s,
            credentials=credentials,
        )
        if cgroup is not None and not cgroup.holds(proc.pid):
            # It could not join (the write is not checked in the child): its group only.
            log.warning("stdio_cgroup_not_joined", pid=proc.pid, cgroup=str(cgroup.path))
        session.cgroup = cgroup
        self._starting -= 1
        self._live.add(session)
        log.info("upstream_process_started", pid=proc.pid, processes=self.processes)
        return session

    async def _initialize(self, session: StdioSession, initialize: Message) -> Message:
        exchange = await session.request(initialize)
        answer: Message | None = None
        try:
            async with asyncio.timeout(self._start_timeout_s):
                async for message in exchange:
                    if "method" not in message:
                        answer = message
        except TimeoutError:
            raise UpstreamTimeout(
                f"stdio upstream did not answer initialize within {self._start_timeout_s:g}s "
                "(MCP_SHIM_STDIO_START_TIMEOUT_S)"
            ) from None
        except StdioProcessExited as exc:
            raise StdioProcessExited(f"{exc.message} during initialize") from None
        finally:
            await exchange.aclose()
        result = initialize_result(answer, "stdio upstream")
        await session.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
        session.initialized = True
        return result

    # -- health -------------------------------------------------------------------

    def _failed(self, session: StdioSession | None) -> None:
        """One more failure in a row (a process counts once, whether its start or its
        exit is noticed first); the next spawn waits longer."""
        if session is not None:
            if session.failure_counted:
                return
            session.failure_counted = True
        self._failures += 1
        delay = min(BACKOFF_START_S * 2 ** (self._failures - 1), BACKOFF_MAX_S)
        self._not_before = time.monotonic() + delay
        log.info("upstream_process_backoff", failures=self._failures, next_start_in_s=delay)

    def proven(self) -> None:
        self._failures = 0
        self._not_before = 0.0

    def exited(self, session: StdioSession, *, expected: bool) -> None:
        if session in self._live:
            self._live.discard(session)
            self._release(session.credentials)
        if self._reaper is not None:
            self._reaper.reap()  # what it left behind may be dead already
        if not expected:
            self._failed(session)

    @property
    def cancels(self) -> bool:
        """Whether a call its caller abandoned gets notifications/cancelled."""
        if self._cancels and self._cancel_stop is not None and self._cancel_stop.is_set():
            self._cancels = False  # another worker's server died of one
        return self._cancels

    def share_cancel_stop(self, flag: SharedFlag) -> None:
        if self._cancel == "auto":
            self._cancel_stop = flag

    def exited_after_cancel(self, session: StdioSession) -> None:
        """`session`'s process exited after a cancellation it was sent, having
        answered no request written after it."""
        if self._cancel != "auto" or not self.cancels:
            return
        self._cancels = False
        if self._cancel_stop is not None:
            self._cancel_stop.set()
        log.warning(
            "upstream_cancellation_stopped",
            pid=session.pid,
            reason="a server process exited after a notifications/cancelled, answering "
            "nothing sent after it",
            consequence="calls their callers abandon now run to their end on the server, "
            "and their answers are dropped",
            setting="MCP_SHIM_STDIO_CANCEL",
        )

    # -- stopping -----------------------------------------------------------------

    def stop_in_background(self, session: StdioSession) -> None:
        if session not in self._stoppers:
            task = asyncio.get_running_loop().create_task(
                self._stop(session), context=contextvars.Context()
            )
            self._stoppers[session] = task
            task.add_done_callback(lambda _: self._stoppers.pop(session, None))

    async def _stop(self, session: StdioSession) -> None:
        session.close_stdin()
        for sig, grace in (
            (signal.SIGTERM, self._stdin_grace_s),
            (signal.SIGKILL, self._term_grace_s),
        ):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await asyncio.shield(session.exited)
                return
            log.info("upstream_process_signalled", pid=session.pid, signal=sig.name)
            session.signal_all(sig)
        await asyncio.shield(session.exited)

    async def aclose(self) -> None:
        """Every process stopped, in parallel; returns when none is left."""
        self._closed = True
        for session in list(self._live):
            session.closing = True
            self.stop_in_background(session)
        stoppers = list(self._stoppers.values())
        if stoppers:
            await asyncio.wait(stoppers, timeout=self._stdin_grace_s + self._term_grace_s + 2)
        for session in list(self._live):  # never expected: SIGKILL did not end it in time
            session.kill()
        if self._reaper is not None:
            # Without a cgroup, a setsid() descendant got no signal: it ends here.
            await self._reaper.end_leftovers()
            await self._reaper.aclose()
