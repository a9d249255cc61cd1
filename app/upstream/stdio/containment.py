"""What a stdio server leaves behind: its descendants, ended and reaped.

Two mechanisms, both Linux-only, used by the gateway's own stdio transport
(`StdioTransport(contain=True)`, app/upstream/choice.py):

- **A cgroup per server** (`ServerCgroups`), under the gateway's own cgroup v2
  where that is writable: the child moves itself into it between fork and exec,
  so everything it ever starts is in it too, a `setsid()` grandchild included,
  which no signal to its process group reaches. Stopping the server ends the
  cgroup as a whole (`cgroup.kill`, or SIGKILL to each pid it lists on kernels
  before 5.14). Where no cgroup v2 is writable (a container's read-only
  `/sys/fs/cgroup`, a cgroup v1-only host) the process group is all there is.
- **Orphans adopted** (`OrphanReaper`): the gateway makes itself a child
  subreaper (`PR_SET_CHILD_SUBREAPER`), so a server's child that outlives it is
  re-parented to the gateway rather than to init, whether or not the gateway is
  PID 1; every second (and whenever a server exits) it reaps every zombie child
  that is not one of its servers (those are the event loop's to wait for). A
  gateway that is PID 1 of a container would otherwise collect them as zombies
  forever. This is done in the gateway, not by an init in the image, because
  the gateway alone knows which of its children the event loop waits for (a
  blind `waitpid(-1)` would steal their exit codes), and it then holds with any
  runtime (no `--init` flag to forget) and outside containers too. At
  shutdown, the gateway ends whatever of them is left: without a cgroup, the
  one way a `setsid()` descendant is ended at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import itertools
import os
import signal
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, ClassVar

import structlog

log = structlog.get_logger("mcp_shim.stdio")

_PR_SET_CHILD_SUBREAPER = 36
# How long an orphan that died stays a zombie at most.
REAP_INTERVAL_S = 1.0
_prctl: Any = None
if sys.platform.startswith("linux"):
    with contextlib.suppress(Exception):
        _prctl = ctypes.CDLL(None, use_errno=True).prctl


# The kernel tells of neither a cgroup emptying nor a process dying through anything
# asyncio waits on (short of inotify on cgroup.events): polled, briefly.
_POLL_S = 0.02


async def _until(done: Callable[[], bool], wait_s: float) -> bool:
    for _ in range(max(1, int(wait_s / _POLL_S))):
        if done():
            return True
        await asyncio.sleep(_POLL_S)
    return done()


# -- cgroups -----------------------------------------------------------------------


def _cgroup2_root() -> Path | None:
    """The gateway's own cgroup v2 directory, from /proc/self/mountinfo and /proc/self/cgroup."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mount = None
    for line in mounts:
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            mount = left.split()[4]
            break
    relative = next((line[3:] for line in own if line.startswith("0::")), None)
    if mount is None or relative is None:
        return None
    return Path(mount) / relative.lstrip("/")


class Cgroup:
    """One server's cgroup: `procs_fd` is open (close-on-exec) for the child to join."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.procs_fd: int | None = os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def joined(self) -> None:
        """The child is in (or failed to join): the gateway needs the descriptor no more."""
        if self.procs_fd is not None:
            os.close(self.procs_fd)
            self.procs_fd = None

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def holds(self, pid: int) -> bool:
        """`pid` is in it, or has ended already (nothing to hold then)."""
        if pid in self.pids():
            return True
        return not Path(f"/proc/{pid}").exists() or _is_zombie(pid)

    def signal(self, sig: signal.Signals) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL to every process in it, at once where the kernel can (5.14+)."""
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:
            # Before cgroup.kill: a process forking meanwhile is caught next round.
            for _ in range(10):
                if not self.pids():
                    break
                self.signal(signal.SIGKILL)

    def populated(self) -> bool:
        try:
            events = (self.path / "cgroup.events").read_text()
        except OSError:
            return False
        return "populated 1" in events

    async def remove(self, wait_s: float = 2.0) -> bool:
        """Kill what is in it and remove it, waiting up to `wait_s` for it to empty."""
        self.joined()
        self.kill()
        await _until(lambda: not self.populated(), wait_s)
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError as exc:
            log.warning("stdio_cgroup_not_removed", cgroup=str(self.path), error=exc.strerror)
            return False
        return True


