"""MCP_SHIM_WORKERS=2 with a servers file: every worker serves every server.

The servers: the legacy fixture (mcp 1.x) over Streamable HTTP (`legacy`), the
same fixture over stdio (`stdio`), npm's server-everything over stdio
(`everything`) and the legacy tasks fixture over HTTP (`tasks`). State of
each server lives in the worker that made it (a legacy session, a stdio
process, a parked MRTR call, a task, an HTTP+SSE channel, a session's GET
stream) and is reached from the other worker on the server's own route:
relayed to `http://<owner>/servers/NAME/...`, a stdio session's connection
handed to the owner with its request on that route, a legacy session of a
Streamable HTTP server joined. The aggregated /mcp's calls into a member
find the member's owner the same way. Requests go to each worker's internal
listener (the crossing is certain) and through the shared port on fresh
connections (whichever worker the kernel picks; the gateway spreads them:
MCP_SHIM_MOVE_CONNECTIONS=false).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from app.metrics import parse_exposition
from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import test_replicas as replicas
from tests.integration import wire
from tests.integration.everything import EVERYTHING
from tests.integration.test_tasks_modern import modern, settled
from tests.integration.test_workers import Workers, _up, descendants, lines, started_at
from tests.waiting import until_sync

pytestmark = pytest.mark.peers

NAMES = ("legacy", "stdio", "everything", "tasks")
ROUNDS = ["round_1", "round_2", "round_3"]


@dataclass
class Many(Workers):
    upstreams: dict[str, str] = field(default_factory=dict)  # the HTTP servers' URLs


def _stop(proc: subprocess.Popen[bytes]) -> None:
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
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Many]:
    logs = tmp_path_factory.mktemp("many-workers")
    with (
        procs.legacy_server(procs.free_port(), log_path=logs / "legacy.log") as legacy,
        procs.legacy_tasks_server(procs.free_port(), log_path=logs / "tasks.log") as tasks,
    ):
        node = str(procs.require_peer(procs.NODE))
        servers = {
            "mcpServers": {
                "legacy": {"url": legacy},
                "stdio": {
                    "command": str(procs.require_peer(procs.LEGACY_PY)),
                    "args": [str(procs.FIXTURE), "--stdio"],
                },
                "everything": {"command": node, "args": [str(procs.require_peer(EVERYTHING))]},
                "tasks": {"url": tasks},
            }
        }
        path = logs / "servers.json"
        path.write_text(json.dumps(servers))
        port, metrics = procs.free_port(), procs.free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_SHIM_UPSTREAM_")}
        env.update(
            MCP_SHIM_SERVERS_FILE=str(path),
            MCP_SHIM_PORT=str(port),
            MCP_SHIM_HOST="127.0.0.1",
            MCP_SHIM_LOG_LEVEL="info",
            MCP_SHIM_WORKERS="2",
            MCP_SHIM_MOVE_CONNECTIONS="false",
            # A legacy session over stdio is a process: room for a test's sessions
            # landing on one worker.
            MCP_SHIM_STDIO_MAX_PROCESSES="10",
            MCP_SHIM_METRICS_PORT=str(metrics),
        )
        log = logs / "gateway.log"
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
                up = _up(f"http://127.0.0.1:{port}", proc, log, 2)
                metrics_url = f"http://127.0.0.1:{metrics}/metrics"
                yield Many(up.base, proc, log, metrics_url, {"legacy": legacy, "tasks": tasks})
            finally:
                _stop(proc)


def fresh() -> httpx.Client:
    """A client opening a new connection for every request: the kernel picks
    the worker of each."""
    return httpx.Client(timeout=60.0, limits=httpx.Limits(max_keepalive_connections=0))


def events(workers: Workers, name: str, since: int = 0, **fields: Any) -> list[dict[str, Any]]:
    return [
        line
        for line in lines(workers.log)[since:]
        if line["event"] == name and all(line.get(k) == v for k, v in fields.items())
    ]


def mark() -> str:
    return "mw-" + uuid.uuid4().hex[:12]


# One plain call per route, and a check of its answer: (request body, check).
Call = Callable[[str], tuple[bytes, Callable[[dict[str, Any]], bool]]]


def _whoami(tool: str) -> Call:
    def call(text: str) -> tuple[bytes, Callable[[dict[str, Any]], bool]]:
        body = replicas.rpc(text, "tools/call", {"name": tool, "arguments": {"marker": text}})
        return body, lambda result: "sessionId" in result["structuredContent"]

    return call


def _echo(tool: str) -> Call:
    def call(text: str) -> tuple[bytes, Callable[[dict[str, Any]], bool]]:
        body = replicas.rpc(text, "tools/call", {"name": tool, "arguments": {"message": text}})
        return body, lambda result: text in result["content"][0]["text"]

    return call


# (route prefix, the call): each named route, and the aggregated /mcp.
ROUTES = [
    ("/servers/legacy", _whoami("whoami")),
    ("/servers/stdio", _whoami("whoami")),
    ("/servers/everything", _echo("echo")),
    ("", _whoami("legacy__whoami")),
    ("", _echo("everything__echo")),
]


def _called(http: httpx.Client, url: str, session_id: str, call: Call) -> None:
    text = mark()
    body, check = call(text)
    answer = http.post(url + "/mcp", content=body, headers=replicas.headers(session_id))
    assert answer.status_code == 200, (url, answer.status_code, answer.text)
    message = wire.answer_messages(answer)[-1]
    assert message.get("id") == text and "result" in message, (url, message)
    assert not message["result"].get("isError"), (url, message)
    assert check(message["result"]), (url, message)


def test_every_worker_serves_every_server_and_its_readiness(two: Many) -> None:
    with httpx.Client(timeout=30.0) as http:
        for url in two.internal().values():
            for name in NAMES:
                ready = http.get(f"{url}/servers/{name}/readyz")
                assert ready.status_code == 200, (url, name, ready.text)
            whole = http.get(url + "/readyz")
            assert whole.status_code == 200, whole.text
            assert set(whole.json()["servers"]) == set(NAMES)
    # One start line per server, said once (worker 0's), not once per worker.
    said = [line for line in lines(two.log) if line["event"] == "gateway_listening"]
    assert sorted(line["message"].split()[3].rsplit("/", 2)[1] for line in said) == sorted(NAMES)


@pytest.mark.parametrize(("prefix", "call"), ROUTES)
def test_legacy_sessions_on_fresh_connections_are_served_by_either_worker(
    two: Many, prefix: str, call: Call
) -> None:
    """Sessions opened on both workers (their listeners, and the shared port on
    fresh connections); every later call of each, on a fresh connection to
    either worker or the shared port, answered by its session's server."""
    urls = two.internal()
    start = len(lines(two.log))
    sessions: list[str] = []
    with fresh() as http:
        for target in [urls[0], urls[1], *[two.base] * 6]:
            sessions.append(replicas.initialize(http, target + prefix))
        for session_id in sessions:
            for target in (urls[0], urls[1], two.base, two.base):
                _called(http, target + prefix, session_id, call)
        for session_id in sessions:  # each one's process let go
            ended = http.delete(two.base + prefix + "/mcp", headers=replicas.headers(session_id))
            assert ended.status_code == 200, ended.text
    opened = {line["worker"] for line in events(two, "legacy_session_opened", start)}
    assert opened == {0, 1}, opened
    # The other worker's calls reached the owner's graph of this route, or a copy.
    crossed = [
        line
        for line in lines(two.log)[start:]
        if line["event"] in ("replica_relayed", "replica_handed_off", "legacy_session_joined")
    ]
    assert crossed, "no call crossed workers"
    if prefix:
        name = prefix.rsplit("/", 1)[1]
        assert {line.get("server") for line in crossed} == {name}, crossed


