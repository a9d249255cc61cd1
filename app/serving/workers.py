"""`MCP_SHIM_WORKERS`: several gateway processes on one port, and their supervisor.

One Python process serves on one core. With N workers, `mcp-shim` becomes a
small supervisor (no event loop, no app) that:

- binds and listens on `MCP_SHIM_HOST:MCP_SHIM_PORT` once and hands the socket
  to every worker (inherited descriptor). One shared accept queue rather than
  `SO_REUSEPORT`: a worker that dies or restarts loses no queued connection
  (with `SO_REUSEPORT` the kernel resets the connections hashed to a closed
  socket), no other process can join the port, and a busy worker, not
  sitting in `epoll_wait`, leaves the next connection to an idle one, where
  the port hash would keep feeding it its share;
- gives each worker an internal listener of its own (any free port, or
  `MCP_SHIM_WORKER_PORT_BASE` + i), also bound here and kept across the
  worker's restarts, and an advertise URL naming it. A worker is then a
  replica like any other: state living in one process (a parked MRTR call; a
  legacy client's session) names its owner by `MCP_SHIM_ADVERTISE_URL`, and a
  request reaching another worker is relayed there by the replicas' own
  mechanism (app/cluster/forwarding.py), whichever worker the kernel picked. A
  TCP port rather than a unix socket: the same URL must be reachable from the
  other pods of a deployment, not only from the sibling workers;
- with no `MCP_SHIM_STATE_KEY`, generates one key for all workers, and hands
  each worker the key (that one or the operator's) through a pipe of its own,
  never in its environment, where a stdio server could read it in
  `/proc/<pid>/environ` (app/serving/state_key.py); never logged;
- restarts a worker that exits (a log line with its exit code, then a delay
  doubling from 0.5 s to 30 s while it keeps failing), forwards SIGTERM/SIGINT
  for the graceful stop (a second SIGINT forces, as for uvicorn), kills what is
  still running after the grace period, and reaps every child (it may be PID 1
  of a container). Workers get SIGTERM if the supervisor dies
  (`PR_SET_PDEATHSIG`), so none outlives it;
- serves `MCP_SHIM_METRICS_PORT` itself when set: every worker's `/metrics`,
  read from its internal listener at each scrape, each sample labelled
  `worker`.

`MCP_SHIM_WORKERS=1` never gets here: app/serving/cli.py serves in the process itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import start_http_server

from app import logs
from app.config import Settings, SettingsError
from app.serving import state_key
from app.serving.load_board import LoadBoard
from app.serving.workers_metrics import WorkersCollector
from app.settings.load import load_settings

log = structlog.get_logger("mcp_shim.workers")

# uvicorn's default accept backlog.
BACKLOG: Final = 2048
RESTART_FIRST_S: Final = 0.5
RESTART_MAX_S: Final = 30.0
# A worker that ran this long before exiting starts again from the first delay.
STABLE_S: Final = 60.0
# After the stop signal: the listen streams' closing results, uvicorn's graceful
# shutdown (10 s, app/serving/cli.py) and the lifespan's cleanup; then SIGKILL.
SHUTDOWN_EXTRA_S: Final = 20.0
_SIGNALS: Final = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
_WILDCARD: Final = {"", "0.0.0.0", "::", "[::]"}
_NAMES: Final = {int(sig): sig.name for sig in signal.Signals}


# -- how many -------------------------------------------------------------------


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 `cpu.max` ("max 100000" or "200000 100000"): CPUs of quota, or None."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The container's CPU quota in CPUs (cgroup v2 `cpu.max`, else v1 CFS), or None."""
    with contextlib.suppress(OSError):
        return parse_cpu_max((root / "cpu.max").read_text())
    with contextlib.suppress(OSError, ValueError):
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        if quota > 0 and period > 0:
            return quota / period
    return None


def available_cpus(affinity: int | None = None, quota: float | None = None) -> int:
    """CPUs this process may use: its affinity set, or the cgroup quota rounded down
    when smaller (1.5 CPUs of quota: a second worker would only be throttled); at least 1."""
    if affinity is None:
        try:
            affinity = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            affinity = os.cpu_count() or 1
    count = affinity
    if quota is not None:
        count = min(count, math.floor(quota))
    return max(1, count)


