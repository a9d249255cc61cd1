"""Issue 21, item 5: tasks across replicas and restarts.

Two gateway replicas (one MCP_SHIM_STATE_KEY, each its MCP_SHIM_ADVERTISE_URL)
behind haproxy, round robin with no stickiness, in front of the legacy task
fixture (tests/fixtures/legacy_tasks_server.py). A modern client creates tasks
and polls `tasks/get` through haproxy: whichever replica a poll reaches
answers it, with the in-memory store (the poll relayed to the replica that
runs the task) and with the Redis store (a finished task answered from the
store by any replica, no relay). With the Redis store a finished result
outlives the replica that ran it (SIGTERM, restart), and a SIGTERM while tasks
run says in the log what finished and what was dropped.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import wire
from tests.integration.test_replicas import haproxy
from tests.integration.test_tasks_modern import modern
from tests.waiting import until_sync

TERMINAL = ("completed", "failed", "cancelled")


@pytest.fixture(scope="module")
def fixture_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("tasks-replicas-fixture")
    with procs.legacy_tasks_server(procs.free_port(), log_path=logs / "fixture.log") as url:
        yield url


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("tasks-replicas-redis")
    with procs.redis_server(procs.free_port(), work, log_path=work / "redis.log") as url:
        yield url


@dataclass
class Replica:
    port: int
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def events(self, name: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [line for line in wire.log_lines(self.log) if line.get("event") == name]

    def stop(self) -> None:
        """SIGTERM, as a rolling restart sends it; the process ends cleanly within
        a bounded wait (uvicorn re-raises the signal it caught: status -15)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) in (0, -signal.SIGTERM)
        assert self.events("gateway_stopped"), "the gateway did not stop cleanly"


def _replicas(
    stack: contextlib.ExitStack, upstream: str, work: Path, extra: dict[str, str]
) -> list[Replica]:
    key = base64.b64encode(os.urandom(32)).decode()
    replicas = []
    for n in (1, 2):
        port = procs.free_port()
        env = {
            "MCP_SHIM_STATE_KEY": key,
            "MCP_SHIM_ADVERTISE_URL": f"http://127.0.0.1:{port}",
            **extra,
        }
        replicas.append(Replica(port, env, work / f"replica-{n}.log"))
    for replica in replicas:
        start(stack, replica, upstream)
    return replicas


def start(stack: contextlib.ExitStack, replica: Replica, upstream: str) -> None:
    """The replica's gateway process (again, after a stop: same port, same name)."""
    _, replica.proc = stack.enter_context(
        procs.gateway_process(upstream, replica.port, env=replica.env, log_path=replica.log)
    )


def create(client: httpx.Client, base: str, label: str, seconds: float) -> str:
    status, created = modern(
        client,
        base,
        "tools/call",
        {"name": "slow_compute", "arguments": {"seconds": seconds, "label": label}},
    )
    assert status == 200, created
    assert created["result"]["resultType"] == "task", created
    return str(created["result"]["taskId"])


def poll(client: httpx.Client, base: str, task_id: str) -> dict[str, Any]:
    """One tasks/get: it must be answered (HTTP 200 and a DetailedTask)."""
    status, answer = modern(client, base, "tasks/get", {"taskId": task_id})
    assert status == 200, answer
    result = answer["result"]
    assert result["taskId"] == task_id, result
    return dict(result)


def until_terminal(client: httpx.Client, base: str, task_id: str, within_s: float) -> dict:

    def terminal() -> dict[str, Any] | None:
        result = poll(client, base, task_id)
        return result if result["status"] in TERMINAL else None

    return until_sync(
        terminal, timeout_s=within_s, interval=0.2, what=f"task {task_id} to be terminal"
    )