def test_a_stdio_session_s_calls_reach_its_own_process(two: Many) -> None:
    """The stdio fixture counts each call's marker in its process: every call
    of the session, whichever worker got it, is counted in the session's one
    process, once, and its connection was handed to the owner on the route."""
    urls = two.internal()
    start = len(lines(two.log))
    marks = [mark() for _ in range(6)]
    body = replicas.rpc("stats", "tools/call", {"name": "debug_stats", "arguments": {}})
    # Keep-alive connections: one to worker 1 is handed to worker 0 at its
    # first request (a connection closing after its request is relayed).
    with httpx.Client(timeout=30.0) as http, httpx.Client(timeout=30.0) as other:
        session_id = replicas.initialize(http, urls[0] + "/servers/stdio")
        for client, text in zip(itertools.cycle([other, http]), marks, strict=False):
            target = urls[1] if client is other else urls[0]
            replicas.result_of(replicas.whoami(client, target + "/servers/stdio", session_id, text))
        answer = other.post(
            urls[1] + "/servers/stdio/mcp", content=body, headers=replicas.headers(session_id)
        )
    assert answer.status_code == 200, answer.text
    stats = json.loads(wire.answer_messages(answer)[-1]["result"]["content"][0]["text"])
    assert {m: stats["markers"].get(m) for m in marks} == dict.fromkeys(marks, 1), stats
    handed = events(two, "replica_handed_off", start, worker=1)
    assert handed and all(line["server"] == "stdio" for line in handed), handed
    assert not events(two, "replica_relayed", start, server="stdio")