# The unset default's ceiling. The CPU count is what a container without a CPU
# limit sees of a large host (64 cores: 64 processes), but each worker holds
# about 60 MB idle, and past a few workers the gateway waits on its upstream,
# not on its own CPU (docs/operations.md, "Workers"). An explicit
# MCP_SHIM_WORKERS is not capped by this.
DEFAULT_WORKERS_CAP: Final = 8


def default_workers(cpus: int, cap: int = DEFAULT_WORKERS_CAP) -> int:
    """Workers when MCP_SHIM_WORKERS is unset: the usable CPUs, at most `cap`, at least 1."""
    return max(1, min(cpus, cap))


def worker_count(settings: Settings) -> int:
    if settings.workers is not None:
        return settings.workers
    return default_workers(available_cpus(quota=cgroup_cpu_quota()))


def log_worker_count(settings: Settings) -> None:
    """At start, once per gateway: how many workers, and why when by default."""
    if settings.workers is not None:
        log.info("workers", workers=settings.workers, source="MCP_SHIM_WORKERS")
        return
    cpus = available_cpus(quota=cgroup_cpu_quota())
    log.info(
        "workers_default",
        workers=default_workers(cpus),
        cpus=cpus,
        cap=DEFAULT_WORKERS_CAP,
        capped=cpus > DEFAULT_WORKERS_CAP,
    )


# -- where each worker is reached -------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerAddress:
    index: int
    bind_host: str  # where its internal listener is bound
    port: int  # 0: any free port (known once bound)


def worker_addresses(settings: Settings, count: int) -> list[WorkerAddress]:
    """Internal listeners: on MCP_SHIM_HOST when other replicas must reach them
    (MCP_SHIM_ADVERTISE_URL set), else on loopback, where only siblings do."""
    base = settings.worker_port_base
    host = settings.host if settings.advertise_url is not None else "127.0.0.1"
    if not base:
        # Any free ports: the URLs carry them, and they die with the gateway like
        # the state they lead to. A fixed base is for firewalls and NetworkPolicies.
        return [WorkerAddress(i, host, 0) for i in range(count)]
    ports = range(base, base + count)
    if ports[-1] > 65535:
        raise SettingsError(
            f"invalid configuration:\n  MCP_SHIM_WORKER_PORT_BASE: {count} workers need ports "
            f"{base}..{ports[-1]}, beyond 65535"
        )
    for name, taken in (
        ("MCP_SHIM_PORT", settings.port),
        ("MCP_SHIM_METRICS_PORT", settings.metrics_port),
    ):
        if taken in ports:
            raise SettingsError(
                f"invalid configuration:\n  MCP_SHIM_WORKER_PORT_BASE: the workers' ports "
                f"{base}..{ports[-1]} include {name} ({taken})"
            )
    return [WorkerAddress(i, host, port) for i, port in enumerate(ports)]


def advertise_url(settings: Settings, port: int) -> str:
    """The worker's own base URL: the configured advertise host with its internal
    port, or loopback. Plain http: the internal listener is uvicorn's, without TLS."""
    if settings.advertise_url is not None and settings.advertise_url.host is not None:
        return f"http://{settings.advertise_url.host}:{port}"
    return f"http://127.0.0.1:{port}"


def local_url(bind_host: str, port: int) -> str:
    """Where the supervisor itself reaches a worker's internal listener."""
    if bind_host in _WILDCARD:
        return f"http://127.0.0.1:{port}"
    host = f"[{bind_host}]" if ":" in bind_host and not bind_host.startswith("[") else bind_host
    return f"http://{host}:{port}"


# libuv's switch for one accept per wake of a listening socket.
SINGLE_ACCEPT: Final = "UV_TCP_SINGLE_ACCEPT"


