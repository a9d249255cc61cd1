"""MCP_SHIM_WORKERS=2 in front of a stdio server (the legacy fixture on the
official Python SDK 1.x, `--stdio`): each worker has a pool of server processes
of its own, and a legacy client's session is a process of the worker that
opened it.

- the official mcp 1.x client, one session with many calls, several at once,
  through the shared port: every answer is its own call's, and no request is
  relayed (one reaching the other worker hands its connection to the owner,
  app/serving/handoff.py);
- requests of a session sent to the other worker's listener: the first hands
  the connection over, the rest reach the owner on it directly;
- `MCP_SHIM_STDIO_MAX_PROCESSES` bounds each worker: two workers run at most
  twice as many processes, and a worker at its bound refuses a session more.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration import test_replicas as replicas
from tests.integration import wire
from tests.integration.everything import wait_for
from tests.integration.test_workers import (
    Workers,
    _up,
    descendants,
    lines,
    relay_counts,
    started_at,
)

pytestmark = pytest.mark.peers

COMMAND = [str(procs.LEGACY_PY), str(procs.FIXTURE), "--stdio"]


@contextlib.contextmanager
def stdio_gateway(logs_dir: Path, **settings: str) -> Iterator[Workers]:
    procs.require_peer(procs.LEGACY_PY)
    port = procs.free_port()
    log = logs_dir / f"workers-stdio-pool-{uuid.uuid4().hex[:6]}.log"
    env = {
        **os.environ,
        "MCP_SHIM_UPSTREAM_COMMAND": shlex.join(COMMAND),
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_LOG_LEVEL": "info",
        "MCP_SHIM_WORKERS": "2",
        **settings,
    }
    env.pop("MCP_SHIM_UPSTREAM_URL", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.serving.cli"],
            env=env,
            stdout=out,
            stderr=out,
            cwd=procs.ROOT,
        )
        try:
            procs.wait_until_up(f"http://127.0.0.1:{port}/healthz", proc)
            yield _up(f"http://127.0.0.1:{port}", proc, log, 2)
        finally:
            tree = {pid: started_at(pid) for pid in descendants(proc.pid)}
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for pid, start in tree.items():  # what a failed stop left, never a reused pid
                if start is not None and started_at(pid) == start:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def two(logs_dir: Path) -> Iterator[Workers]:
    metrics = str(procs.free_port())
    settings = {"MCP_SHIM_STDIO_MAX_PROCESSES": "4", "MCP_SHIM_METRICS_PORT": metrics}
    with stdio_gateway(logs_dir, **settings) as workers:
        workers.metrics = f"http://127.0.0.1:{metrics}/metrics"
        yield workers


def events(workers: Workers, name: str) -> list[dict[str, object]]:
    return [line for line in lines(workers.log) if line["event"] == name]


def servers(workers: Workers) -> set[int]:
    """The stdio server processes running under the gateway."""
    found = set()
    for pid in descendants(workers.proc.pid):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if str(procs.FIXTURE).encode() in argv:
                found.add(pid)
    return found


def echo(http: httpx.Client, url: str, session_id: str, text: str) -> str:
    body = replicas.rpc(text, "tools/call", {"name": "echo", "arguments": {"text": text}})
    answer = http.post(url + "/mcp", content=body, headers=replicas.headers(session_id))
    assert answer.status_code == 200, answer.text
    message = wire.answer_messages(answer)[-1]
    assert message.get("id") == text, message
    content: str = message["result"]["content"][0]["text"]
    return content


def test_an_sdk_session_with_many_concurrent_calls_is_never_relayed(two: Workers) -> None:
    before = len(events(two, "replica_relayed"))
    result = procs.run_legacy_client(
        "one_session_calls.py", two.base + "/mcp", "2025-06-18", "12", "8"
    )
    assert result == {"session": result["session"], "right": 96, "wrong": []}  # type: ignore[index]
    assert len(events(two, "replica_relayed")) == before


def test_the_other_workers_requests_hand_over_their_connection_once(two: Workers) -> None:
    urls = two.internal()
    before = len(events(two, "replica_handed_off"))
    counted = relay_counts(two)
    with httpx.Client(timeout=30.0) as owner:
        session_id = replicas.initialize(owner, urls[0])
    # One keep-alive connection to worker 1: its first request takes it to
    # worker 0, the owner, which serves every later one on it directly.
    with httpx.Client(timeout=30.0) as http:
        texts = [f"t-{n}-{uuid.uuid4().hex[:6]}" for n in range(20)]
        assert [echo(http, urls[1], session_id, text) for text in texts] == texts
    handed = events(two, "replica_handed_off")[before:]
    assert [(line["worker"], line["owned"]) for line in handed] == [(1, "legacy_session")]
    assert not [line for line in events(two, "replica_relayed") if line["worker"] == 1]
    key = ("1", "legacy_session", "handed_off")
    assert relay_counts(two).get(key, 0) - counted.get(key, 0) == 1


def test_the_process_bound_holds_per_worker(logs_dir: Path) -> None:
    settings = {
        "MCP_SHIM_STDIO_MAX_PROCESSES": "2",
        "MCP_SHIM_STDIO_MAX_PROCESSES_PER_CREDENTIAL": "2",
        "MCP_SHIM_CONNECT_TIMEOUT_S": "1",
    }
    with stdio_gateway(logs_dir, **settings) as two, httpx.Client(timeout=30.0) as http:
        urls = two.internal()
        # A legacy session holds its process.
        held = [replicas.initialize(http, url) for url in (urls[0], urls[0], urls[1], urls[1])]
        assert len(servers(two)) == 4  # 2 per worker, twice the setting in all
        body = replicas.rpc(
            0,
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x"}},
        )
        with contextlib.ExitStack() as streams:
            for session_id in held[:2]:
                stream = streams.enter_context(
                    http.stream(
                        "GET",
                        urls[0] + "/mcp",
                        headers=replicas.headers(session_id, accept="text/event-stream"),
                    )
                )
                assert stream.status_code == 200
            # Both of worker 0's busy (a GET stream open): refused, saying so.
            refused = http.post(urls[0] + "/mcp", content=body, headers=replicas.headers())
        assert refused.status_code == 503, refused.text
        assert "MCP_SHIM_STDIO_MAX_PROCESSES" in refused.text
        assert "busy: 2 with a stream open" in refused.text
        assert len(servers(two)) == 4
        wait_for(
            lambda: len([e for e in events(two, "call") if e.get("method") == "GET"]) == 2,
            what="both GET streams ended at the gateway",
        )
        # Idle again: worker 0's least recently used session makes room (its
        # client gets 404), and the bound still holds.
        replicas.initialize(http, urls[0])
        gone = http.post(
            urls[0] + "/mcp", content=replicas.rpc(1, "ping"), headers=replicas.headers(held[0])
        )
        assert gone.status_code == 404, gone.text
        # Ended for the other worker too, as by a DELETE.
        with httpx.Client(timeout=30.0) as other:
            ping = replicas.rpc(2, "ping")
            elsewhere = other.post(
                urls[1] + "/mcp", content=ping, headers=replicas.headers(held[0])
            )
        assert elsewhere.status_code == 404, elsewhere.text
        assert len(servers(two)) == 4