def test_a_session_s_get_stream_and_end_reach_its_owner(two: Many) -> None:
    urls = two.internal()
    with httpx.Client(timeout=30.0) as http:
        for name in ("legacy", "stdio"):
            session_id = replicas.initialize(http, urls[0] + f"/servers/{name}")
            replicas.open_get_stream(http, urls[1] + f"/servers/{name}", session_id)
            deleted = http.delete(
                urls[1] + f"/servers/{name}/mcp", headers=replicas.headers(session_id)
            )
            assert deleted.status_code == 200, (name, deleted.text)
            for url in urls.values():
                gone = replicas.whoami(http, url + f"/servers/{name}", session_id, mark())
                assert gone.status_code == 404, (name, gone.text)


def _sse_events(lines_: Iterator[str]) -> Iterator[tuple[str, str]]:
    kind, data = "message", []
    for line in lines_:
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield kind, "\n".join(data)
            kind, data = "message", []


@pytest.mark.parametrize("name", ["legacy", "stdio"])
def test_an_http_sse_channel_s_posts_reach_its_owner_on_its_route(two: Many, name: str) -> None:
    urls = two.internal()
    start = len(lines(two.log))
    with (
        httpx.Client(timeout=30.0) as http,
        http.stream("GET", urls[0] + f"/servers/{name}/sse") as stream,
    ):
        assert stream.status_code == 200
        received = _sse_events(stream.iter_lines())
        kind, endpoint = next(received)
        assert kind == "endpoint" and endpoint.startswith(f"/servers/{name}/messages?"), endpoint
        params = {
            "protocolVersion": "2024-11-05",
            "capabilities": {},
            "clientInfo": {"name": "x", "version": "1"},
        }
        with fresh() as other:
            posted = other.post(
                urls[1] + endpoint,
                content=replicas.rpc(1, "initialize", params),
                headers={"content-type": "application/json"},
            )
        assert posted.status_code == 202, posted.text
        kind, data = next(received)
        answer = json.loads(data)
        assert answer.get("result", {}).get("protocolVersion") == "2024-11-05", (kind, data)
    # Relayed over HTTP; over stdio its connection handed to the owner instead.
    moved = "replica_handed_off" if name == "stdio" else "replica_relayed"
    # The relay's line is written as its answer ends: after the client has it.
    crossed = until_sync(
        lambda: events(two, moved, start, worker=1, owned="sse_channel"),
        what=f"worker 1's {moved} line for the channel",
    )
    assert [line["server"] for line in crossed] == [name], crossed


@pytest.mark.parametrize("prefix", ["/servers/legacy", ""])
def test_an_mrtr_retry_on_the_other_worker_reaches_the_parked_call(two: Many, prefix: str) -> None:
    """A modern client's call parked on worker 0 (the elicitation tool asking
    in rounds), its retries sent to worker 1 then 0 then 1: relayed to the
    owner's route, answered, and the tool ran once upstream."""
    urls = two.internal()
    start = len(lines(two.log))
    tool = "ask_in_rounds" if prefix else "legacy__ask_in_rounds"
    text = mark()
    bases = itertools.cycle([urls[0] + prefix, urls[1] + prefix])
    with httpx.Client(timeout=30.0) as http:
        answer, keys = mw.answer_rounds(
            http, bases, tool, {"rounds": 3, "keyed": True, "marker": text}
        )
    assert keys == ROUNDS
    assert answer.result["resultType"] == "complete"
    assert list(answer.result["structuredContent"]) == ROUNDS
    forwarded = events(two, "mrtr_forwarded", start)
    assert [(line["worker"], line.get("server")) for line in forwarded] == [(1, "legacy")] * 2
    legacy_url = two.upstreams["legacy"]
    assert mw.marker_count(legacy_url, text) == 1


