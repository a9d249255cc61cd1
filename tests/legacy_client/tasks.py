"""A 2025-11-25 client's tasks through the gateway, with the SDK 1.x experimental API.

Usage: tasks.py URL [modern | bound]

Initializes offering 2025-11-25, then with `session.experimental`: a task
created (`call_tool_as_task`), its status (`get_task`), its result (the
blocking `get_task_result`), the session's tasks (`list_tasks`), a running
task cancelled and a finished one refused (`cancel_task`), a task that asks
for input (the question reaches the elicitation callback while
`get_task_result` waits), a tool error, and an unknown task id. The server's
tools: `slow_compute` (seconds, label), `confirm_delete` (filename),
`failing_job` (the conformance suite's fixture names, offered by both the
modern and the legacy task fixtures). With `modern`, also `multi_input` (two
questions at once) and `greet` (a tool the server runs without a task). With
`bound`: three tasks in one session, then what that session and a second one
can still reach.
"""

from __future__ import annotations

import time
from typing import Any

from _common import connect, dump, main, outcome, types
from mcp.shared.context import RequestContext


async def until(session: Any, task_id: str, statuses: set[str], limit_s: float = 20.0) -> Any:
    """`get_task` until the task's status is one of `statuses` (bounded)."""
    deadline = time.monotonic() + limit_s
    while True:
        got = await session.experimental.get_task(task_id)
        if got.status in statuses or time.monotonic() > deadline:
            return got
        await _sleep((got.pollInterval or 100) / 1000)


async def _sleep(seconds: float) -> None:
    import anyio

    await anyio.sleep(min(seconds, 0.5))


async def run(url: str, args: list[str]) -> dict[str, Any]:
    if args[:1] == ["bound"]:
        return await bound(url)
    asked: list[dict[str, Any]] = []

    async def elicitation(
        context: RequestContext[Any, Any], params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        meta = params.meta.model_dump(by_alias=True) if params.meta is not None else {}
        asked.append({"message": params.message, "meta": meta})
        content = {"confirm": True, "ok": True, "name": "Ada"}
        return types.ElicitResult(action="accept", content=content)

    out: dict[str, Any] = {}
    async with connect(url, "2025-11-25", elicitation_callback=elicitation) as (session, init, _):
        x = session.experimental
        out["capabilities"] = dump(init.capabilities)
        tools = await session.list_tools()
        out["task_support"] = {
            t.name: (t.execution.taskSupport if t.execution is not None else None)
            for t in tools.tools
        }
        created = await x.call_tool_as_task("slow_compute", {"seconds": 1, "label": "first"})
        task_id = created.task.taskId
        out["created"] = dump(created)
        out["get"] = dump(await x.get_task(task_id))
        out["result"] = dump(await x.get_task_result(task_id, types.CallToolResult))
        out["get_after"] = dump(await x.get_task(task_id))

        long = await x.call_tool_as_task("slow_compute", {"seconds": 60, "label": "long"})
        out["cancel"] = await outcome(x.cancel_task(long.task.taskId))
        out["get_cancelled"] = dump(await until(session, long.task.taskId, {"cancelled"}))
        out["cancel_again"] = await outcome(x.cancel_task(long.task.taskId))
        out["cancel_finished"] = await outcome(x.cancel_task(task_id))

        ask = await x.call_tool_as_task("confirm_delete", {"filename": "notes.txt"})
        out["input_status"] = dump(await until(session, ask.task.taskId, {"input_required"}))
        out["input_result"] = dump(await x.get_task_result(ask.task.taskId, types.CallToolResult))
        out["asked"] = list(asked)

        failing = await x.call_tool_as_task("failing_job", {})
        out["failing_result"] = await outcome(
            x.get_task_result(failing.task.taskId, types.CallToolResult)
        )
        out["failing_status"] = dump(await x.get_task(failing.task.taskId))

        listed = await x.list_tasks()
        out["list"] = dump(listed)
        out["ids"] = {
            "first": task_id,
            "long": long.task.taskId,
            "ask": ask.task.taskId,
            "failing": failing.task.taskId,
        }
        out["unknown"] = await outcome(x.get_task("no-such-task"))
        if args[:1] == ["modern"]:
            multi = await x.call_tool_as_task("multi_input", {})
            got = await x.get_task_result(multi.task.taskId, types.CallToolResult)
            out["multi_result"] = dump(got)
            broken = await x.call_tool_as_task("protocol_error_job", {})
            out["broken_result"] = await outcome(
                x.get_task_result(broken.task.taskId, types.CallToolResult)
            )
            out["broken_status"] = dump(await x.get_task(broken.task.taskId))
            greet = await x.call_tool_as_task("greet", {"name": "Ada"})
            out["greet_task"] = dump(greet)
            out["greet_get"] = dump(await x.get_task(greet.task.taskId))
            got = await x.get_task_result(greet.task.taskId, types.CallToolResult)
            out["greet_result"] = dump(got)
    return out


async def bound(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with connect(url, "2025-11-25") as (session, _, _):
        x = session.experimental
        ids = []
        for n in range(3):
            created = await x.call_tool_as_task("slow_compute", {"seconds": 0.1, "label": str(n)})
            ids.append(created.task.taskId)
        out["ids"] = ids
        out["list"] = [t.taskId for t in (await x.list_tasks()).tasks]
        out["first"] = await outcome(x.get_task(ids[0]))
        out["last"] = await outcome(x.get_task(ids[-1]))
        async with connect(url, "2025-11-25") as (other, _, _):
            out["other_list"] = [t.taskId for t in (await other.experimental.list_tasks()).tasks]
            out["other_get"] = await outcome(other.experimental.get_task(ids[-1]))
            out["other_cancel"] = await outcome(other.experimental.cancel_task(ids[-1]))
    return out


if __name__ == "__main__":
    main(run)
