"""Two legacy clients through the gateway to a modern-only server: subscriptions.

Usage: modern_subscriptions.py URL VERSION

Client A subscribes to test://watched-resource, client B does not; B touches
the resource: only A's GET stream gets notifications/resources/updated (the
gateway serves it from the upstream's subscriptions/listen). Then B changes
the tool list: both get notifications/tools/list_changed. A unsubscribes; a
second touch reaches nobody.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import anyio
from _common import connect, dump, main, outcome, types
from pydantic import AnyUrl

WATCHED = "test://watched-resource"


async def run(url: str, args: list[str]) -> dict[str, Any]:
    version = args[0]
    seen: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    events = {
        "a_updated": anyio.Event(),
        "a_tools": anyio.Event(),
        "b_tools": anyio.Event(),
    }

    def handler(name: str) -> Any:
        async def handle(message: Any) -> None:
            if isinstance(message, types.ServerNotification):
                seen[name].append(dump(message.root))
                if isinstance(message.root, types.ResourceUpdatedNotification) and name == "a":
                    events["a_updated"].set()
                if isinstance(message.root, types.ToolListChangedNotification):
                    events[f"{name}_tools"].set()

        return handle

    async with AsyncExitStack() as stack:
        a, _, _ = await stack.enter_async_context(
            connect(url, version, message_handler=handler("a"))
        )
        b, _, _ = await stack.enter_async_context(
            connect(url, version, message_handler=handler("b"))
        )

        async def streams() -> str:
            result = await b.call_tool("test_listen_count", {})
            block = result.content[0]
            return block.text if isinstance(block, types.TextContent) else "?"

        await anyio.sleep(0.5)  # both GET streams open
        # Same credential, same filter: one upstream listen stream for both.
        out: dict[str, Any] = {"streams_shared": await streams()}
        out["subscribe"] = await outcome(a.subscribe_resource(AnyUrl(WATCHED)))
        await anyio.sleep(0.5)  # A's upstream listen stream now asks for the URI
        out["streams_after_subscribe"] = await streams()
        out["touch"] = await outcome(b.call_tool("test_touch_watched", {}))
        with anyio.move_on_after(5):
            await events["a_updated"].wait()
        out["tool_change"] = await outcome(b.call_tool("test_trigger_tool_change", {}))
        with anyio.move_on_after(5):
            await events["a_tools"].wait()
            await events["b_tools"].wait()
        out["unsubscribe"] = await outcome(a.unsubscribe_resource(AnyUrl(WATCHED)))
        await anyio.sleep(0.5)
        out["streams_after_unsubscribe"] = await streams()
        out["touch_again"] = await outcome(b.call_tool("test_touch_watched", {}))
        await anyio.sleep(1.0)
        out["seen"] = seen
        return out


if __name__ == "__main__":
    main(run)
