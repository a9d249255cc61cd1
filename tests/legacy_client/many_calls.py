"""Several legacy clients at once, each making many calls, some concurrently.

Usage: many_calls.py URL VERSION SESSIONS CALLS SUFFIX

SESSIONS clients (each its own session and its own pool of connections) each
make CALLS `test_simple_text` calls, eight at a time (so over several
connections), then a call whose server asks for sampling on the call's stream,
a call whose stream the server closes mid-way (resumed on the GET stream with
Last-Event-ID), and `add_tool` (SUFFIX makes its name unique), whose
`notifications/tools/list_changed` arrives on the session's GET stream. Prints
what came back, per client.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import anyio
from _common import connect, main, outcome, types
from mcp.shared.context import RequestContext


async def one_client(url: str, version: str, calls: int, name: str) -> dict[str, Any]:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            changed.set()

    async def sampling(
        context: RequestContext[Any, Any], params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="Paris"),
            model="many-calls-model",
        )

    out: dict[str, Any] = {"simple_ok": 0, "simple_failed": []}
    async with AsyncExitStack() as stack:
        session, _, _ = await stack.enter_async_context(
            connect(url, version, message_handler=on_message, sampling_callback=sampling)
        )
        limit = anyio.Semaphore(8)

        async def simple() -> None:
            async with limit:
                got = await outcome(session.call_tool("test_simple_text", {}))
            text = got.get("result", {}).get("content", [{}])[0].get("text", "")
            if text.startswith("This is a simple text"):
                out["simple_ok"] += 1
            else:
                out["simple_failed"].append(got)

        async with anyio.create_task_group() as group:
            for _ in range(calls):
                group.start_soon(simple)
        out["sampling"] = await outcome(session.call_tool("test_sampling", {"prompt": "Capital?"}))
        out["reconnection"] = await outcome(session.call_tool("test_reconnection", {}))
        out["add_tool"] = await outcome(session.call_tool("add_tool", {"name": name}))
        with anyio.move_on_after(10):
            await changed.wait()
        out["list_changed"] = changed.is_set()
        await session.call_tool("remove_tool", {"name": name})
    return out


async def run(url: str, args: list[str]) -> dict[str, Any]:
    version, sessions, calls, suffix = args[0], int(args[1]), int(args[2]), args[3]
    results: dict[str, Any] = {}

    async def client(n: int) -> None:
        results[str(n)] = await one_client(url, version, calls, f"mc_{suffix}_{n}")

    async with anyio.create_task_group() as group:
        for n in range(sessions):
            group.start_soon(client, n)
    return {"clients": results}


if __name__ == "__main__":
    main(run)