class ServerCgroups:
    """Makes one cgroup per stdio server under the gateway's own (v2) cgroup."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent
        # Unique among gateways sharing a cgroup (pids repeat across PID namespaces).
        self._prefix = f"mcp-shim-{os.getpid()}-{os.urandom(4).hex()}"
        self._numbers = itertools.count(1)

    @classmethod
    def find(cls) -> tuple[ServerCgroups | None, str]:
        """The cgroups to use, or None and why not."""
        if not sys.platform.startswith("linux"):
            return None, "not Linux"
        parent = _cgroup2_root()
        if parent is None:
            return None, "no cgroup v2 hierarchy mounted"
        probe = parent / f"mcp-shim-probe-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            probe.mkdir()
        except OSError as exc:
            return None, f"{parent} is not writable ({exc.strerror})"
        try:
            usable = os.access(probe / "cgroup.procs", os.W_OK)
        finally:
            with contextlib.suppress(OSError):
                probe.rmdir()
        if not usable:
            return None, f"{parent}'s cgroups do not accept processes"
        cls.remove_stale(parent)
        return cls(parent), ""

    @staticmethod
    def remove_stale(parent: Path) -> None:
        """Empty cgroups of a gateway that was killed (SIGKILL: its servers died of
        the parent-death signal, their cgroups stayed). Only empty ones, and only of
        a pid not running here: nothing is ever killed by this."""
        for path in parent.glob("mcp-shim-*-*-*"):
            try:
                pid = int(path.name.split("-")[2])
            except ValueError:
                continue
            if pid == os.getpid() or Path(f"/proc/{pid}").exists():
                continue
            with contextlib.suppress(OSError):
                path.rmdir()  # refused (EBUSY) while anything runs in it

    def create(self) -> Cgroup | None:
        path = self.parent / f"{self._prefix}-{next(self._numbers)}"
        try:
            path.mkdir()
            return Cgroup(path)
        except OSError as exc:
            log.warning("stdio_cgroup_not_created", cgroup=str(path), error=exc.strerror)
            with contextlib.suppress(OSError):
                path.rmdir()
            return None


# -- orphans -----------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """The children of `pid` (every thread's), from /proc."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        with contextlib.suppress(OSError, ValueError):
            out += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return out


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


class OrphanReaper:
    """The gateway as child subreaper: adopts its servers' orphans and reaps them.

    `servers()` names the children asyncio waits for; they are never reaped here
    (their exit status is the transport's). None: a server is being started, whose
    pid is not known yet; the sweep waits for the next occasion."""

    # Every reaper of this process not closed yet: a gateway with many stdio
    # servers (app/servers) has one per server, and each must leave the
    # others' servers alone (their exit status, their processes at shutdown).
    _open: ClassVar[set[OrphanReaper]] = set()

    def __init__(self, servers: Callable[[], Collection[int] | None]) -> None:
        self._servers = servers
        self._sweeper: asyncio.Task[None] | None = None
        self._started = False
        self.adopting = False

    def _every_server(self) -> set[int] | None:
        """The servers of every open reaper, this one's included; None while one is
        being started."""
        servers: set[int] = set()
        for reaper in (self, *self._open):
            known = reaper._servers()
            if known is None:
                return None
            servers.update(known)
        return servers

    def start(self) -> None:
        """Become a subreaper and sweep every `REAP_INTERVAL_S` (and when told)."""
        if _prctl is None or self._started:
            return
        self._started = True
        self._open.add(self)
        if _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log.warning("stdio_subreaper_refused", errno=ctypes.get_errno())
            return
        self.adopting = True
        # Not on SIGCHLD: uvloop keeps that signal to itself (and a handler of ours
        # would take it from it). A sweep reads one small /proc file per thread.
        self._sweeper = asyncio.get_running_loop().create_task(
            self._sweep(), context=contextvars.Context()
        )

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            self.reap()

    def reap(self) -> int:
        """Reap every zombie child that is not a server; how many."""
        if not self.adopting:
            return 0
        servers = self._every_server()
        if servers is None:
            return 0
        reaped = 0
        for pid in _children(os.getpid()):
            if pid in servers or not _is_zombie(pid):
                continue
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped += 1
        if reaped:
            log.info("stdio_orphans_reaped", count=reaped)
        return reaped

    async def end_leftovers(self, wait_s: float = 2.0) -> int:
        """SIGKILL every descendant still there (the servers are stopped by now), wait
        up to `wait_s` for them to die, reap them; how many were killed. Run at
        shutdown only: a server's orphan may be something the server still relies
        on while it runs."""
        if not self.adopting or self._open - {self}:
            return 0  # another server's processes still run: the last one ends them
        killed: set[int] = set()
        for _ in range(10):  # a leftover forking meanwhile is caught next round
            found = self._descendants()
            fresh = [pid for pid in found if pid not in killed and not _is_zombie(pid)]
            if not fresh:
                break
            for pid in fresh:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        if killed:
            log.warning("stdio_leftovers_killed", count=len(killed))
            await _until(lambda: all(_is_zombie(pid) for pid in self._descendants()), wait_s)
            self.reap()
        return len(killed)

    def _descendants(self) -> list[int]:
        out: list[int] = []
        todo = _children(os.getpid())
        while todo and len(out) < 100_000:
            pid = todo.pop()
            out.append(pid)
            todo += _children(pid)
        return out

    async def aclose(self) -> None:
        """Stop sweeping, then sweep once more (the gateway stays a subreaper:
        unsetting the flag this late is of no use)."""
        self._open.discard(self)
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        self.reap()
