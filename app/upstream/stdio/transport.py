"""stdio upstreams: an MCP server the gateway starts itself, one process per session.

The stdio transport (2025-03-26 .. 2025-11-25 basic/transports) is one stream
of newline-delimited JSON-RPC messages each way on the child's stdin and
stdout; stderr is the server's log. A process serves one client, so here a
process *is* one legacy session: `StdioTransport.open_session` spawns it and
runs `initialize` / `notifications/initialized`, and the session pool and the
MRTR lanes above use it as they use a Streamable HTTP session (same keys, same
lanes), with no lock anywhere: any number of calls run on one process at once.

A process that exits, or stops answering (silent for `liveness_s` with calls
in flight and no answer to a ping within as long), fails its calls in flight
at once with `StdioProcessExited`; the session is gone (`request` raises
`SessionExpired`, so the pool and the lanes open a new process, after a
backoff that grows with each failure in a row). Stopping a process (closed,
reclaimed, at shutdown, or once it closed its stdout) is always the same:
stdin closed, SIGTERM to its process group (and its cgroup) after a grace
period, SIGKILL after another; one found unusable (a line over
MAX_LINE_BYTES, a ping unanswered, its stdin unread) gets SIGKILL at once.
Children start in their own process group, so the whole group goes, and with
a parent death signal, so a gateway that dies leaves no server process behind
either (what a server started may outlive it: containment.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import signal
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Literal

import structlog

from app.call import Message
from app.upstream.base import SharedFlag
from app.upstream.errors import (
    PoolExhausted,
    SessionShareExceeded,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.sessions.pool import credential_hash
from app.upstream.sessions.routing import initialize_result
from app.upstream.stdio import room
from app.upstream.stdio.containment import OrphanReaper, ServerCgroups
from app.upstream.stdio.process import StdioProcessExited, start_process
from app.upstream.stdio.session import StdioSession

log = structlog.get_logger("mcp_shim.stdio")

BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 10.0


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
        cwd: str | None = None,
    ) -> None:
        """`cancel`: MCP_SHIM_STDIO_CANCEL (auto, always, never). `contain`: the
        gateway's own transport (not a test's in a shared process): a cgroup per
        server where one is writable, and the gateway a subreaper that reaps
        and, at shutdown, ends what its servers leave behind."""
        self._argv = list(argv)
        self._env = dict(env)
        self._cwd = cwd  # the servers file's `cwd`; None: the gateway's
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
        """The server processes serving calls now, whose load app/serving/balance.py
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
            proc, pipes = await start_process(
                self._argv,
                self._env,
                cgroup.procs_fd if cgroup is not None else None,
                cwd=self._cwd,
            )
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
        """Every process stopped, in parallel; returns when none is left, or when
        the stops' bound has passed (those left then get SIGKILL, not waited for)."""
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
