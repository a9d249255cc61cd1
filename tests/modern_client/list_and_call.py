"""A 2026-07-28 client lists tools and calls one (many servers behind one gateway).

Usage: list_and_call.py URL TOOL ARGS_JSON
"""

from __future__ import annotations

import json
from typing import Any

from _common import connect, connection_facts, dump, main, outcome


async def run(url: str, args: list[str]) -> dict[str, Any]:
    tool, arguments = args[0], json.loads(args[1])
    async with connect(url) as client:
        listed = await client.list_tools()
        out: dict[str, Any] = {**connection_facts(client)}
        out["tools"] = [t.name for t in listed.tools]
        out["call"] = await outcome(client.call_tool(tool, arguments))
        return dump(out)


if __name__ == "__main__":
    main(run)
