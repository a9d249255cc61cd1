"""What tasks may hold of the upstream (app/tasks/bounds.py, docs/operations.md
"Limits", Tasks), against real processes on loopback: the 2025-11-25 task
fixture (tests/fixtures/legacy_tasks_server.py, mcp 1.x experimental tasks)
and the gateway (`python -m app.serving.cli`), driven with raw 2026-07-28 requests.

A task outlives the request that made it: its upstream session stays leased,
and the gateway used to hold a `tasks/result` stream (an upstream connection)
for each task's whole life. Credentials each within their own bounds could so
take every session and connection from callers without tasks.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.metrics import parse_exposition
from tests import procs
from tests.integration import wire

pytestmark = pytest.mark.peers

EXT = "io.modelcontextprotocol/tasks"
WITH_EXT: dict[str, Any] = {"extensions": {EXT: {}}}
# Client capabilities a legacy upstream tells apart: each is a pool key of its
# own, so each credential's tasks below pin that many sessions.
CAPS: tuple[dict[str, Any], ...] = (
    WITH_EXT,
    {**WITH_EXT, "elicitation": {}},
    {**WITH_EXT, "sampling": {}},
    {**WITH_EXT, "roots": {}},
)


def call(
    client: httpx.Client,
    base: str,
    method: str,
    params: dict[str, Any],
    *,
    caps: dict[str, Any],
    auth: str,
) -> tuple[int, dict[str, Any], httpx.Headers]:
    """One 2026-07-28 request: its HTTP status, answer and headers."""
    message = wire.body(method, params, meta={wire.META_CAPABILITIES: caps})
    extra: dict[str, str | None] = {"authorization": auth}
    if method.startswith("tasks/"):
        extra["mcp_name"] = str(params["taskId"])
    response = wire.post(client, base + "/mcp", message, wire.headers_for(message, **extra))
    return response.status_code, wire.answer_messages(response)[-1], response.headers


def task_gauges(base: str) -> dict[str, float]:
    text = httpx.get(base + "/metrics", timeout=10).text
    names = (
        "mcp_shim_tasks_live",
        "mcp_shim_task_upstream_sessions",
        "mcp_shim_task_upstream_connections",
    )
    return {name: value for name, _, value in parse_exposition(text) if name in names}


def slow(seconds: float, label: str) -> dict[str, Any]:
    return {"name": "slow_compute", "arguments": {"seconds": seconds, "label": label}}


@pytest.fixture(scope="module")
def fixture_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("task-bounds-fixture")
    with procs.legacy_tasks_server(procs.free_port(), log_path=logs / "fixture.log") as url:
        yield url


def test_tasks_leave_sessions_for_a_credential_that_has_none(
    fixture_url: str, tmp_path: Path
) -> None:
    """At MCP_SHIM_MAX_SESSIONS=8 (4 per credential), four credentials each
    create tasks under as many client capabilities as they can: a fifth
    credential's plain call is still served (before the bound: 503, "all 8
    upstream sessions are busy", for the tasks' lifetime). Tasks pin at most
    6 sessions (three quarters), 3 per credential; beyond: 429 or 503 naming
    the setting, and nothing started upstream."""
    env = {
        "MCP_SHIM_MAX_SESSIONS": "8",
        "MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL": "4",
        "MCP_SHIM_MAX_PARKED": "4",
    }
    log = tmp_path / "gateway.log"
    with (
        procs.gateway(fixture_url, procs.free_port(), env=env, log_path=log) as base,
        httpx.Client(timeout=30) as client,
    ):
        made: dict[str, list[tuple[int, dict[str, Any], httpx.Headers]]] = {}
        for who in ("a", "b", "c", "d"):
            for n, caps in enumerate(CAPS):
                made.setdefault(who, []).append(
                    call(client, base, "tools/call", slow(60, f"{who}{n}"), caps=caps, auth=who)
                )
        status, plain, _ = call(
            client,
            base,
            "tools/call",
            {"name": "greet", "arguments": {"name": "e"}},
            caps={},
            auth="e",
        )
        assert status == 200, plain
        assert plain["result"]["content"][0]["text"] == "Hello, e!"

        statuses = {who: [answer[0] for answer in answers] for who, answers in made.items()}
        assert statuses == {
            "a": [200, 200, 200, 429],
            "b": [200, 200, 200, 429],
            "c": [503, 503, 503, 503],
            "d": [503, 503, 503, 503],
        }
        _, share, headers = made["a"][3]
        assert share["error"]["code"] == -32603
        assert "MCP_SHIM_TASK_MAX_SESSIONS_PER_CREDENTIAL" in share["error"]["message"]
        assert headers["retry-after"] == "1"
        _, total, _ = made["c"][0]
        message = total["error"]["message"]
        assert "MCP_SHIM_TASK_MAX_SESSIONS)" in message and "6 upstream sessions" in message
        assert all(answer[1]["result"]["resultType"] == "task" for answer in made["a"][:3])
        # Working tasks are polled: no connection is held for them.
        assert task_gauges(base) == {
            "mcp_shim_tasks_live": 6.0,
            "mcp_shim_task_upstream_sessions": 6.0,
            "mcp_shim_task_upstream_connections": 0.0,
        }
        # A task's end gives its session back: the next credential's task starts.
        task_id = made["a"][0][1]["result"]["taskId"]
        status, _, _ = call(
            client, base, "tasks/cancel", {"taskId": task_id}, caps=CAPS[0], auth="a"
        )
        assert status == 200
        deadline = time.monotonic() + 10
        while task_gauges(base)["mcp_shim_task_upstream_sessions"] != 5.0:
            assert time.monotonic() < deadline, "the cancelled task kept its session"
            time.sleep(0.1)
        status, started, _ = call(
            client, base, "tools/call", slow(60, "c-again"), caps=CAPS[0], auth="c"
        )
        assert status == 200, started
    refused = [line for line in wire.log_lines(log) if line["event"] == "task_bound_reached"]
    assert {line["setting"] for line in refused} == {
        "MCP_SHIM_TASK_MAX_SESSIONS",
        "MCP_SHIM_TASK_MAX_SESSIONS_PER_CREDENTIAL",
    }


def test_working_tasks_hold_no_upstream_connection(fixture_url: str, tmp_path: Path) -> None:
    """At MCP_SHIM_MAX_UPSTREAM_CONNECTIONS=66 (its least with one parked call),
    three credentials create 23 long tasks each, every one within its own
    bounds: a fourth credential's plain call is answered at once (before, each
    task held a tasks/result stream for its whole life: the 67th found no
    connection and the call ran into its deadline)."""
    env = {
        "MCP_SHIM_MAX_UPSTREAM_CONNECTIONS": "66",
        "MCP_SHIM_MAX_PARKED": "1",
        "MCP_SHIM_CALL_DEADLINE_S": "5",
    }
    log = tmp_path / "gateway.log"
    with (
        procs.gateway(fixture_url, procs.free_port(), env=env, log_path=log) as base,
        httpx.Client(timeout=30) as client,
    ):
        created = [
            call(client, base, "tools/call", slow(60, f"{who}{n}"), caps=WITH_EXT, auth=who)[:2]
            for who in ("a", "b", "c")
            for n in range(23)
        ]
        started = time.monotonic()
        status, plain, _ = call(
            client,
            base,
            "tools/call",
            {"name": "greet", "arguments": {"name": "d"}},
            caps={},
            auth="d",
        )
        took = time.monotonic() - started
        assert status == 200, plain
        assert took < 2, took
        assert plain["result"]["content"][0]["text"] == "Hello, d!"
        assert [status for status, _ in created] == [200] * 69, created
        assert task_gauges(base) == {
            "mcp_shim_tasks_live": 69.0,
            "mcp_shim_task_upstream_sessions": 3.0,
            "mcp_shim_task_upstream_connections": 0.0,
        }


def _until(check: Any, what: str, timeout_s: float = 15) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_tasks_questions_wait_for_room_on_the_tasks_connection_bound(
    fixture_url: str, tmp_path: Path
) -> None:
    """A 2025-11-25 server delivers a task's questions only on a tasks/result
    stream, which holds a connection: with MCP_SHIM_TASK_MAX_CONNECTIONS_PER_CREDENTIAL
    =2, a credential's third asking task is polled (shown `working`, its question
    not yet fetched) until one of the first two ends and gives its stream back;
    another credential has its own share."""
    env = {"MCP_SHIM_TASK_MAX_CONNECTIONS_PER_CREDENTIAL": "2"}
    caps = {**WITH_EXT, "elicitation": {}}
    log = tmp_path / "gateway.log"
    with (
        procs.gateway(fixture_url, procs.free_port(), env=env, log_path=log) as base,
        httpx.Client(timeout=30) as client,
    ):

        def get(task_id: str, who: str = "a") -> dict[str, Any]:
            status, answer, _ = call(
                client, base, "tasks/get", {"taskId": task_id}, caps=caps, auth=who
            )
            assert status == 200, answer
            result: dict[str, Any] = answer["result"]
            return result

        def create(label: str, who: str = "a") -> str:
            params = {"name": "confirm_delete", "arguments": {"filename": label}}
            status, answer, _ = call(client, base, "tools/call", params, caps=caps, auth=who)
            assert status == 200, answer
            task_id: str = answer["result"]["taskId"]
            return task_id

        first, second = create("one"), create("two")
        for task_id in (first, second):
            _until(lambda t=task_id: get(t)["status"] == "input_required", "no question shown")
        third = create("three")
        theirs = create("theirs", "b")
        _until(lambda: get(theirs, "b")["status"] == "input_required", "b's share was taken")
        time.sleep(1.5)  # three of the fixture's poll intervals: the third stays unasked
        waiting = get(third)
        assert waiting["status"] == "working" and not waiting.get("inputRequests"), waiting
        assert task_gauges(base)["mcp_shim_task_upstream_connections"] == 3.0

        asked = get(first)["inputRequests"]
        (key,) = asked
        answer = {"action": "accept", "content": {"confirm": True}}
        status, ack, _ = call(
            client,
            base,
            "tasks/update",
            {"taskId": first, "inputResponses": {key: answer}},
            caps=caps,
            auth="a",
        )
        assert status == 200, ack
        done = _until(lambda: get(first) if get(first)["status"] == "completed" else None, "end")
        assert done["result"]["content"][0]["text"] == "deleted one"
        # The first task's stream given back: the third's question is fetched.
        _until(lambda: get(third)["status"] == "input_required", "the third never asked")
        assert task_gauges(base)["mcp_shim_task_upstream_connections"] == 3.0


def test_gateway_run_tasks_count_their_lane_and_two_connections(
    legacy_url: str, tmp_path: Path
) -> None:
    """A task the gateway runs itself (MCP_SHIM_TASK_TOOLS, a server without
    tasks) holds a lane and two connections for its whole life: at
    MCP_SHIM_TASK_MAX_CONNECTIONS_PER_CREDENTIAL=2 a credential's second one is
    refused (429, nothing started), another credential's starts, and a task's
    end gives its room back."""
    env = {"MCP_SHIM_TASK_TOOLS": "slow_*", "MCP_SHIM_TASK_MAX_CONNECTIONS_PER_CREDENTIAL": "2"}
    log = tmp_path / "gateway.log"
    echo = {"name": "slow_echo", "arguments": {"ms": 60_000, "steps": 1, "text": "late"}}
    with (
        procs.gateway(legacy_url, procs.free_port(), env=env, log_path=log) as base,
        httpx.Client(timeout=30) as client,
    ):
        status, first, _ = call(client, base, "tools/call", echo, caps=WITH_EXT, auth="a")
        assert status == 200 and first["result"]["resultType"] == "task", first
        status, refused, headers = call(client, base, "tools/call", echo, caps=WITH_EXT, auth="a")
        assert status == 429, refused
        assert "MCP_SHIM_TASK_MAX_CONNECTIONS_PER_CREDENTIAL" in refused["error"]["message"]
        assert headers["retry-after"] == "1"
        status, theirs, _ = call(client, base, "tools/call", echo, caps=WITH_EXT, auth="b")
        assert status == 200, theirs
        assert task_gauges(base) == {
            "mcp_shim_tasks_live": 2.0,
            "mcp_shim_task_upstream_sessions": 2.0,
            "mcp_shim_task_upstream_connections": 4.0,
        }
        task_id = first["result"]["taskId"]
        status, _, _ = call(
            client, base, "tasks/cancel", {"taskId": task_id}, caps=WITH_EXT, auth="a"
        )
        assert status == 200
        _until(
            lambda: task_gauges(base)["mcp_shim_task_upstream_connections"] == 2.0,
            "the cancelled task kept its connections",
        )
        status, again, _ = call(client, base, "tools/call", echo, caps=WITH_EXT, auth="a")
        assert status == 200, again
