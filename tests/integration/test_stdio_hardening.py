"""stdio upstreams under a misbehaving server (issue 19): the process pool shared
out per credential, orphans reaped when the gateway is PID 1, and a setsid()
grandchild ended with the gateway.

The server is the project's own, tests/misbehaving/stdio_server.py, which
misbehaves on demand: calls that never answer, a child that outlives it, a
child that leaves its process group with setsid(). Processes are read from
/proc.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import wire
from tests.integration.everything import text_of, wait_for
from tests.integration.test_legacy_clients import call as legacy_call
from tests.integration.test_legacy_clients import initialize
from tests.integration.test_stdio import stdio_gateway

SUBREAPER_WRAPPER = procs.ROOT / "tests" / "misbehaving" / "subreaper.py"
SERVER = procs.ROOT / "tests" / "misbehaving" / "stdio_server.py"
VERSION = "2025-06-18"
SAMPLING: dict[str, Any] = {"sampling": {}}


def server_command(*args: str) -> str:
    return shlex.join([sys.executable, str(SERVER), *args])


def tool(http: httpx.Client, base: str, name: str, **kwargs: Any) -> mw.Answer:
    caps = kwargs.pop("caps", {})
    return mw.tool_call(http, base, name, {"text": name}, caps=caps, **kwargs)


def state(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a process, None once it is gone (reaped)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def zombies_of(parent: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            found = state(int(name))
            if found is not None and found == ("Z", parent):
                out.append(int(name))
    return out


# ---------------------------------------------------------------------------
# 8. The pool: legacy sessions are taken only from their own credential's share
# ---------------------------------------------------------------------------


def test_a_legacy_session_survives_anonymous_initializes(tmp_path: Path) -> None:
    """With 4 processes, a credential's legacy session owns one; four anonymous
    legacy `initialize`s used to take all four, stopping it (its next call: 404)."""
    url_of = "{}/mcp".format
    with (
        stdio_gateway(
            server_command(),
            tmp_path / "gateway.log",
            stdio_max_processes="4",
            connect_timeout_s="1",
        ) as (base, _),
        httpx.Client(timeout=30.0) as http,
    ):
        url = url_of(base)
        owner = "Bearer owner"
        session, _ = initialize(http, url, VERSION, authorization=owner)
        statuses, anonymous = [], []
        for _ in range(4):
            response = http.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": VERSION,
                        "capabilities": {},
                        "clientInfo": {"name": "anonymous", "version": "0"},
                    },
                },
                headers={"content-type": "application/json", "accept": wire.ACCEPT_BOTH},
            )
            statuses.append(response.status_code)
            anonymous.append(response.headers.get("mcp-session-id"))
        # Anonymous callers get their share of the processes (three of four by
        # default); the fourth makes room from their own, ending the least
        # recently used idle one: the owner's process is not theirs to take.
        assert statuses == [200, 200, 200, 200], statuses
        gone = legacy_call(http, url, anonymous[0], VERSION, "ping", {})
        assert gone.status_code == 404, gone.text
        assert legacy_call(http, url, anonymous[3], VERSION, "ping", {}).status_code == 200
        answer = legacy_call(
            http,
            url,
            session,
            VERSION,
            "tools/call",
            {"name": "echo", "arguments": {"text": "still here"}},
            authorization=owner,
        )
        assert answer.status_code == 200, answer.text
        assert "still here" in answer.text


def test_calls_that_never_answer_hold_only_their_credentials_share(tmp_path: Path) -> None:
    """Eight calls of one credential that the server never answers (each on a
    process of its own: the caller can be asked for input) used to hold all four
    processes, and every other caller got 503 until they ended."""
    log = tmp_path / "gateway.log"
    with stdio_gateway(server_command(), log, stdio_max_processes="4", connect_timeout_s="1") as (
        base,
        _,
    ):
        outcomes: list[int] = []

        def hang() -> None:
            # The client gives up after a while: the gateway then drops the call.
            with httpx.Client(timeout=httpx.Timeout(5.0, read=8.0)) as client:
                try:
                    outcomes.append(
                        tool(client, base, "hang", caps=SAMPLING, authorization="Bearer a").status
                    )
                except httpx.ReadTimeout:
                    pass

        def hanging() -> int:
            return sum(
                1
                for line in wire.log_lines(log)
                if line.get("event") == "upstream_stderr" and line.get("line") == "hanging"
            )

        workers = [threading.Thread(target=hang) for _ in range(8)]
        for worker in workers:
            worker.start()
        try:
            # Every call of the eight either reached a server (and hangs there) or
            # was refused.
            wait_for(lambda: hanging() + len(outcomes) == 8, what="the eight calls placed")
            assert set(outcomes) <= {429, 503}, outcomes
            with httpx.Client(timeout=30.0) as http:
                other = tool(http, base, "echo", authorization="Bearer b")
            assert other.status == 200, other.final
            assert text_of(other) == "echo"
            assert hanging() <= 3  # the first credential's share of four
        finally:
            for worker in workers:
                worker.join(30)


# ---------------------------------------------------------------------------
# 9, 10. What a server leaves behind: orphans reaped, a setsid() child ended
# ---------------------------------------------------------------------------

CAN_UNSHARE = os.geteuid() == 0 and shutil.which("unshare") is not None
# A PID namespace of its own, whose PID 1 the gateway is, as in the image
# (ENTRYPOINT mcp-shim, one worker): every orphan in it is re-parented to it.
AS_PID_1 = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM"]
# A mount namespace with no cgroup hierarchy, as a container whose /sys/fs/cgroup
# the gateway cannot write: the process group is all it has.
# Without the privilege for a PID namespace: a subreaper, which orphans re-parent
# to as they would to PID 1.
SUBREAPER = [sys.executable, str(SUBREAPER_WRAPPER)]
NO_CGROUPS = [
    "unshare",
    "--mount",
    "sh",
    "-c",
    'mount -t tmpfs none /sys/fs/cgroup && exec "$@"',
    "-",
]


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for name in os.listdir("/proc"):
            if name.isdigit() and (state(int(name)) or ("", 0))[1] == parent:
                out.append(int(name))
                todo.append(int(name))
    return out


def _is_gateway(pid: int) -> bool:
    """Python running app.serving.cli (not a wrapper whose arguments name it)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return argv[0] == sys.executable.encode() and argv[1:3] == [b"-m", b"app.serving.cli"]