@pytest.mark.parametrize("prefix", ["/servers/tasks", ""])
def test_a_task_made_on_one_worker_is_answered_on_the_other(two: Many, prefix: str) -> None:
    """A task made on worker 0 (on the named route, or through the aggregated
    /mcp, whose task id names the member): tasks/get on worker 1 reaches the
    tasks server's graph on worker 0, which runs it."""
    urls = two.internal()
    start = len(lines(two.log))
    tool = "slow_compute" if prefix else "tasks__slow_compute"
    label = "mw" + prefix.replace("/", "-")
    with httpx.Client(timeout=30.0) as client:
        slow: dict[str, object] = {"name": tool, "arguments": {"seconds": 1, "label": label}}
        status, created = modern(client, urls[0] + prefix, "tools/call", slow, auth="Bearer mw")
        assert status == 200, created
        task_id = created["result"]["taskId"]  # type: ignore[index]
        status, seen = modern(
            client, urls[1] + prefix, "tasks/get", {"taskId": task_id}, auth="Bearer mw"
        )
        assert status == 200, seen
        assert seen["result"]["taskId"] == task_id  # type: ignore[index]
        done = settled(client, urls[1] + prefix, task_id, "Bearer mw")
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == f"computed {label} after 1s"
    forwarded = events(two, "task_request_forwarded", start)
    assert forwarded and {(line["worker"], line["server"]) for line in forwarded} == {(1, "tasks")}


def test_one_server_s_state_never_reaches_another_server(two: Many) -> None:
    """A session id, a requestState and a task id of one server, presented on
    another server's route of the other worker: unknown there, never sent on
    to the server that made them."""
    urls = two.internal()
    start = len(lines(two.log))
    with httpx.Client(timeout=30.0) as http:
        session_id = replicas.initialize(http, urls[0] + "/servers/legacy")
        foreign = replicas.whoami(http, urls[1] + "/servers/stdio", session_id, mark())
        assert foreign.status_code == 404, foreign.text
        text = mark()
        arguments = {"rounds": 2, "keyed": True, "marker": text}
        first = mw.tool_call(http, urls[0] + "/servers/legacy", "ask_in_rounds", arguments)
        assert first.input_required
        retry = mw.tool_call(
            http,
            urls[1] + "/servers/stdio",
            "ask_in_rounds",
            arguments,
            input_responses=mw.answers_for(first.requests),
            state=first.state,
        )
        assert retry.error["code"] == -32602, retry.final
        slow: dict[str, object] = {
            "name": "slow_compute",
            "arguments": {"seconds": 1, "label": "x"},
        }
        status, created = modern(
            http, urls[0] + "/servers/tasks", "tools/call", slow, auth="Bearer mw"
        )
        assert status == 200, created
        task_id = created["result"]["taskId"]  # type: ignore[index]
        status, other = modern(
            http, urls[1] + "/servers/legacy", "tasks/get", {"taskId": task_id}, auth="Bearer mw"
        )
        assert status != 200 or "error" in other, other
    assert mw.marker_count(two.upstreams["legacy"], text) == 1
    new = lines(two.log)[start:]
    crossed = [
        line
        for line in new
        if line["event"] in ("replica_relayed", "mrtr_forwarded", "task_request_forwarded")
    ]
    assert not crossed, crossed


def test_the_metrics_port_merges_every_worker_s_servers(two: Many) -> None:
    with httpx.Client(timeout=30.0) as http:
        for url in two.internal().values():
            for name in ("legacy", "everything"):
                tool = "whoami" if name == "legacy" else "echo"
                answer = mw.tool_call(http, url + f"/servers/{name}", tool, {}, caps={})
                assert answer.status == 200, answer.final
        time.sleep(0.2)
        samples = list(parse_exposition(http.get(two.metrics).text))
    scraped = {labels["worker"]: v for n, labels, v in samples if n == "mcp_shim_worker_scrape_ok"}
    assert scraped == {"0": 1.0, "1": 1.0}
    calls = {
        (labels["worker"], labels.get("server"))
        for name, labels, value in samples
        if name == "mcp_shim_calls_total" and labels.get("method") == "tools/call" and value
    }
    assert {("0", "legacy"), ("1", "legacy"), ("0", "everything"), ("1", "everything")} <= calls
    # The port that publishes the routes does not publish the metrics.
    for _ in range(4):
        assert httpx.get(two.base + "/metrics", timeout=5.0).status_code == 404


