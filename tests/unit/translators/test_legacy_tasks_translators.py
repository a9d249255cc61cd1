"""Golden tables: task shapes from the 2026-07-28 tasks extension to 2025-11-25
(translators/legacy_tasks.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from translators import legacy_tasks as t
from translators import translate
from translators.registry import get_version

RELATED = "io.modelcontextprotocol/related-task"
CAPS = "io.modelcontextprotocol/clientCapabilities"

STAMPS = {"createdAt": "2026-12-01T10:00:00Z", "lastUpdatedAt": "2026-12-01T10:00:01Z"}

# (extension form, 2025-11-25 form) of a Task
TASKS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (
        {"taskId": "a", "status": "working", **STAMPS, "ttlMs": 60000, "pollIntervalMs": 200},
        {"taskId": "a", "status": "working", **STAMPS, "ttl": 60000, "pollInterval": 200},
    ),
    (
        {"taskId": "b", "status": "input_required", "statusMessage": "?", **STAMPS, "ttlMs": None},
        {"taskId": "b", "status": "input_required", "statusMessage": "?", **STAMPS, "ttl": None},
    ),
    (
        {"taskId": "c", "status": "cancelled", **STAMPS, "ttlMs": 5},
        {"taskId": "c", "status": "cancelled", **STAMPS, "ttl": 5},
    ),
]


@pytest.mark.parametrize(("modern", "legacy"), TASKS)
def test_task_fields_down(modern: dict[str, Any], legacy: dict[str, Any]) -> None:
    before = copy.deepcopy(modern)
    assert t.legacy_task(modern) == legacy
    assert modern == before


@pytest.mark.parametrize(("modern", "legacy"), TASKS)
def test_create_task_result_down(modern: dict[str, Any], legacy: dict[str, Any]) -> None:
    flat = {"resultType": "task", **modern}
    assert t.create_task_result_down(flat) == {"task": legacy}
    assert t.is_create_task_result(flat)
    assert not t.is_create_task_result({"task": legacy})
    assert not t.is_create_task_result({"resultType": "complete", "content": []})


def test_a_missing_ttl_is_null_for_a_legacy_client() -> None:
    # 2025-11-25 Task requires ttl (null: unlimited); the extension may omit it.
    assert t.legacy_task({"taskId": "x", "status": "working", **STAMPS})["ttl"] is None


DONE = {"content": [{"type": "text", "text": "ok"}]}
FAILED = {"code": -32603, "message": "broke"}
ASKED = {"k1": {"method": "elicitation/create", "params": {"message": "?"}}}

# (DetailedTask from tasks/get, GetTaskResult for 2025-11-25, what 2025-11-25
# learned elsewhere: tasks/result payload, error, pending questions)
DETAILED: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    (
        {"resultType": "complete", **TASKS[0][0]},
        TASKS[0][1],
        {},
    ),
    (
        {"resultType": "complete", **TASKS[0][0], "status": "completed", "result": DONE},
        {**TASKS[0][1], "status": "completed"},
        {"result": {**DONE, "_meta": {RELATED: {"taskId": "a"}}}},
    ),
    (
        {"resultType": "complete", **TASKS[0][0], "status": "failed", "error": FAILED},
        {**TASKS[0][1], "status": "failed"},
        {"error": FAILED},
    ),
    (
        {"resultType": "complete", **TASKS[1][0], "inputRequests": ASKED},
        TASKS[1][1],
        {"input_requests": ASKED},
    ),
]


@pytest.mark.parametrize(("detailed", "legacy", "_elsewhere"), DETAILED)
def test_tasks_get_down(
    detailed: dict[str, Any], legacy: dict[str, Any], _elsewhere: dict[str, Any]
) -> None:
    assert t.get_task_result_down(detailed) == legacy


def test_task_payload_and_related_requests_carry_the_task() -> None:
    assert t.task_payload(DONE, "a") == {**DONE, "_meta": {RELATED: {"taskId": "a"}}}
    request = {"jsonrpc": "2.0", "id": 1, "method": "elicitation/create", "params": {"m": 1}}
    assert t.related_request(request, "a")["params"] == {
        "m": 1,
        "_meta": {RELATED: {"taskId": "a"}},
    }
    assert request["params"] == {"m": 1}


LEGACY_CAP = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
# (modern server capabilities, 2025-11-25's)
CAPABILITIES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"tools": {}, "extensions": {t.EXTENSION: {}}}, {"tools": {}, "tasks": LEGACY_CAP}),
    ({"tools": {}, "extensions": {"other/ext": {}}}, {"tools": {}}),
    ({"tools": {}}, {"tools": {}}),
]


@pytest.mark.parametrize(("modern", "legacy"), CAPABILITIES)
def test_server_capabilities_down_the_chain(modern: dict[str, Any], legacy: dict[str, Any]) -> None:
    result = translate.result(
        {"capabilities": modern, "serverInfo": {"name": "s", "version": "1"}},
        "initialize",
        get_version("2026-07-28"),  # type: ignore[arg-type]
        get_version("2025-11-25"),  # type: ignore[arg-type]
    )
    assert result["capabilities"] == legacy
    # 2025-06-18 has no tasks: nothing of them reaches its clients.
    older = translate.result(
        {"capabilities": modern, "serverInfo": {"name": "s", "version": "1"}},
        "initialize",
        get_version("2026-07-28"),  # type: ignore[arg-type]
        get_version("2025-06-18"),  # type: ignore[arg-type]
    )
    assert "tasks" not in older["capabilities"]


def test_server_capabilities_down() -> None:
    assert t.server_capabilities_down({"extensions": {t.EXTENSION: {}}})["tasks"] == LEGACY_CAP


def test_declaring_the_extension_on_a_request() -> None:
    bare = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": "a"}}
    declared = t.declaring_extension(bare)
    assert declared["params"]["_meta"][CAPS] == {"extensions": {t.EXTENSION: {}}}
    assert bare["params"] == {"taskId": "a"}
    kept = {
        **bare,
        "params": {"taskId": "a", "_meta": {CAPS: {"elicitation": {}, "extensions": {"x": {}}}}},
    }
    assert t.declaring_extension(kept)["params"]["_meta"][CAPS] == {
        "elicitation": {},
        "extensions": {"x": {}, t.EXTENSION: {}},
    }
    assert t.declaring_extension(declared) is declared