@contextmanager
def wrapped_gateway(
    wrapper: list[str], command: str, log_path: Path, **settings: str
) -> Iterator[tuple[str, int]]:
    """A gateway started through `wrapper` (namespaces); yields its base URL and its
    pid as seen from here. Stopped with SIGTERM to the gateway itself."""
    port = procs.free_port()
    env = {
        "MCP_SHIM_UPSTREAM_COMMAND": command,
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        **{f"MCP_SHIM_{k.upper()}": v for k, v in settings.items()},
    }
    argv = [*wrapper, sys.executable, "-m", "app.serving.cli"]
    with procs.running(argv, f"http://127.0.0.1:{port}/healthz", env=env, log_path=log_path) as p:
        gateway = next(pid for pid in [p.pid, *_descendants(p.pid)] if _is_gateway(pid))
        try:
            yield f"http://127.0.0.1:{port}", gateway
        finally:
            os.kill(gateway, signal.SIGTERM)
            p.wait(30)


def pids_of(http: httpx.Client, base: str) -> dict[str, int]:
    answer = tool(http, base, "pids")
    assert answer.status == 200, answer.final
    found: dict[str, int] = json.loads(text_of(answer))
    return found


def host_pid(gateway: int, pid: int) -> int:
    """The pid, as seen here, of the gateway's descendant that sees itself as `pid`
    (the same number unless the gateway runs in a PID namespace of its own)."""
    for candidate in _descendants(gateway):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{candidate}/status").read_text().splitlines():
                if line.startswith("NSpid:") and int(line.split()[-1]) == pid:
                    return candidate
    raise AssertionError(f"no descendant of {gateway} is {pid} in its namespace")


