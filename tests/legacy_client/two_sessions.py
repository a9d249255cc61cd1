"""Two legacy clients at once, each with its own credential.

Usage: two_sessions.py URL VERSION SUFFIX

Client A subscribes to test://watched-resource, client B does not; a third
call updates it: only A's session gets notifications/resources/updated (on
its GET stream). Then a tool is added: both get
notifications/tools/list_changed. `whoami` shows which upstream session and
credential each call arrived on. SUFFIX makes the added tool's name unique.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import anyio
from _common import connect, dump, main, outcome, types
from pydantic import AnyUrl

WATCHED = "test://watched-resource"


async def run(url: str, args: list[str]) -> dict[str, Any]:
    version, suffix = args[0], args[1]
    seen: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    changed = {"a": anyio.Event(), "b": anyio.Event()}

    def handler(name: str) -> Any:
        async def handle(message: Any) -> None:
            if isinstance(message, types.ServerNotification):
                seen[name].append(dump(message.root))
                if isinstance(message.root, types.ToolListChangedNotification):
                    changed[name].set()

        return handle

    async with AsyncExitStack() as stack:
        a, _, a_id = await stack.enter_async_context(
            connect(url, version, authorization="Bearer alice", message_handler=handler("a"))
        )
        b, _, b_id = await stack.enter_async_context(
            connect(url, version, authorization="Bearer bob", message_handler=handler("b"))
        )
        out: dict[str, Any] = {"session_ids_differ": a_id() != b_id()}
        out["whoami"] = {
            "a": await outcome(a.call_tool("whoami", {})),
            "b": await outcome(b.call_tool("whoami", {})),
        }
        out["subscribe"] = await outcome(a.subscribe_resource(AnyUrl(WATCHED)))
        await anyio.sleep(0.5)  # both GET streams open upstream
        out["update"] = await outcome(b.call_tool("update_resource", {"uri": WATCHED}))
        out["add_tool"] = await outcome(b.call_tool("add_tool", {"name": f"lc_{suffix}"}))
        with anyio.move_on_after(5):
            await changed["a"].wait()
            await changed["b"].wait()
        await anyio.sleep(0.3)
        out["unsubscribe"] = await outcome(a.unsubscribe_resource(AnyUrl(WATCHED)))
        await b.call_tool("remove_tool", {"name": f"lc_{suffix}"})
        out["seen"] = seen
        return out


if __name__ == "__main__":
    main(run)