# Through the aggregated /mcp: a tool of each server, and the legacy server's
# elicitation (its requestState sealed with the member's name).
AGGREGATE_CALLS = (
    'legacy__echo:{"text": "hi legacy"}',
    'stdio__echo:{"text": "hi stdio"}',
    'everything__echo:{"message": "hi everything"}',
    'legacy__test_elicitation:{"message": "Who are you?"}',
)
# tests/modern_client/mrtr_tools.py's scenarios: every kind of input request.
MRTR_SCENARIOS = (
    "elicit_keyed",
    "elicit_unkeyed",
    "profile",
    "sampling",
    "roots_call_stream",
    "roots_get_stream",
    "all_at_once",
    "all_at_once_keyed",
    "rounds",
    "url_consent",
    "url_required",
)


def _aggregate_calls(out: dict[str, Any]) -> None:
    assert {name.split("__")[0] for name in out["tools"]} == set(NAMES)
    texts = {name: call["result"]["content"][0]["text"] for name, call in out["calls"].items()}
    assert texts["legacy__echo"] == "hi legacy"
    assert texts["stdio__echo"] == "hi stdio"
    assert texts["everything__echo"] == "Echo: hi everything"
    assert '"username": "ada"' in texts["legacy__test_elicitation"]
    assert out["asked"] == ["Who are you?"]


def test_the_official_clients_whichever_worker_each_request_reaches(
    two: Many, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The official clients (mcp 2.x and 1.x) through a load balancer sending
    each request to the next worker (haproxy round robin over their internal
    listeners): the aggregated /mcp, a modern client's multi round-trip calls
    on a named route, a legacy session's concurrent calls on a stdio server."""
    ports = [int(url.rsplit(":", 1)[1]) for url in two.internal().values()]
    start = len(lines(two.log))
    run_id = uuid.uuid4().hex[:10]
    workdir = tmp_path_factory.mktemp("haproxy-many-workers")
    with replicas.haproxy(ports, workdir, workdir / "haproxy.log") as base:
        modern_out: Any = procs.run_modern_client("aggregate.py", base + "/mcp", *AGGREGATE_CALLS)
        legacy_out: Any = procs.run_legacy_client(
            "aggregate.py", base + "/mcp", "2025-11-25", *AGGREGATE_CALLS
        )
        mrtr: Any = procs.run_modern_client("mrtr_tools.py", base + "/servers/legacy/mcp", run_id)
        calls: Any = procs.run_legacy_client(
            "one_session_calls.py", base + "/servers/stdio/mcp", "2025-11-25", "6", "4"
        )
    assert modern_out["protocolVersion"] == "2026-07-28"
    _aggregate_calls(modern_out)
    _aggregate_calls(legacy_out)
    for scenario in MRTR_SCENARIOS:
        assert mrtr[scenario]["result"]["resultType"] == "complete", (scenario, mrtr[scenario])
    # Each call ran once upstream; url_required twice, by design: refused with
    # -32042 before doing anything, sent again after the URL visit (docs/mrtr.md).
    markers = mw.stats(two.upstreams["legacy"])["markers"]
    expected = {s: 2 if s == "url_required" else 1 for s in MRTR_SCENARIOS}
    assert {s: markers.get(f"{run_id}-{s}") for s in MRTR_SCENARIOS} == expected
    assert calls == {"session": calls["session"], "right": 24, "wrong": []}
    new = lines(two.log)[start:]
    forwarded = {(e["worker"], e.get("server")) for e in new if e["event"] == "mrtr_forwarded"}
    assert forwarded and {server for _, server in forwarded} == {"legacy"}, forwarded
    stdio = [
        e
        for e in new
        if e["event"] in ("replica_handed_off", "replica_relayed") and e.get("server") == "stdio"
    ]
    assert stdio, "no request of the stdio session reached the other worker"