def reaped(pid: int) -> bool:
    return state(pid) is None


def test_a_pid_1_gateway_reaps_what_its_servers_leave(tmp_path: Path) -> None:
    """Each server starts a child, then exits: the child, orphaned, is re-parented
    to PID 1, the gateway, and killed with its server's group. A gateway that
    does not reap it keeps it as a zombie for as long as it runs (four servers,
    four zombies)."""
    wrapper = AS_PID_1 if CAN_UNSHARE else SUBREAPER
    log = tmp_path / "gateway.log"
    children: list[int] = []
    try:
        with (
            wrapped_gateway(wrapper, server_command("--child"), log) as (base, gateway),
            httpx.Client(timeout=30.0) as http,
        ):
            for _ in range(4):
                started = pids_of(http, base)
                children.append(host_pid(gateway, started["child"]))
                assert tool(http, base, "exit").status == 502
            assert len(set(children)) == 4
            wait_for(
                lambda: all(reaped(child) for child in children),
                what=f"the servers' children {children} reaped, not zombies of the gateway",
            )
            assert zombies_of(gateway) == []
        assert any(line.get("event") == "stdio_orphans_reaped" for line in wire.log_lines(log))
    finally:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


def _setsid_child_ends(tmp_path: Path, wrapper: list[str] | None, mechanism: str) -> None:
    log = tmp_path / "gateway.log"
    command = server_command("--setsid-grandchild")
    escaped: list[int] = []
    try:
        with (
            (
                stdio_gateway(command, log)
                if wrapper is None
                else wrapped_gateway(wrapper, command, log)
            ) as (base, _),
            httpx.Client(timeout=30.0) as http,
        ):
            started = pids_of(http, base)
            escaped.append(started["setsid"])
            server_group = os.getpgid(started["server"])
            assert os.getpgid(started["setsid"]) != server_group  # out of the group's reach
            assert os.getsid(started["setsid"]) == started["setsid"]
        # The gateway has exited (SIGTERM): nothing it started is left.
        wait_for(lambda: reaped(escaped[0]), what="the setsid() child to be gone")
        (containment,) = [
            line for line in wire.log_lines(log) if line.get("event") == "stdio_containment"
        ]
        assert containment["mechanism"] == mechanism
    finally:
        for pid in escaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_setsid_child_does_not_outlive_the_gateway(tmp_path: Path) -> None:
    """Where the gateway can make cgroups (here: cgroup v2, writable), each server
    runs in one, and the cgroup is ended as a whole."""
    _setsid_child_ends(tmp_path, None, "cgroup")


@pytest.mark.skipif(not CAN_UNSHARE, reason="needs root and unshare(1) for a mount namespace")
def test_a_setsid_child_does_not_outlive_a_gateway_without_cgroups(tmp_path: Path) -> None:
    """Without a cgroup: the gateway, a subreaper, ends its servers' leftovers when
    it stops."""
    _setsid_child_ends(tmp_path, NO_CGROUPS, "process_group")


def test_a_setsid_child_ends_with_its_server(tmp_path: Path) -> None:
    """In its cgroup, a server's setsid() child ends when the server does, not only
    when the gateway stops."""
    log = tmp_path / "gateway.log"
    escaped: list[int] = []
    try:
        with (
            stdio_gateway(server_command("--setsid-grandchild"), log) as (base, _),
            httpx.Client(timeout=30.0) as http,
        ):
            escaped.append(pids_of(http, base)["setsid"])
            assert tool(http, base, "exit").status == 502
            wait_for(lambda: reaped(escaped[0]), what="the setsid() child to be gone")
    finally:
        for pid in escaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
