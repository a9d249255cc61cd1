"""MCP_SHIM_STATE_KEY out of every process's environment (issue 19, defect 12).

`/proc/<pid>/environ` shows the environment a process was started with, to
every process of the same user: a stdio upstream (the legacy fixture over
stdio here) could read the key there, from the gateway, the supervisor or a
worker. The gateway started with the key in its environment replaces itself
by a process without it and hands the key over by a pipe; the supervisor
hands it to each worker the same way (app/serving/state_key.py). Checked on real
processes, one worker and two: no environ and no command line of the
gateway, its workers or their stdio servers carries the key or the
variable's name, and the key still seals: the test opens a requestState of
the single process with it, and two workers (one of them restarted) open
each other's.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from app.cluster.sealing import Sealer, parse_keys
from app.mrtr.state import open_state
from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import wire
from tests.integration.test_workers import (
    ROUNDS,
    Workers,
    _up,
    descendants,
    forwarded,
    run_rounds,
    started,
    started_at,
)
from tests.waiting import until_sync

pytestmark = pytest.mark.peers

NAME = b"MCP_SHIM_STATE_KEY"


def fresh_key() -> str:
    return base64.b64encode(os.urandom(32)).decode("ascii")


@contextmanager
def stdio_gateway(
    key: str, workers: int, log: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The gateway over the legacy fixture on stdio, the key in its environment."""
    command = shlex.join([str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE), "--stdio"])
    port = procs.free_port()
    env = {
        **os.environ,
        "MCP_SHIM_UPSTREAM_COMMAND": command,
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_WORKERS": str(workers),
        "MCP_SHIM_STATE_KEY": key,
    }
    env.pop("MCP_SHIM_UPSTREAM_URL", None)
    base = f"http://127.0.0.1:{port}"
    tree: dict[int, str | None] = {}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.serving.cli"],
            env=env,
            stdout=out,
            stderr=out,
            cwd=procs.ROOT,
        )
        try:
            procs.wait_until_up(base + "/healthz", proc)
            yield base, proc
            tree = {pid: started_at(pid) for pid in descendants(proc.pid)}
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for pid, start in tree.items():  # what a failed stop left: the same processes only
                if start is not None and started_at(pid) == start:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def assert_nowhere(key: str, pids: set[int], log: Path) -> None:
    """Neither the key nor the variable's name in any environ or command line."""
    secret = key.encode("ascii")
    for pid in sorted(pids):
        for what in ("environ", "cmdline"):
            raw = Path(f"/proc/{pid}/{what}").read_bytes()
            assert raw, (pid, what)  # readable, and the process is alive
            assert secret not in raw, f"the key is in /proc/{pid}/{what}"
            assert NAME not in raw, f"MCP_SHIM_STATE_KEY is in /proc/{pid}/{what}"
    assert key not in log.read_text()


def call_echo(base: str) -> None:
    with httpx.Client(timeout=30.0) as http:
        answer = mw.tool_call(http, base, "echo", {"text": "hi"}, caps={})
    assert answer.status == 200, answer.final


def test_one_process_keeps_the_key_out_of_its_environ_and_seals_with_it(
    logs_dir: Path,
) -> None:
    key = fresh_key()
    log = logs_dir / f"state-key-one-{uuid.uuid4().hex[:6]}.log"
    with stdio_gateway(key, 1, log) as (base, proc):
        call_echo(base)
        servers = descendants(proc.pid)
        assert servers, "the stdio server runs"
        assert_nowhere(key, {proc.pid, *servers}, log)
        # The operator's key is the one that seals: the test opens the state with it.
        with httpx.Client(timeout=30.0) as http:
            args = {"rounds": 3, "keyed": True, "marker": uuid.uuid4().hex[:8]}
            first = mw.tool_call(http, base, "ask_in_rounds", args)
            assert first.input_required, first.final
            assert open_state(Sealer(parse_keys(key)), first.state) is not None
            assert open_state(Sealer(parse_keys(fresh_key())), first.state) is None
            answer = run_rounds(http, itertools.repeat(base), uuid.uuid4().hex[:8])
        assert list(answer.result["structuredContent"]) == ROUNDS
        assert_nowhere(key, {proc.pid, *descendants(proc.pid)}, log)
    events = [line["event"] for line in wire.log_lines(log)]
    assert "mrtr_state_key_generated" not in events


def test_workers_get_the_key_by_a_pipe_and_open_each_others_state(logs_dir: Path) -> None:
    key = fresh_key()
    log = logs_dir / f"state-key-two-{uuid.uuid4().hex[:6]}.log"
    with stdio_gateway(key, 2, log) as (base, proc):
        up: Workers = _up(base, proc, log, 2)
        urls = up.internal()
        for url in urls.values():
            call_echo(url)  # each worker starts a stdio server of its own
        tree = descendants(proc.pid)
        pids = set(up.pids().values())
        assert pids <= tree and len(tree - pids) >= 2, "each worker runs its stdio server"
        assert_nowhere(key, {proc.pid, *tree}, log)
        before = forwarded(log).get(1, 0)
        with httpx.Client(timeout=30.0) as http:
            answer = run_rounds(http, itertools.cycle([urls[0], urls[1]]), uuid.uuid4().hex[:8])
        assert list(answer.result["structuredContent"]) == ROUNDS
        # Worker 1 opened worker 0's requestState (the same key) and relayed the retries.
        assert forwarded(log).get(1, 0) - before == 2
        # A restarted worker gets the key again, by a new pipe.
        old = up.pids()[1]
        os.kill(old, signal.SIGKILL)
        until_sync(
            lambda: started(log)[1]["pid"] != old, timeout_s=30, what="worker 1 to be restarted"
        )
        for url in urls.values():
            until_sync(lambda url=url: _healthy(url), timeout_s=30, what=f"{url} up")
        call_echo(urls[1])
        with httpx.Client(timeout=30.0) as http:
            answer = run_rounds(http, itertools.cycle([urls[1], urls[0]]), uuid.uuid4().hex[:8])
        assert list(answer.result["structuredContent"]) == ROUNDS
        assert forwarded(log).get(0, 0) == 2
        assert_nowhere(key, {proc.pid, *descendants(proc.pid)}, log)
    events = [line["event"] for line in wire.log_lines(log)]
    assert "mrtr_state_key_generated" not in events


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False
