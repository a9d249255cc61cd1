"""MCP_SHIM_WORKERS=2 in front of the real legacy fixture (mcp 1.x): one port,
two gateway processes, each a replica with its own internal listener and
advertise URL (app/serving/workers.py).

- a multi round-trip call parked on one worker, its retries sent alternately
  to each worker's internal listener: the other worker relays them to the
  owner (app/cluster/forwarding.py), the answer is right and the upstream ran
  the tool once; the same through the shared port, where the kernel picks;
- a worker killed with SIGKILL is restarted (log line with its exit code) on
  the same internal URL, while the port keeps answering;
- SIGTERM to the supervisor stops every worker and their stdio servers; a
  supervisor killed outright leaves no worker behind either.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.fronts.legacy.replies import session_not_found
from app.metrics import parse_exposition
from app.serving import workers
from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import test_replicas as replicas
from tests.integration import wire

ROUNDS = ["round_1", "round_2", "round_3"]


def marker() -> str:
    return "w-" + uuid.uuid4().hex[:12]


def lines(log: Path) -> list[dict[str, Any]]:
    return list(wire.log_lines(log))


def started(log: Path) -> dict[int, dict[str, Any]]:
    """The latest worker_started line of each worker."""
    latest: dict[int, dict[str, Any]] = {}
    for line in lines(log):
        if line["event"] == "worker_started":
            latest[line["worker"]] = line
    return latest


def forwarded(log: Path) -> dict[int, int]:
    counts: dict[int, int] = {}
    for line in lines(log):
        if line["event"] == "mrtr_forwarded":
            counts[line["worker"]] = counts.get(line["worker"], 0) + 1
    return counts


def wait_up(url: str, timeout: float = 30.0) -> None:
    mw.wait_until(lambda: _answers(url), timeout=timeout, what=f"{url} to answer")


def _answers(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Workers:
    base: str  # the shared port
    proc: subprocess.Popen[bytes]  # the supervisor
    log: Path
    metrics: str = ""  # MCP_SHIM_METRICS_PORT's URL, when set

    def internal(self) -> dict[int, str]:
        return {index: line["advertise"] for index, line in started(self.log).items()}

    def pids(self) -> dict[int, int]:
        return {index: line["pid"] for index, line in started(self.log).items()}


def _up(base: str, proc: subprocess.Popen[bytes], log: Path, count: int) -> Workers:
    workers = Workers(base, proc, log)
    mw.wait_until(lambda: len(started(log)) == count, timeout=30, what="workers started")
    for url in workers.internal().values():
        wait_up(url)
    return workers


@pytest.fixture(scope="module")
def two(legacy_url: str, logs_dir: Path) -> Iterator[Workers]:
    log = logs_dir / "workers-gateway.log"
    env = {
        "MCP_SHIM_WORKERS": "2",
        "MCP_SHIM_METRICS_PORT": str(procs.free_port()),
    }
    with procs.gateway_process(legacy_url, procs.free_port(), env, log_path=log) as (base, proc):
        workers = _up(base, proc, log, 2)
        workers.metrics = f"http://127.0.0.1:{env['MCP_SHIM_METRICS_PORT']}/metrics"
        yield workers


@pytest.fixture(scope="module")
def spread_two(legacy_url: str, logs_dir: Path) -> Iterator[Workers]:
    """Two workers that both accept whatever the load (MCP_SHIM_MOVE_CONNECTIONS=false):
    by default an idle gateway's worker 1 leaves new connections to worker 0
    (app/serving/accept_gate.py), and a test of requests landing anywhere needs the
    kernel to spread them."""
    log = logs_dir / "workers-spread.log"
    env = {"MCP_SHIM_WORKERS": "2", "MCP_SHIM_MOVE_CONNECTIONS": "false"}
    with procs.gateway_process(legacy_url, procs.free_port(), env, log_path=log) as (base, proc):
        yield _up(base, proc, log, 2)


def run_rounds(http: httpx.Client, targets: Iterator[str], mark: str) -> mw.Answer:
    args = {"rounds": 3, "keyed": True, "marker": mark}
    answer, keys = mw.answer_rounds(http, targets, "ask_in_rounds", args)
    assert keys == ROUNDS
    return answer


def test_each_worker_advertises_its_own_internal_listener(two: Workers) -> None:
    urls = two.internal()
    assert sorted(urls) == [0, 1]
    assert len(set(urls.values())) == 2
    ports = {int(url.rsplit(":", 1)[1]) for url in urls.values()}
    assert int(two.base.rsplit(":", 1)[1]) not in ports
    assert len(set(two.pids().values())) == 2


def test_retry_on_the_other_worker_is_relayed_to_the_owner(two: Workers, legacy_url: str) -> None:
    urls = two.internal()
    before = forwarded(two.log)
    mark = marker()
    # Worker 0 parks the call; retries alternate 1, 0, 1: the two sent to worker 1
    # are relayed to worker 0, which owns the exchange and its upstream call.
    with httpx.Client(timeout=30.0) as http:
        answer = run_rounds(http, itertools.cycle([urls[0], urls[1]]), mark)
    assert list(answer.result["structuredContent"]) == ROUNDS
    assert answer.result["resultType"] == "complete"
    after = forwarded(two.log)
    assert after.get(1, 0) - before.get(1, 0) == 2, (before, after)
    counted = relay_counts(two)
    assert counted.get(("1", "mrtr_call", "relayed"), 0) >= 2, counted
    assert after.get(0, 0) == before.get(0, 0)
    assert mw.marker_count(legacy_url, mark) == 1


def test_retries_through_the_shared_port_land_anywhere_and_complete(
    spread_two: Workers, legacy_url: str
) -> None:
    # The kernel picks the worker of each new connection: a fresh connection per
    # request, until a retry has landed on the worker not holding its exchange.
    two = spread_two
    before = sum(forwarded(two.log).values())
    marks = []
    for _ in range(30):
        mark = marker()
        marks.append(mark)
        with httpx.Client(timeout=30.0, limits=httpx.Limits(max_keepalive_connections=0)) as http:
            answer = run_rounds(http, itertools.repeat(two.base), mark)
        assert list(answer.result["structuredContent"]) == ROUNDS
        if sum(forwarded(two.log).values()) > before:
            break
    assert sum(forwarded(two.log).values()) > before, "every request reached the same worker"
    for mark in marks:
        assert mw.marker_count(legacy_url, mark) == 1


def test_a_legacy_session_s_plain_calls_are_served_by_either_worker(
    two: Workers, legacy_url: str
) -> None:
    # A legacy client's session is opened by one worker; on a Streamable HTTP
    # upstream the other joins it once (a note to the owner, no relay) and sends
    # its plain calls upstream itself: one upstream session, each call once.
    urls = two.internal()
    with httpx.Client(timeout=30.0) as http:
        session_id = replicas.initialize(http, urls[0])
        start = len(lines(two.log))
        before = relay_counts(two)
        marks = [marker() for _ in range(6)]
        seen = [
            replicas.result_of(replicas.whoami(http, urls[i % 2], session_id, mark))
            for i, mark in enumerate(marks)
        ]
        assert len({s["sessionId"] for s in seen}) == 1
        assert [mw.marker_count(legacy_url, m) for m in marks] == [1] * 6
        new = lines(two.log)[start:]
        assert not [e for e in new if e["event"] == "replica_relayed"], new
        calls = [e["worker"] for e in new if e["event"] == "call" and e.get("era") == "legacy"]
        assert sorted(calls) == [0, 0, 0, 1, 1, 1], calls
        joined = [e["worker"] for e in new if e["event"] == "legacy_session_joined"]
        assert joined == [1], joined
        # Its end is the owner's (the DELETE relayed there), and reaches worker 1's
        # copy before the DELETE is answered: no worker serves the session after.
        deleted = http.delete(urls[1] + "/mcp", headers=replicas.headers(session_id))
        assert deleted.status_code == 200, deleted.text
        after = relay_counts(two)
        key = ("1", "legacy_session", "relayed")
        assert after.get(key, 0) - before.get(key, 0) == 1, (before, after)
        assert not any(w == "0" and owned == "legacy_session" for w, owned, _ in after), after
        for url in (urls[1], urls[0]):
            gone = replicas.whoami(http, url, session_id, marker())
            assert gone.status_code == 404, gone.text
            assert gone.json()["error"] == NOT_FOUND_ERROR, gone.text


# What a legacy client gets for a session id that is not (or no longer) its own.
NOT_FOUND = session_not_found()
NOT_FOUND_ERROR = {"code": NOT_FOUND.code, "message": NOT_FOUND.message}


def test_many_sdk_clients_calls_are_not_relayed_and_the_rest_still_is(
    two: Workers, logs_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Official mcp 1.x clients, several at once, through a load balancer that sends
    # each request to the next worker (round robin over their internal listeners,
    # over the client's several connections): plain calls are served where they
    # land; what lives in one worker (the GET stream, the answer to a server
    # request) is relayed to the owner and still works.
    ports = [int(url.rsplit(":", 1)[1]) for url in two.internal().values()]
    start = len(lines(two.log))
    workdir = tmp_path_factory.mktemp("haproxy-workers")
    with replicas.haproxy(ports, workdir, logs_dir / "workers-haproxy.log") as base:
        out: Any = procs.run_legacy_client(
            "many_calls.py", base + "/mcp", "2025-11-25", "3", "40", uuid.uuid4().hex[:8]
        )
    for client in out["clients"].values():
        assert client["simple_ok"] == 40, client["simple_failed"][:2]
        assert client["sampling"]["result"]["content"][0]["text"] == "LLM response: Paris"
        assert "properly reconnected" in client["reconnection"]["result"]["content"][0]["text"]
        assert client["list_changed"] is True
    new = lines(two.log)[start:]
    calls = [e["worker"] for e in new if e["event"] == "call" and e.get("era") == "legacy"]
    assert min(calls.count(0), calls.count(1)) >= 40, calls
    relayed = [
        e["http_method"]
        for e in new
        if e["event"] == "replica_relayed" and e["owned"] == "legacy_session"
    ]
    # Per client at most: notifications/initialized and the sampling answer (POST),
    # its GET streams, and its DELETE; never one of its 40 calls.
    assert relayed.count("POST") <= 2 * 3, relayed
    assert len([e for e in new if e["event"] == "legacy_session_joined"]) <= 3


def test_a_tampered_or_foreign_session_id_is_refused_by_the_other_worker_as_before(
    two: Workers,
) -> None:
    urls = two.internal()
    alice = {"authorization": "Bearer alice"}
    with httpx.Client(timeout=30.0) as http:
        session_id = replicas.initialize(http, urls[0], **alice)
        # Worker 1 holds a copy of the session from here on.
        replicas.result_of(replicas.whoami(http, urls[1], session_id, marker(), **alice))
        tampered = session_id[:-2] + ("A" if session_id[-2] != "A" else "B") + session_id[-1]
        cases = [
            (session_id, {"authorization": "Bearer mallory"}),
            (session_id, {}),
            (tampered, alice),
        ]
        for sid, extra in cases:
            answers = [replicas.whoami(http, url, sid, marker(), **extra) for url in urls.values()]
            for answer in answers:
                assert answer.status_code == 404, answer.text
                assert answer.json()["error"] == NOT_FOUND_ERROR, answer.text
        # Still the session of its own credential, on either worker.
        for url in urls.values():
            replicas.result_of(replicas.whoami(http, url, session_id, marker(), **alice))


def test_use_on_the_other_worker_keeps_a_session_from_idling_out_and_its_end_reaches_it(
    legacy_url: str, logs_dir: Path
) -> None:
    # The owner's idle reaper counts the use the other worker makes of the session
    # (its touches); once idle everywhere, the owner ends it and the other
    # worker's copy goes with it: a 404 there too, not a call on a dead session.
    log = logs_dir / "workers-idle.log"
    env = {"MCP_SHIM_WORKERS": "2", "MCP_SHIM_SESSION_IDLE_S": "2"}
    with procs.gateway_process(legacy_url, procs.free_port(), env, log_path=log) as (base, proc):
        urls = _up(base, proc, log, 2).internal()
        with httpx.Client(timeout=30.0) as http:
            session_id = replicas.initialize(http, urls[0])
            used_until = time.monotonic() + 5.0  # past two idle periods
            while time.monotonic() < used_until:
                replicas.result_of(replicas.whoami(http, urls[1], session_id, marker()))
                time.sleep(0.3)
            replicas.result_of(replicas.whoami(http, urls[0], session_id, marker()))
            mw.wait_until(
                lambda: any(
                    e["event"] == "legacy_session_ended" and e.get("reason") == "idle"
                    for e in lines(log)
                ),
                timeout=10,
                what="the idle session ended by its owner",
            )
            gone = replicas.whoami(http, urls[1], session_id, marker())
            assert gone.status_code == 404, gone.text
            assert gone.json()["error"] == NOT_FOUND_ERROR, gone.text


def test_ids_1_and_text_1_in_flight_on_two_workers_take_turns_upstream(two: Workers) -> None:
    # The SDK 1.x server routes each answer by the id's text: 7 and "7" in flight
    # at once on one upstream session would swap or lose an answer. In one
    # process IdTurns makes them take turns; across workers, "7" goes upstream
    # from the owner, which first holds the text at the worker serving 7.
    urls = two.internal()
    with httpx.Client(timeout=30.0) as http:
        session_id = replicas.initialize(http, urls[0])
        replicas.result_of(replicas.whoami(http, urls[1], session_id, marker()))

    def slow(url: str, rid: Any, text: str, ms: int, done: dict[str, float]) -> None:
        args = {"text": text, "ms": ms, "steps": 1}
        body = replicas.rpc(rid, "tools/call", {"name": "slow_echo", "arguments": args})
        with httpx.Client(timeout=20.0) as client:
            answer = client.post(url + "/mcp", content=body, headers=replicas.headers(session_id))
        assert answer.status_code == 200, answer.text
        message = wire.answer_messages(answer)[-1]
        assert message["id"] == rid, message
        assert message["result"]["content"][0]["text"] == text, message
        done[text] = time.monotonic()

    # 7 on the worker serving a copy outlasts a note's own timeout (5 s): the
    # owner's hold waits for it as for a call.
    for first, second, ms in ((urls[1], urls[0], 6000), (urls[0], urls[1], 1500)):
        done: dict[str, float] = {}
        with ThreadPoolExecutor(2) as pool:
            number = pool.submit(slow, first, 7, "int", ms, done)
            time.sleep(0.4)  # 7 is in flight upstream
            text = pool.submit(slow, second, "7", "str", 100, done)
            number.result(30)
            text.result(30)
        assert done["str"] > done["int"], done  # "7" waited for 7


def test_a_note_not_sealed_with_the_deployment_s_key_is_not_found(two: Workers) -> None:
    # The workers' notes (app/cluster/notes.py) are sealed with the state
    # key: anything else sent there, on either listener, is an unknown path.
    with httpx.Client(timeout=30.0) as http:
        for base in (two.base, *two.internal().values()):
            for body in (b"", b"not a note", b"A" * 300):
                answer = http.post(base + "/mcp-shim/note", content=body)
                assert answer.status_code == 404, answer.text
                assert answer.json()["error"]["message"].startswith("Not found"), answer.text


def relay_counts(workers: Workers) -> dict[tuple[str, str, str], float]:
    """mcp_shim_replica_relays_total by (worker, owned, ending), from the metrics port."""
    samples = parse_exposition(httpx.get(workers.metrics, timeout=10.0).text)
    return {
        (labels["worker"], labels["owned"], labels["ending"]): value
        for name, labels, value in samples
        if name == "mcp_shim_replica_relays_total"
    }


def test_the_metrics_port_serves_every_worker_and_the_main_port_none(two: Workers) -> None:
    with httpx.Client(timeout=30.0) as http:
        for url in two.internal().values():
            answer = mw.tool_call(http, url, "echo", {"text": "counted"}, caps={})
            assert answer.status == 200, answer.final
    samples = list(parse_exposition(httpx.get(two.metrics, timeout=10.0).text))
    scraped = {labels["worker"]: v for n, labels, v in samples if n == "mcp_shim_worker_scrape_ok"}
    assert scraped == {"0": 1.0, "1": 1.0}
    calls: dict[str, float] = {}
    for name, labels, value in samples:
        if name == "mcp_shim_calls_total" and labels["method"] == "tools/call":
            calls[labels["worker"]] = calls.get(labels["worker"], 0.0) + value
    assert calls.get("0", 0) >= 1 and calls.get("1", 0) >= 1, calls
    memory = {labels["worker"] for n, labels, _ in samples if n == "process_resident_memory_bytes"}
    assert memory == {"0", "1"}
    # The port that publishes /mcp does not publish the metrics (a new connection
    # each time: whichever worker accepts it).
    for _ in range(6):
        assert httpx.get(two.base + "/metrics", timeout=5.0).status_code == 404


def test_a_killed_worker_is_restarted_on_its_own_url(two: Workers, legacy_url: str) -> None:
    urls = two.internal()
    victim = two.pids()[1]
    os.kill(victim, signal.SIGKILL)
    exited = mw.wait_until(
        lambda: [
            line
            for line in lines(two.log)
            if line["event"] == "worker_exited" and line["pid"] == victim
        ],
        timeout=10,
        what="the worker_exited line",
    )
    assert exited[0]["worker"] == 1
    assert exited[0]["exit_code"] == -signal.SIGKILL
    assert exited[0]["signal"] == "SIGKILL"
    assert exited[0]["level"] == "warning"
    # The port is served by worker 0 meanwhile.
    assert httpx.get(two.base + "/healthz", timeout=5.0).status_code == 200
    mw.wait_until(lambda: two.pids()[1] != victim, timeout=15, what="worker 1 started again")
    assert two.internal() == urls  # same listener, kept by the supervisor
    wait_up(urls[1])
    mark = marker()
    with httpx.Client(timeout=30.0) as http:
        answer = run_rounds(http, itertools.cycle([urls[1], urls[0]]), mark)
    assert list(answer.result["structuredContent"]) == ROUNDS
    assert mw.marker_count(legacy_url, mark) == 1
    assert two.proc.poll() is None


# ---------------------------------------------------------------------------
# stopping: no process left behind
# ---------------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def started_at(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def descendants(root: int) -> set[int]:
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                parents.setdefault(stat[1], []).append(int(name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    """Those still running (a zombie waiting for its parent counts as gone)."""
    return {p for p in pids if (_stat(p) or ("Z", 0))[0] != "Z"}


@pytest.fixture
def stdio_workers(logs_dir: Path) -> Iterator[Workers]:
    """Two workers whose upstream is the fixture over stdio: each worker has
    server processes of its own to stop."""
    command = shlex.join([str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE), "--stdio"])
    port = procs.free_port()
    log = logs_dir / f"workers-stdio-{uuid.uuid4().hex[:6]}.log"
    env = {
        **os.environ,
        "MCP_SHIM_UPSTREAM_COMMAND": command,
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_WORKERS": "2",
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
        tree: dict[int, str | None] = {}
        try:
            base = f"http://127.0.0.1:{port}"
            procs.wait_until_up(base + "/healthz", proc)
            workers = _up(base, proc, log, 2)
            with httpx.Client(timeout=30.0) as http:
                for url in workers.internal().values():
                    answer = mw.tool_call(http, url, "echo", {"text": "hi"}, caps={})
                    assert answer.status == 200, answer.final
            tree = {pid: started_at(pid) for pid in descendants(proc.pid)}
            yield workers
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            # Whatever a failed test left behind (orphans are the defect tested):
            # the same processes only, by start time, never a reused pid.
            for pid, start in tree.items():
                if start is not None and started_at(pid) == start:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {k.decode(): v.decode(errors="replace") for k, _, v in pairs}


def test_sigterm_stops_every_worker_and_its_servers(stdio_workers: Workers) -> None:
    tree = descendants(stdio_workers.proc.pid)
    workers = set(stdio_workers.pids().values())
    assert workers <= tree
    servers = tree - workers
    assert len(servers) >= 2, "each worker runs its stdio server"
    # The key the supervisor generated reaches the workers by a pipe: in no
    # environment (the workers' sharing it: the relayed retries above), and no
    # stdio server gets any of the gateway's settings.
    for pid in {stdio_workers.proc.pid, *workers}:
        assert "MCP_SHIM_STATE_KEY" not in environ(pid), pid
    for pid in servers:
        assert not [k for k in environ(pid) if k.startswith("MCP_SHIM_")], pid
    stdio_workers.proc.send_signal(signal.SIGTERM)
    assert stdio_workers.proc.wait(30) == 0
    mw.wait_until(lambda: not alive(tree), timeout=10, what="every descendant to end")
    events = [line["event"] for line in lines(stdio_workers.log)]
    assert events.count("gateway_stopped") == 2
    assert events[-1] == "workers_stopped"


def test_a_supervisor_killed_outright_leaves_no_worker(stdio_workers: Workers) -> None:
    tree = descendants(stdio_workers.proc.pid)
    assert len(tree) >= 4
    stdio_workers.proc.kill()
    stdio_workers.proc.wait()
    # Workers get SIGTERM from the kernel (PR_SET_PDEATHSIG), stop gracefully and
    # stop their stdio servers (which would get SIGKILL on their own otherwise).
    mw.wait_until(lambda: not alive(tree), timeout=30, what="every descendant to end")
    stopped = [line for line in lines(stdio_workers.log) if line["event"] == "gateway_stopped"]
    assert len(stopped) == 2


def test_sigint_stops_them_too_with_ctrl_c_s_exit_code(legacy_url: str, logs_dir: Path) -> None:
    log = logs_dir / "workers-sigint.log"
    env = {"MCP_SHIM_WORKERS": "2"}
    with procs.gateway_process(legacy_url, procs.free_port(), env, log_path=log) as (base, proc):
        _up(base, proc, log, 2)
        tree = descendants(proc.pid)
        assert len(tree) == 2
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
        mw.wait_until(lambda: not alive(tree), timeout=10, what="both workers to end")
    stopping = [line for line in lines(log) if line["event"] == "workers_stopping"]
    assert stopping[0]["signal"] == "SIGINT"


def test_stopping_refuses_new_connections_and_finishes_calls_in_flight(
    legacy_url: str, logs_dir: Path
) -> None:
    log = logs_dir / "workers-stopping.log"
    env = {"MCP_SHIM_WORKERS": "2"}
    with procs.gateway_process(legacy_url, procs.free_port(), env, log_path=log) as (base, proc):
        up = _up(base, proc, log, 2)
        answers: list[mw.Answer] = []

        def slow_call() -> None:
            with httpx.Client(timeout=30.0) as http:
                args = {"text": "finished", "ms": 3000, "steps": 3}
                answers.append(mw.tool_call(http, up.internal()[0], "slow_echo", args, caps={}))

        caller = threading.Thread(target=slow_call)
        caller.start()
        time.sleep(1.0)  # the call is in flight on worker 0
        proc.send_signal(signal.SIGTERM)
        mw.wait_until(
            lambda: len([x for x in lines(log) if x["event"] == "gateway_stopped"]) == 1,
            timeout=15,
            what="worker 1 to stop while worker 0 finishes its call",
        )
        # Like one process, the stopping gateway refuses new connections at once
        # rather than queueing them on a socket nobody accepts from any more.
        with pytest.raises(httpx.ConnectError):
            httpx.get(base + "/healthz", timeout=3.0)
        caller.join(30)
        assert proc.wait(30) == 0
    assert answers and answers[0].status == 200
    assert answers[0].result["content"][0]["text"] == "finished"


def test_unset_the_count_follows_the_usable_cpus(legacy_url: str, logs_dir: Path) -> None:
    log = logs_dir / "workers-default.log"
    env = {"MCP_SHIM_WORKERS": ""}  # empty: unset
    expected = workers.available_cpus(quota=workers.cgroup_cpu_quota())
    with procs.gateway_process(legacy_url, procs.free_port(), env, log_path=log) as (base, proc):
        if expected == 1:
            assert "workers_starting" not in [line["event"] for line in lines(log)]
            return
        up = _up(base, proc, log, expected)
        assert sorted(up.internal()) == list(range(expected))
        starting = [line for line in lines(log) if line["event"] == "workers_starting"]
        assert starting[0]["workers"] == expected


def test_one_worker_is_the_single_process_path(legacy_url: str, logs_dir: Path) -> None:
    # MCP_SHIM_WORKERS=1: no supervisor, no worker process, no internal listener.
    log = logs_dir / "workers-one.log"
    env = {"MCP_SHIM_WORKERS": "1"}
    with procs.gateway_process(legacy_url, procs.free_port(), env, log_path=log) as (base, proc):
        with httpx.Client(timeout=30.0) as http:
            answer = mw.tool_call(http, base, "echo", {"text": "one"}, caps={})
        assert answer.status == 200
        assert descendants(proc.pid) == set()
        events = [line["event"] for line in lines(log)]
        assert "workers_starting" not in events
        assert all("worker" not in line for line in lines(log))
        assert answer.result["content"][0]["text"] == "one"


def test_a_worker_port_in_use_stops_start_up_naming_the_setting(legacy_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        env = {
            **os.environ,
            "MCP_SHIM_UPSTREAM_URL": legacy_url,
            "MCP_SHIM_PORT": str(procs.free_port()),
            "MCP_SHIM_WORKERS": "2",
            "MCP_SHIM_WORKER_PORT_BASE": str(busy),
        }
        done = subprocess.run(
            [sys.executable, "-m", "app.serving.cli"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=procs.ROOT,
        )
    assert done.returncode == 2, done.stderr
    assert "MCP_SHIM_WORKER_PORT_BASE: cannot listen on 127.0.0.1:" in done.stderr
    assert "Traceback" not in done.stderr
