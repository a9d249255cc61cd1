"""A 2024-11-05 client on the deprecated HTTP+SSE transport, through the gateway.

Usage: sse_tour.py SSE_URL

Connects with the mcp 1.x ``sse_client`` (GET /sse, then POSTs to the
endpoint the first event names), initializes offering 2024-11-05, and does
what such a client does: tools (with a sampling and a roots callback),
prompts, resources, logging, a subscription whose update arrives on the
stream, ping.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp.types as types
from _common import dump, main, outcome
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.shared.context import RequestContext
from pydantic import AnyUrl

WATCHED = "test://watched-resource"


async def run(url: str, args: list[str]) -> dict[str, Any]:
    types.LATEST_PROTOCOL_VERSION = "2024-11-05"
    logs: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    updated = anyio.Event()

    async def sampling(
        context: RequestContext[Any, Any], params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="Paris"),
            model="legacy-client-model",
        )

    async def roots(context: RequestContext[Any, Any]) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///srv/data", name="d")])

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(dump(params))

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ResourceUpdatedNotification
        ):
            updates.append(dump(message.root))
            updated.set()

    async with (
        sse_client(url, timeout=30) as (read, write),
        ClientSession(
            read,
            write,
            sampling_callback=sampling,
            list_roots_callback=roots,
            logging_callback=logging,
            message_handler=on_message,
        ) as session,
    ):
        init = await session.initialize()
        out: dict[str, Any] = {"initialize": dump(init)}
        tools = await session.list_tools()
        out["tools"] = len(tools.tools)
        out["tool_fields"] = sorted({k for t in tools.tools for k in dump(t)})
        out["simple"] = await outcome(session.call_tool("test_simple_text", {}))
        out["structured"] = await outcome(session.call_tool("structured_echo", {"text": "x"}))
        out["sampling"] = await outcome(session.call_tool("test_sampling", {"prompt": "Capital?"}))
        out["roots"] = await outcome(session.call_tool("test_input_required_result_list_roots"))
        out["set_level"] = await outcome(session.set_logging_level("info"))
        out["logging_tool"] = await outcome(session.call_tool("test_tool_with_logging", {}))
        out["logs"] = [m["data"] for m in logs]
        out["prompt"] = await outcome(session.get_prompt("test_simple_prompt"))
        out["read"] = await outcome(session.read_resource(AnyUrl("test://static-text")))
        out["subscribe"] = await outcome(session.subscribe_resource(AnyUrl(WATCHED)))
        await anyio.sleep(0.5)  # the upstream GET stream is open behind the channel
        out["update"] = await outcome(session.call_tool("update_resource", {"uri": WATCHED}))
        with anyio.move_on_after(5):
            await updated.wait()
        out["updates"] = updates
        out["ping"] = await outcome(session.send_ping())
        return out


if __name__ == "__main__":
    main(run)
