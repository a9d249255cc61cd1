"""Connect (server/discover), then list tools, prompts, resources and templates.

Usage: discover_and_list.py URL
"""

from __future__ import annotations

from typing import Any

from _common import connect, connection_facts, dump, main


async def run(url: str, args: list[str]) -> dict[str, Any]:
    async with connect(url) as client:
        discover = client.session.discover_result
        tools = await client.list_tools()
        prompts = await client.list_prompts()
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        return {
            **connection_facts(client),
            "discover": dump(discover),
            "serverInfo": dump(client.server_info),
            "instructions": client.instructions,
            "capabilities": dump(client.server_capabilities),
            "tools": dump(tools),
            "prompts": dump(prompts),
            "resources": dump(resources),
            "templates": dump(templates),
        }


if __name__ == "__main__":
    main(run)
