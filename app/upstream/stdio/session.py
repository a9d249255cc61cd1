"""One stdio server process as one legacy session (`StdioSession`): the
JSON-RPC messages written to its stdin, those read from its stdout routed,
its cancellations, its liveness, and its end.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import time
from collections import deque
from typing import Any, Protocol

import structlog

from app import jsonio, logs, write_coalescer
from app.call import Message
from app.quoting import quoted
from app.upstream.base import OwnerEnd
from app.upstream.errors import SessionExpired, UpstreamError
from app.upstream.sessions.routing import Exchange, Router, id_key
from app.upstream.stdio.containment import Cgroup
from app.upstream.stdio.process import (
    STDERR_TAIL,
    ServerPipes,
    StdioProcessExited,
    killpg,
    read_stderr,
)

log = structlog.get_logger("mcp_shim.stdio")

# The routing (app/upstream/sessions/routing.py) is the same as HTTP+SSE's: one exchange class.
StdioExchange = Exchange


class Processes(Protocol):
    """What a session tells, and asks, the transport that started it (a
    StdioTransport)."""

    @property
    def cancels(self) -> bool: ...

    def stop_in_background(self, session: StdioSession) -> None: ...

    def proven(self) -> None: ...

    def exited(self, session: StdioSession, *, expected: bool) -> None: ...

    def exited_after_cancel(self, session: StdioSession) -> None: ...


class StdioSession:
    """One server process: one legacy session."""

    session_id: str | None = None

    def __init__(
        self,
        transport: Processes,
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
        # log lines must not carry that request's id (its server's name they do).
        self._tasks = [
            loop.create_task(coro, context=logs.process_context())
            for coro in (self._read_stdout(), read_stderr(proc, self.stderr_tail), self._watch())
        ]
        self.exited = loop.create_task(self._wait_exit(), context=logs.process_context())
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
        killpg(self.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill()

    def signal_all(self, sig: signal.Signals) -> None:
        killpg(self.pid, sig)
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
