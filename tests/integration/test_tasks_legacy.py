"""Tasks for legacy (2025-11-25) clients (issue 21, items 3 and 4; docs/tasks.md).

- The modern task fixture (tests/fixtures/modern_task_server.py) is the
  reference implementation of the `io.modelcontextprotocol/tasks` extension
  here: the conformance suite's ten `tasks-*` scenarios are run against it
  directly first, and every check must pass.
- The official SDK 1.x client's experimental tasks API through the gateway in
  front of it: create, get, result (blocking), list, cancel, and a task that
  asks for input (tests/legacy_client/tasks.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire

TASK_SCENARIOS = procs.TASK_SCENARIOS
# The suite marks this one SKIPPED whatever the server does (its harness waits
# for a subscriptions/listen rewrite): it has no check to pass.
SKIPPED_BY_THE_SUITE = {"tasks-status-notifications"}


@pytest.fixture(scope="module")
def task_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("tasks") / "modern-task-server.log"
    with procs.modern_task_server(procs.free_port(), log_path=log) as url:
        yield url


def run_scenario(url: str, scenario: str, out: Path) -> list[dict[str, Any]]:
    """One suite scenario against `url`; its checks as the suite wrote them."""
    cmd = [
        str(procs.require_peer(procs.NODE)),
        str(procs.require_peer(procs.CONFORMANCE)),
        "server",
        "--url",
        url,
        "--scenario",
        scenario,
        "--output-dir",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=out.parent, capture_output=True, text=True, timeout=120)
    files = sorted(out.glob(f"server-{scenario}-*/checks.json"))
    assert files, f"{scenario}: no checks.json written\n{proc.stdout}\n{proc.stderr}"
    checks: list[dict[str, Any]] = json.loads(files[-1].read_text(encoding="utf-8"))
    return checks


@pytest.mark.peers
def test_the_task_fixture_passes_every_tasks_scenario_directly(
    task_server: str, tmp_path: Path
) -> None:
    every_scenario_passes(task_server, tmp_path)


def every_scenario_passes(url: str, tmp_path: Path) -> None:
    failures: dict[str, list[str]] = {}
    passed: dict[str, int] = {}
    for scenario in TASK_SCENARIOS:
        checks = run_scenario(url, scenario, tmp_path / "checks")
        bad = [
            f"{c.get('id')}: {c.get('status')} {c.get('errorMessage', '')}"
            for c in checks
            if c.get("status") in ("FAILURE", "WARNING")
        ]
        if bad:
            failures[scenario] = bad
        passed[scenario] = sum(c.get("status") == "SUCCESS" for c in checks)
    assert not failures, json.dumps(failures, indent=2)
    for scenario in TASK_SCENARIOS:
        if scenario not in SKIPPED_BY_THE_SUITE:
            assert passed[scenario] > 0, f"{scenario}: no check passed"


@pytest.fixture(scope="module")
def task_gateway(task_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("tasks-gateway") / "gateway.log"
    with procs.gateway(task_server, procs.free_port(), log_path=log) as base:
        yield base + "/mcp"


@pytest.mark.peers
def test_every_tasks_scenario_passes_through_the_gateway_to_the_modern_task_server(
    task_gateway: str, tmp_path: Path
) -> None:
    """A modern client, a modern upstream with the extension: the gateway passes
    tasks/get, tasks/update and tasks/cancel through (the modern front once
    refused them as not 2026-07-28 methods, -32601), so the ten scenarios pass
    as they do against the fixture alone."""
    every_scenario_passes(task_gateway, tmp_path)


@pytest.mark.peers
def test_sdk1_task_client_through_the_gateway_to_the_modern_task_server(
    task_gateway: str,
) -> None:
    out: Any = procs.run_legacy_client("tasks.py", task_gateway, "modern")
    print(json.dumps(out, indent=1)[:6000])
    assert out["capabilities"]["tasks"]["requests"]["tools"]["call"] == {}
    assert out["task_support"]["slow_compute"] == "optional"
    assert out["task_support"]["failing_job"] == "required"
    task = out["created"]["task"]
    assert task["status"] == "working" and task["ttl"] > 0 and task["pollInterval"] > 0
    assert out["get"]["taskId"] == task["taskId"]
    assert out["result"]["content"][0]["text"] == "computed first after 1s"
    related = out["result"]["_meta"]["io.modelcontextprotocol/related-task"]
    assert related == {"taskId": task["taskId"]}
    assert out["get_after"]["status"] == "completed"
    assert out["cancel"]["result"]["status"] == "cancelled"
    assert out["get_cancelled"]["status"] == "cancelled"
    assert out["cancel_again"]["error"]["code"] == -32602
    assert out["cancel_finished"]["error"]["code"] == -32602
    assert out["input_status"]["status"] == "input_required"
    assert out["input_result"]["content"][0]["text"] == "deleted notes.txt"
    assert len(out["asked"]) == 1 and "notes.txt" in out["asked"][0]["message"]
    meta = out["asked"][0]["meta"]
    assert meta["io.modelcontextprotocol/related-task"] == {"taskId": out["ids"]["ask"]}
    assert out["failing_result"]["result"]["isError"] is True
    assert out["failing_status"]["status"] == "completed"
    listed = {t["taskId"]: t["status"] for t in out["list"]["tasks"]}
    assert listed == {
        out["ids"]["first"]: "completed",
        out["ids"]["long"]: "cancelled",
        out["ids"]["ask"]: "completed",
        out["ids"]["failing"]: "completed",
    }
    assert out["unknown"]["error"]["code"] == -32602
    # Two questions at once, both answered on the tasks/result stream.
    assert out["multi_result"]["content"][0]["text"] == "name=Ada confirm=True"
    # A protocol-level failure: the task is failed, tasks/result answers its error.
    assert out["broken_status"]["status"] == "failed"
    assert out["broken_result"]["error"] == {
        "code": -32603,
        "message": "protocol_error_job broke down",
    }
    # The server ran greet without a task: the client asked for one, and gets it, completed.
    assert out["greet_task"]["task"]["status"] == "completed"
    assert out["greet_get"]["status"] == "completed"
    assert out["greet_result"]["content"][0]["text"] == "Hello, Ada!"


@pytest.mark.peers
def test_a_legacy_sessions_tasks_are_its_own_and_bounded(task_server: str, tmp_path: Path) -> None:
    """MCP_SHIM_LEGACY_TASKS_PER_SESSION=2: the oldest of three is forgotten; another
    session reaches none of them (-32602, as an unknown task)."""
    env = {"MCP_SHIM_LEGACY_TASKS_PER_SESSION": "2"}
    with procs.gateway(task_server, procs.free_port(), env, tmp_path / "gateway.log") as base:
        out: Any = procs.run_legacy_client("tasks.py", base + "/mcp", "bound")
    ids = out["ids"]
    assert out["list"] == ids[1:]
    assert out["first"]["error"]["code"] == -32602
    assert out["last"]["result"]["taskId"] == ids[-1]
    assert out["other_list"] == []
    assert out["other_get"]["error"]["code"] == -32602
    assert out["other_cancel"]["error"]["code"] == -32602
    forgotten = [
        line
        for line in wire.log_lines(tmp_path / "gateway.log")
        if line.get("event") == "legacy_task_forgotten"
    ]
    assert len(forgotten) == 1 and forgotten[0]["limit"] == 2


@pytest.fixture(scope="module")
def legacy_task_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    logs = tmp_path_factory.mktemp("legacy-tasks")
    with (
        procs.legacy_task_min(procs.free_port(), log_path=logs / "server.log") as server,
        procs.gateway(server, procs.free_port(), log_path=logs / "gateway.log") as base,
    ):
        yield {"server": server, "gateway": base + "/mcp"}


@pytest.mark.peers
def test_sdk1_task_client_through_the_gateway_to_a_legacy_task_server(
    legacy_task_gateway: dict[str, str],
) -> None:
    """2025-11-25 on both sides: the tasks pass through unchanged, so the client
    sees what it sees talking to the server itself."""
    direct: Any = procs.run_legacy_client("tasks.py", legacy_task_gateway["server"])
    through: Any = procs.run_legacy_client("tasks.py", legacy_task_gateway["gateway"])
    print(json.dumps({"direct": direct, "through": through}, indent=1)[:8000])
    for out in (direct, through):
        assert out["capabilities"]["tasks"]["requests"]["tools"]["call"] == {}
        assert out["task_support"]["slow_compute"] == "optional"
        assert out["created"]["task"]["status"] == "working"
        assert out["result"]["content"][0]["text"] == "computed first after 1s"
        assert out["get_after"]["status"] == "completed"
        assert out["cancel"]["result"]["status"] == "cancelled"
        assert out["cancel_again"]["error"]["code"] == -32602
        assert out["input_result"]["content"][0]["text"] == "deleted notes.txt"
        assert out["failing_result"]["result"]["isError"] is True
        assert {t["taskId"] for t in out["list"]["tasks"]} >= set(out["ids"].values())
        assert out["unknown"]["error"]["code"] == -32602
    assert _shape(direct) == _shape(through)


def _shape(out: Any) -> Any:
    """What the two runs must share: everything but ids and timestamps."""
    if isinstance(out, dict):
        return {
            k: _shape(v)
            for k, v in out.items()
            if k not in ("taskId", "createdAt", "lastUpdatedAt", "ids", "message", "meta")
        }
    if isinstance(out, list):
        return [_shape(v) for v in out]
    return out


def _legacy_post(
    client: httpx.Client, url: str, message: dict[str, Any], session: str | None = None
) -> httpx.Response:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if session is not None:
        headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    return client.post(url, content=json.dumps(message), headers=headers)


def _only_message(response: httpx.Response) -> dict[str, Any]:
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        (only,) = [json.loads(line) for line in data if line.strip()]
        return dict(only)
    return dict(response.json())


@pytest.mark.peers
def test_an_unknown_task_id_is_quoted_bounded_and_as_json(task_gateway: str) -> None:
    """A legacy client's tasks/get naming a 1 MiB task id (the body is within the
    4 MiB limit): the -32602 quotes at most 100 of its characters, not the
    megabyte; an id that is not a string is quoted as JSON, not as a repr."""
    big = "t" * (1 << 20)
    opening = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "quoting-test", "version": "0"},
        },
    }
    with httpx.Client(timeout=30.0) as client:
        opened = _legacy_post(client, task_gateway, opening)
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert _legacy_post(client, task_gateway, note, session).status_code == 202
        answers = {}
        for rid, task_id in ((1, big), (2, {"a": 1})):
            get = {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "tasks/get",
                "params": {"taskId": task_id},
            }
            response = _legacy_post(client, task_gateway, get, session)
            assert len(response.content) < 1024, len(response.content)
            answers[rid] = _only_message(response)
    for rid, answer in answers.items():
        assert answer["id"] == rid and answer["error"]["code"] == -32602, answer
    long_message = answers[1]["error"]["message"]
    assert long_message == "Unknown task: '" + "t" * 100 + f"'... ({1 << 20} characters)"
    assert answers[2]["error"]["message"] == 'Unknown task: {"a":1}'