def worker_environment(source: Mapping[str, str], advertise: str) -> dict[str, str]:
    """A worker's environment: the supervisor's, with its own advertise URL, no
    metrics port (the supervisor's) and never the state key (a descriptor's)."""
    env = dict(source)
    env["MCP_SHIM_ADVERTISE_URL"] = advertise
    # libuv (uvloop) accepts every pending connection in one wake, so the worker
    # that wakes first takes a whole burst (a client pool opening 32 connections
    # at once) and the others idle: the default's calls/s at c32 fell to one
    # worker's in some runs. One accept per wake, then a yield, lets the other
    # workers take their share (bench/accept_spread.py, bench/peers.py). An operator's own
    # value is kept. stdio servers never see it (their environment is an
    # allow-list).
    env.setdefault(SINGLE_ACCEPT, "1")
    env.pop("MCP_SHIM_METRICS_PORT", None)
    env.pop(state_key.ENV_NAME, None)
    return env


def listen_socket(host: str, port: int, what: str) -> socket.socket:
    """A listening TCP socket; SettingsError naming `what` when it cannot be."""
    bind_host = host.strip("[]")
    try:
        family, _, _, _, address = socket.getaddrinfo(bind_host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise SettingsError(
            f"invalid configuration:\n  {what}: cannot listen on {host}:{port} ({exc})"
        ) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise SettingsError(
            f"invalid configuration:\n  {what}: cannot listen on {host}:{port} ({exc.strerror})"
        ) from None
    return sock


def handoff_pair() -> tuple[socket.socket, socket.socket]:
    """(inbox, outbox) of one worker: a connection written to the outbox by a
    sibling is read from the inbox by the worker (app/serving/handoff.py). A socket pair,
    not a named socket: no other process can reach it."""
    inbox, outbox = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # Only the siblings write: the inbox's own sending side is never used.
    inbox.shutdown(socket.SHUT_WR)
    return inbox, outbox


# -- the supervisor -----------------------------------------------------------------


_PR_SET_PDEATHSIG: Final = 1
_prctl: Any = None
if sys.platform.startswith("linux"):
    with contextlib.suppress(Exception):
        _prctl = ctypes.CDLL(None, use_errno=True).prctl


def _child_setup(parent: int) -> None:  # pragma: no cover - runs in the child before exec
    # The supervisor blocks the signals it waits for; the mask is inherited.
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the supervisor died before the line above
        os._exit(1)


@dataclass(slots=True)
class Worker:
    index: int
    internal: socket.socket
    advertise: str
    local: str
    # The worker's inbox of handed-over connections and the outbox its siblings
    # write to (app/serving/handoff.py, app/serving/balance.py), kept across restarts.
    handoff: tuple[socket.socket, socket.socket] | None = None
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    failures: int = 0
    restart_at: float | None = None


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        listener: socket.socket,
        workers: list[Worker],
        environ: Mapping[str, str],
        key: str,
        board: int | None = None,
    ) -> None:
        self._settings = settings
        # The workers' shared load table (app/serving/balance.py), when the system has one.
        self._board = board
        self._listener = listener
        self._workers = workers
        self._environ = environ
        self._key = key
        self._by_pid: dict[int, Worker] = {}
        self._stopping: signal.Signals | None = None
        self._kill_at = 0.0

    def _spawn(self, worker: Worker) -> None:
        try:
            # A pipe per start, closed here once the worker has it: no descriptor
            # of ours keeps the key for a process of this user to open in /proc.
            key_fd = state_key.hand_over(self._key)
        except OSError as exc:  # out of descriptors: try again later
            worker.started = time.monotonic()
            fields = {"worker": worker.index, "error": exc.strerror}
            self._schedule_restart(worker, "worker_start_failed", fields)
            return
        try:
            self._start(worker, key_fd)
        finally:
            os.close(key_fd)

    def _start(self, worker: Worker, key_fd: int) -> None:
        argv = [
            sys.executable,
            "-m",
            "app.serving.cli",
            state_key.FD_OPTION,
            str(key_fd),
            "worker",
            "--index",
            str(worker.index),
            "--listen-fd",
            str(self._listener.fileno()),
            "--internal-fd",
            str(worker.internal.fileno()),
        ]
        if self._settings.metrics_port is not None:
            argv.append("--metrics-internal-only")  # this supervisor serves that port
        handoff = self._handoff_fds(worker, argv)
        parent = os.getpid()
        try:
            proc = subprocess.Popen(
                argv,
                env=worker_environment(self._environ, worker.advertise),
                pass_fds=(self._listener.fileno(), worker.internal.fileno(), key_fd, *handoff),
                # Its own process group: a terminal's Ctrl-C reaches the supervisor
                # only, which stops the workers once, gracefully.
                process_group=0,
                preexec_fn=lambda: _child_setup(parent),
            )
        except OSError as exc:  # out of processes or memory: try again later
            worker.started = time.monotonic()
            fields = {"worker": worker.index, "error": exc.strerror}
            self._schedule_restart(worker, "worker_start_failed", fields)
            return
        worker.proc = proc
        worker.started = time.monotonic()
        worker.restart_at = None
        self._by_pid[proc.pid] = worker
        log.info("worker_started", worker=worker.index, pid=proc.pid, advertise=worker.advertise)

    def _handoff_fds(self, worker: Worker, argv: list[str]) -> list[int]:
        """The worker's inbox and its siblings' outboxes, on its command line."""
        if worker.handoff is None:
            return []
        fds = [worker.handoff[0].fileno()]
        argv += ["--handoff-inbox", str(fds[0])]
        for other in self._workers:
            if other is not worker and other.handoff is not None:
                fds.append(other.handoff[1].fileno())
                argv += ["--handoff-outbox", f"{other.advertise}={fds[-1]}"]
                argv += ["--sibling", f"{other.index}={other.advertise}"]
        if self._board is not None:
            fds.append(self._board)
            argv += ["--load-board", f"{self._board}:{len(self._workers)}"]
        return fds

    def _alive(self) -> list[Worker]:
        return [w for w in self._workers if w.proc is not None]

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = self._by_pid.pop(pid, None)
            if worker is None or worker.proc is None:
                continue  # an orphan re-parented to us (PID 1 of a container)
            code = os.waitstatus_to_exitcode(status)
            worker.proc.returncode = code  # reaped here, not by Popen
            worker.proc = None
            uptime = time.monotonic() - worker.started
            fields: dict[str, Any] = {"worker": worker.index, "pid": pid, "exit_code": code}
            if code < 0:
                fields["signal"] = _NAMES.get(-code, str(-code))
            fields["uptime_s"] = round(uptime, 1)
            if self._stopping is not None:
                log.info("worker_exited", **fields)
                continue
            self._schedule_restart(worker, "worker_exited", fields)

    def _schedule_restart(self, worker: Worker, event: str, fields: dict[str, Any]) -> None:
        if time.monotonic() - worker.started >= STABLE_S:
            worker.failures = 0
        delay = min(RESTART_MAX_S, RESTART_FIRST_S * 2**worker.failures)
        worker.failures += 1
        worker.restart_at = time.monotonic() + delay
        log.warning(event, **fields, restart_in_s=delay)

    def _stop(self, signo: signal.Signals) -> None:
        alive = self._alive()
        if self._stopping is None:
            self._stopping = signo
            self._kill_at = time.monotonic() + self._settings.shutdown_grace_s + SHUTDOWN_EXTRA_S
            log.info("workers_stopping", signal=signo.name, workers=len(alive))
            forward = signal.SIGTERM
            # Our copies of the sockets would keep them open after every worker
            # closed its own: new connections would queue with nobody to accept
            # them, where a single process refuses them at once.
            self._listener.close()
            for worker in self._workers:
                worker.internal.close()
        else:
            # A second signal: uvicorn's own "force exit" for a second SIGINT.
            log.warning("workers_forced", signal=signo.name, workers=len(alive))
            forward = signal.SIGINT
        for worker in alive:
            assert worker.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.proc.pid, forward)

    def run(self) -> int:
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            for worker in self._workers:
                self._spawn(worker)
            while True:
                wake = 0.5
                if self._stopping is None:
                    due = [w.restart_at for w in self._workers if w.restart_at is not None]
                    if due:
                        wake = max(0.0, min(wake, min(due) - time.monotonic()))
                info = signal.sigtimedwait(_SIGNALS, wake)
                if info is not None and info.si_signo != signal.SIGCHLD:
                    self._stop(signal.Signals(info.si_signo))
                self._reap()
                now = time.monotonic()
                if self._stopping is not None:
                    alive = self._alive()
                    if not alive:
                        break
                    if now >= self._kill_at:
                        log.error("workers_killed", workers=len(alive))
                        for worker in alive:
                            assert worker.proc is not None
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(worker.proc.pid, signal.SIGKILL)
                        self._kill_at = now + 5.0
                    continue
                for worker in self._workers:
                    if worker.restart_at is not None and worker.restart_at <= now:
                        self._spawn(worker)
        finally:
            for worker in self._alive():  # only on an error of our own
                assert worker.proc is not None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.proc.pid, signal.SIGKILL)
                worker.proc.wait()
        log.info("workers_stopped")
        return 130 if self._stopping == signal.SIGINT else 0


