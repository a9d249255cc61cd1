"""What tasks may hold of the upstream (app/tasks/bounds.py, docs/operations.md
"Limits", Tasks), against real processes on loopback: the 2025-11-25 task
fixture (tests/fixtures/legacy_tasks_server.py, mcp 1.x experimental tasks)
and the gateway (`python -m app.cli`), driven with raw 2026-07-28 requests.

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
