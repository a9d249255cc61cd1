"""subscriptions/listen with the mcp 2.x client's own support (mcp.client.subscriptions).

Usage: subscriptions.py URL SUFFIX

Opens three concurrent listen streams (tools; prompts + one watched URI;
resources list), changes the fixture's tool list, prompt list and resource
list and updates the watched resource, and reports what each subscription
was acknowledged for and which typed events it received. SUFFIX makes the
names of what it adds unique, so runs do not collide.
"""

from __future__ import annotations

from typing import Any

import anyio
from _common import connect, connection_facts, dump, main, outcome
from mcp.client.subscriptions import Subscription
from mcp.shared.subscriptions import ServerEvent

WATCHED = "test://watched-resource"


def describe(event: ServerEvent) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(event).__name__}
    uri = getattr(event, "uri", None)
    if uri is not None:
        out["uri"] = uri
    return out


async def collect(sub: Subscription, count: int, wait_s: float = 5.0) -> list[dict[str, Any]]:
    """The next `count` events, then whatever else comes within a short quiet period."""
    events: list[dict[str, Any]] = []
    with anyio.move_on_after(wait_s):
        async for event in sub:
            events.append(describe(event))
            if len(events) >= count:
                break
    with anyio.move_on_after(0.3):
        async for event in sub:
            events.append(describe(event))
    return events


async def run(url: str, args: list[str]) -> dict[str, Any]:
    suffix = args[0]
    async with connect(url) as client:
        out: dict[str, Any] = {**connection_facts(client)}
        caps = client.server_capabilities
        out["capabilities"] = dump(caps)
        async with (
            client.listen(tools_list_changed=True) as tools,
            client.listen(prompts_list_changed=True, resource_subscriptions=[WATCHED]) as mixed,
            client.listen(resources_list_changed=True) as resources,
        ):
            subs = {"tools": tools, "mixed": mixed, "resources": resources}
            out["ids"] = {name: sub.subscription_id for name, sub in subs.items()}
            out["honoured"] = {name: dump(sub.honored) for name, sub in subs.items()}
            out["calls"] = [
                await outcome(client.call_tool("add_tool", {"name": f"mc_tool_{suffix}"})),
                await outcome(client.call_tool("add_prompt", {"name": f"mc_prompt_{suffix}"})),
                await outcome(client.call_tool("add_resource", {"name": f"mc_res_{suffix}"})),
                await outcome(client.call_tool("update_resource", {"uri": WATCHED})),
            ]
            out["events"] = {
                "tools": await collect(tools, 1),
                "mixed": await collect(mixed, 2),
                "resources": await collect(resources, 1),
            }
        # After leaving: a fresh subscription still works (the gateway cleaned up).
        async with client.listen(tools_list_changed=True) as again:
            await client.call_tool("remove_tool", {"name": f"mc_tool_{suffix}"})
            out["again"] = await collect(again, 1)
        return out


if __name__ == "__main__":
    main(run)