def new_board(count: int) -> int | None:
    """The workers' shared load table (app/serving/balance.py); None where the system
    cannot make one (no memfd): the workers then do not move connections."""
    try:
        return LoadBoard.create(count)
    except (OSError, AttributeError) as exc:
        log.warning(
            "load_board_unavailable",
            error=str(exc),
            consequence="connections stay on the worker that accepted them",
        )
        return None


def supervise(settings: Settings, count: int) -> int:
    """Run `count` workers on MCP_SHIM_PORT until SIGTERM/SIGINT; the exit code.
    SettingsError when a port cannot be listened on."""
    from app.cluster.sealing import generate_key

    addresses = worker_addresses(settings, count)
    listener = listen_socket(settings.host, settings.port, "MCP_SHIM_HOST/MCP_SHIM_PORT")
    workers: list[Worker] = []
    board = new_board(count)
    try:
        for address in addresses:
            internal = listen_socket(address.bind_host, address.port, "MCP_SHIM_WORKER_PORT_BASE")
            port = int(internal.getsockname()[1])
            workers.append(
                Worker(
                    address.index,
                    internal,
                    advertise_url(settings, port),
                    local_url(address.bind_host, port),
                    handoff_pair(),
                )
            )
        if settings.state_key is not None:
            key = settings.state_key.get_secret_value()
        else:
            import base64

            key = base64.b64encode(generate_key()).decode("ascii")
            log.warning(
                "mrtr_state_key_generated",
                consequence="shared by this gateway's workers only: requestState cannot be "
                "opened after a restart or by another replica; set MCP_SHIM_STATE_KEY (the "
                "same on every replica)",
            )
        log.info(
            "workers_starting",
            workers=count,
            port=settings.port,
            internal_ports=[int(w.internal.getsockname()[1]) for w in workers],
        )
        supervisor = Supervisor(settings, listener, workers, os.environ, key, board)
        server = None
        if settings.metrics_port is not None:
            # Blocked before the thread starts, which inherits the mask: the signals
            # must reach the main thread's sigtimedwait, not this thread.
            signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
            registry = CollectorRegistry(auto_describe=False)
            registry.register(WorkersCollector([w.local for w in workers]))
            server, _thread = start_http_server(
                settings.metrics_port, addr=settings.host, registry=registry
            )
        try:
            return supervisor.run()
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()
    finally:
        for worker in workers:
            worker.internal.close()
            for end in worker.handoff or ():
                end.close()
        if board is not None:
            os.close(board)
        listener.close()


def main() -> None:
    """The supervisor's process (app/serving/cli.py execs it when MCP_SHIM_WORKERS > 1),
    with `--state-key-fd N` when MCP_SHIM_STATE_KEY is set (app/serving/state_key.py)."""
    key: str | None = None
    try:
        if sys.argv[1:2] == [state_key.FD_OPTION]:
            key = state_key.take(int(sys.argv[2]))
        settings = load_settings(state_key=key)
    except SettingsError as exc:
        print(f"mcp-shim: {exc}", file=sys.stderr)
        sys.exit(2)
    logs.configure(settings.log_level)
    log_worker_count(settings)
    try:
        code = supervise(settings, worker_count(settings))
    except SettingsError as exc:
        print(f"mcp-shim: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code)


if __name__ == "__main__":
    main()
