"""Tasks across eras: the wire shapes of 2025-11-25 core tasks and of the
2026-07-28 extension `io.modelcontextprotocol/tasks` (SEP-2663), both ways.

2025-11-25 (basic/utilities/tasks): `capabilities.tasks.requests.tools.call`,
a `task: {ttl}` param on `tools/call` answered by `CreateTaskResult`
`{task: {taskId, status, createdAt, lastUpdatedAt, ttl, pollInterval}}`,
`tasks/get` answering the Task itself, the payload from a blocking
`tasks/result` with the related-task `_meta`; a tool result with `isError`
makes the task `failed`.

The extension: `capabilities.extensions["io.modelcontextprotocol/tasks"]`,
the server alone decides to answer a flat `CreateTaskResult`
`{resultType: "task", taskId, status, createdAt, lastUpdatedAt, ttlMs,
pollIntervalMs}`; `tasks/get` answers a `DetailedTask` with the result (or the
error) inlined once terminal and `inputRequests` while `input_required`;
`failed` is for protocol errors only (a tool error is `completed` with
`result.isError`).

Pure functions on parsed JSON; inputs are never mutated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from translators._base import META_RELATED_TASK, JSONObject, meta_without

EXTENSION: Final = "io.modelcontextprotocol/tasks"
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
STATUSES: Final = frozenset({"working", "input_required", *TERMINAL})
# Tool.execution.taskSupport values; absent means forbidden.
MODES: Final = frozenset({"forbidden", "optional", "required"})
# The Task fields both eras share under the same name.
_SHARED_FIELDS: Final = ("status", "statusMessage", "createdAt", "lastUpdatedAt")


def declares_extension(capabilities: Mapping[str, Any] | None) -> bool:
    """Whether ClientCapabilities (2026-07-28) declare the tasks extension."""
    if not isinstance(capabilities, Mapping):
        return False
    extensions = capabilities.get("extensions")
    return isinstance(extensions, Mapping) and isinstance(extensions.get(EXTENSION), Mapping)


def upstream_runs_tool_tasks(server_capabilities: Mapping[str, Any]) -> bool:
    """Whether a 2025-11-25 server declared tasks for `tools/call`."""
    node: Any = server_capabilities.get("tasks")
    for name in ("requests", "tools", "call"):
        if not isinstance(node, Mapping):
            return False
        node = node.get(name)
    return isinstance(node, Mapping)


def advertise(capabilities: JSONObject) -> JSONObject:
    """ServerCapabilities with the extension under `extensions` (and no v1 slot)."""
    extensions = capabilities.get("extensions")
    merged = dict(extensions) if isinstance(extensions, Mapping) else {}
    merged[EXTENSION] = {}
    out = {k: v for k, v in capabilities.items() if k != "tasks"}
    out["extensions"] = merged
    return out


def tool_mode(tool: Mapping[str, Any]) -> str:
    """A tool's `execution.taskSupport`; forbidden when absent or unknown."""
    execution = tool.get("execution")
    mode = execution.get("taskSupport") if isinstance(execution, Mapping) else None
    return mode if isinstance(mode, str) and mode in MODES else "forbidden"


def with_task_support(result: JSONObject, modes: Mapping[str, str]) -> JSONObject:
    """A `tools/list` result with `execution.taskSupport` on every tool `modes`
    names as optional or required (the others carry none: forbidden)."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        return result
    changed = False
    out: list[Any] = []
    for tool in tools:
        name = tool.get("name") if isinstance(tool, dict) else None
        mode = modes.get(name) if isinstance(name, str) else None
        if mode in ("optional", "required"):
            execution = tool.get("execution")
            merged = dict(execution) if isinstance(execution, Mapping) else {}
            merged["taskSupport"] = mode
            tool = {**tool, "execution": merged}
            changed = True
        out.append(tool)
    return {**result, "tools": out} if changed else result


def legacy_task_param(ttl_ms: int) -> JSONObject:
    """The 2025-11-25 `task` param asking for a task kept `ttl_ms`."""
    return {"ttl": ttl_ms}


def legacy_task(result: Mapping[str, Any]) -> JSONObject | None:
    """The Task of a 2025-11-25 CreateTaskResult, or None if `result` is not one."""
    task = result.get("task")
    if not isinstance(task, dict) or not isinstance(task.get("taskId"), str):
        return None
    if task.get("status") not in STATUSES:
        return None
    return task


def _whole_ms(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return max(1, round(value))


def task_fields(task: Mapping[str, Any], task_id: str, poll_ms: int) -> JSONObject:
    """The extension's Task base fields from a 2025-11-25 Task, under the id
    the client sees: `ttl`/`pollInterval` become integer `ttlMs`/`pollIntervalMs`
    (the legacy `ttl` may be null: unlimited)."""
    out: JSONObject = {"taskId": task_id}
    for name in _SHARED_FIELDS:
        if name in task:
            out[name] = task[name]
    out["ttlMs"] = _whole_ms(task.get("ttl"))
    out["pollIntervalMs"] = _whole_ms(task.get("pollInterval")) or poll_ms
    return out


def create_task_result(fields: Mapping[str, Any]) -> JSONObject:
    """The extension's flat CreateTaskResult (Result & Task)."""
    return {"resultType": "task", **fields}


def inline_payload(status: str, payload: Mapping[str, Any]) -> tuple[str, JSONObject]:
    """What a terminal DetailedTask carries, from the legacy `tasks/result`
    response (`{"result": ...}` or `{"error": ...}`) of a task in `status`.

    A JSON-RPC error is `failed` with `error`; a tool result is `completed`
    with `result`, even when the legacy task said `failed` (a tool result with
    `isError`: in the extension `failed` is for protocol errors only). A
    cancelled task carries neither. The related-task `_meta` goes: the task id
    is the DetailedTask's own.
    """
    if status == "cancelled":
        return "cancelled", {}
    error = payload.get("error")
    if isinstance(error, Mapping):
        return "failed", {"error": dict(error)}
    result = payload.get("result")
    if not isinstance(result, dict):
        result = {}
    result = meta_without(result, (META_RELATED_TASK,))
    if status == "failed" and "content" not in result:
        # Failed without a tool result to show: nothing but the status message.
        return "failed", {"error": {"code": -32603, "message": "the task failed"}}
    if status == "failed":
        result = {**result, "isError": True}
    return "completed", {"result": result}


def detailed_task(
    fields: Mapping[str, Any],
    inline: Mapping[str, Any] | None = None,
    input_requests: Mapping[str, Any] | None = None,
) -> JSONObject:
    """The extension's DetailedTask (`tasks/get`): the Task, then the inlined
    result or error once terminal, or the pending `inputRequests`."""
    out: JSONObject = {"resultType": "complete", **fields}
    if inline:
        out.update(inline)
    if input_requests:
        out["status"] = "input_required"
        out["inputRequests"] = dict(input_requests)
    return out


def status_notification(fields: Mapping[str, Any]) -> JSONObject:
    """The extension's `notifications/tasks` for a task's new status."""
    return {"jsonrpc": "2.0", "method": "notifications/tasks", "params": dict(fields)}


def acknowledgement() -> JSONObject:
    """The empty result of `tasks/update` and `tasks/cancel`."""
    return {"resultType": "complete"}