@pytest.mark.peers
@pytest.mark.parametrize("store", ["memory", "redis"])
def test_any_replica_answers_tasks_get_behind_a_round_robin_balancer(
    store: str, fixture_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    work = tmp_path_factory.mktemp(f"tasks-replicas-{store}")
    with contextlib.ExitStack() as stack:
        extra = {}
        if store == "redis":
            extra["MCP_SHIM_TASK_STORE"] = stack.enter_context(
                procs.redis_server(procs.free_port(), work, log_path=work / "redis.log")
            )
            extra["MCP_SHIM_TASK_STORE_PREFIX"] = f"replicas-{os.getpid()}"
        replicas = _replicas(stack, fixture_url, work, extra)
        url = stack.enter_context(haproxy([r.port for r in replicas], work, work / "haproxy.log"))
        with httpx.Client(timeout=30) as client:
            task_ids = [create(client, url, f"t{n}", 3) for n in range(4)]
            created = [len(r.events("task_created")) for r in replicas]
            assert created == [2, 2], created
            # Running tasks, polled on both replicas: the one that does not run a
            # task relays the poll to the one that does (either store).
            for task_id in task_ids:
                for replica in replicas:
                    poll(client, replica.base, task_id)
            relayed = [len(r.events("task_request_forwarded")) for r in replicas]
            assert relayed == [2, 2], relayed
            done = {t: until_terminal(client, url, t, 60) for t in task_ids}
            for n, task_id in enumerate(task_ids):
                assert done[task_id]["status"] == "completed", done[task_id]
                text = done[task_id]["result"]["content"][0]["text"]
                assert text.startswith(f"computed t{n} "), text
            # Finished tasks, polled again on both replicas: with the Redis store
            # the record (its result inlined) is read there, no relay; in memory
            # only the replica that ran the task has it, so the other relays.
            before = sum(len(r.events("task_request_forwarded")) for r in replicas)
            for task_id in task_ids:
                for replica in replicas:
                    assert poll(client, replica.base, task_id) == done[task_id]
            more = sum(len(r.events("task_request_forwarded")) for r in replicas) - before
            assert more == (0 if store == "redis" else len(task_ids)), more


@pytest.mark.peers
def test_a_finished_result_outlives_the_replica_that_ran_it(
    fixture_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Redis store: the task finishes on r1; r1 is stopped (SIGTERM) and restarted;
    tasks/get through r2, through haproxy and through the new r1 all return the
    result, and the restarted r1 never ran the task."""
    work = tmp_path_factory.mktemp("tasks-restart")
    extra = {"MCP_SHIM_TASK_STORE": redis_url, "MCP_SHIM_TASK_STORE_PREFIX": "restart"}
    with contextlib.ExitStack() as stack:
        r1, r2 = _replicas(stack, fixture_url, work, extra)
        url = stack.enter_context(haproxy([r1.port, r2.port], work, work / "haproxy.log"))
        with httpx.Client(timeout=30) as client:
            task_id = create(client, r1.base, "kept", 0.5)
            done = until_terminal(client, r1.base, task_id, 30)
            assert done["status"] == "completed", done
            r1.stop()
            # r1 is down: r2 answers from the store (no relay to a dead replica).
            assert poll(client, r2.base, task_id) == done
            r1.log = work / "replica-1-restarted.log"
            start(stack, r1, fixture_url)
            assert poll(client, r1.base, task_id) == done
            for _ in range(4):
                assert poll(client, url, task_id) == done
        assert r1.events("task_created") == []
        assert r1.events("task_request_forwarded") == []


@pytest.mark.peers
def test_sigterm_while_tasks_run_says_what_finished_and_what_was_dropped(
    fixture_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """MCP_SHIM_SHUTDOWN_GRACE_S=4: of two tasks running on r1 at SIGTERM, the
    short one finishes within the grace (its result reaches the store), the long
    one is dropped (cancelled upstream, its record failed); the log line counts
    both, and r2 answers each from the store."""
    work = tmp_path_factory.mktemp("tasks-sigterm")
    extra = {
        "MCP_SHIM_TASK_STORE": redis_url,
        "MCP_SHIM_TASK_STORE_PREFIX": "sigterm",
        "MCP_SHIM_SHUTDOWN_GRACE_S": "4",
    }
    with contextlib.ExitStack() as stack:
        r1, r2 = _replicas(stack, fixture_url, work, extra)
        with httpx.Client(timeout=30) as client:
            short = create(client, r1.base, "short", 1.5)
            long = create(client, r1.base, "long", 120)
            started = time.monotonic()
            r1.stop()
            stopped_s = time.monotonic() - started
            (wound,) = r1.events("tasks_wound_down")
            assert (wound["finished"], wound["handed_over"], wound["dropped"]) == (1, 0, 1), wound
            assert wound["drop_hooks_unfinished"] == 0, wound
            # The grace bounds the stop: the long task did not hold it for 120 s.
            assert stopped_s < 30, stopped_s
            finished = poll(client, r2.base, short)
            assert finished["status"] == "completed", finished
            assert finished["result"]["content"][0]["text"].startswith("computed short ")
            dropped = poll(client, r2.base, long)
            assert dropped["status"] == "failed", dropped
            assert "MCP_SHIM_SHUTDOWN_GRACE_S" in dropped["error"]["message"], dropped
        assert r2.events("task_request_forwarded") == []


@pytest.mark.peers
def test_an_unreachable_task_store_fails_task_requests_alone(
    fixture_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """MCP_SHIM_TASK_STORE names a Redis server that is not there: a call that
    would become a task gets HTTP 503, -32603 saying the store failed, with a
    log line; the same tool without the extension (run at once) and tools/list
    are served as ever."""
    work = tmp_path_factory.mktemp("tasks-store-down")
    env = {
        "MCP_SHIM_TASK_STORE": f"redis://127.0.0.1:{procs.free_port()}/0",
        "MCP_SHIM_TASK_STORE_TIMEOUT_S": "1",
    }
    log = work / "gateway.log"
    call = {"name": "slow_compute", "arguments": {"seconds": 0.1, "label": "sync"}}
    with procs.gateway(fixture_url, procs.free_port(), env=env, log_path=log) as base:
        with httpx.Client(timeout=30) as client:
            status, refused = modern(client, base, "tools/call", call)
            assert status == 503, refused
            assert refused["error"]["code"] == -32603, refused
            assert "task store (MCP_SHIM_TASK_STORE)" in refused["error"]["message"], refused
            status, got = modern(client, base, "tasks/get", {"taskId": "whatever"})
            assert status in (400, 503), got
            status, ran = modern(client, base, "tools/call", call, caps={"elicitation": {}})
            assert status == 200, ran
            assert ran["result"]["content"][0]["text"].startswith("computed sync "), ran
            status, listed = modern(client, base, "tools/list", {}, caps={"elicitation": {}})
            assert status == 200 and listed["result"]["tools"], listed
    failed = [x for x in wire.log_lines(log) if x.get("event") == "task_request_failed"]
    assert failed and failed[0]["reason"] == "store_unavailable", failed
    assert any(x.get("event") == "task_store_unavailable" for x in wire.log_lines(log))


@pytest.mark.peers
def test_gateway_run_tasks_across_replicas_and_a_sigterm(
    legacy_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """MCP_SHIM_TASK_TOOLS in front of a server without tasks, Redis store: a
    running gateway-run task is served through the other replica (relayed to
    the one holding its call); on SIGTERM the short one finishes within the
    grace and the long one is dropped (notifications/cancelled upstream); the
    other replica then answers both from the store."""
    work = tmp_path_factory.mktemp("tasks-own-sigterm")
    extra = {
        "MCP_SHIM_TASK_STORE": redis_url,
        "MCP_SHIM_TASK_STORE_PREFIX": "own-sigterm",
        "MCP_SHIM_TASK_TOOLS": "slow_*",
        "MCP_SHIM_SHUTDOWN_GRACE_S": "5",
    }

    def start_echo(client: httpx.Client, ms: int, text: str) -> str:
        args = {"ms": ms, "steps": 1, "text": text}
        status, created = modern(
            client, r1.base, "tools/call", {"name": "slow_echo", "arguments": args}
        )
        assert status == 200 and created["result"]["resultType"] == "task", created
        return str(created["result"]["taskId"])

    with contextlib.ExitStack() as stack:
        r1, r2 = _replicas(stack, legacy_url, work, extra)
        with httpx.Client(timeout=30) as client:
            cancelled = mw.stats(legacy_url)["toolCancellations"].get("slow_echo", 0)
            short = start_echo(client, 2500, "kept")
            long = start_echo(client, 120_000, "never")
            assert poll(client, r2.base, short)["status"] == "working"
            assert len(r2.events("task_request_forwarded")) == 1
            r1.stop()
            (wound,) = r1.events("tasks_wound_down")
            assert (wound["finished"], wound["handed_over"], wound["dropped"]) == (1, 0, 1), wound
            finished = poll(client, r2.base, short)
            assert finished["status"] == "completed", finished
            assert finished["result"]["content"] == [{"type": "text", "text": "kept"}]
            dropped = poll(client, r2.base, long)
            assert dropped["status"] == "failed", dropped
            assert "MCP_SHIM_SHUTDOWN_GRACE_S" in dropped["error"]["message"], dropped
            deadline = time.monotonic() + 10
            while mw.stats(legacy_url)["toolCancellations"].get("slow_echo", 0) == cancelled:
                assert time.monotonic() < deadline, "the upstream never saw notifications/cancelled"
                time.sleep(0.1)
        assert len(r2.events("task_request_forwarded")) == 1
