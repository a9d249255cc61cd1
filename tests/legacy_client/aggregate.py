"""The aggregated /mcp through the mcp 1.x client (a legacy session on the
gateway): every server's tools listed (prefixed), one tool of each server
called, and an elicitation of the legacy server answered (a server request
on the client's session, routed back to the server that asked).

Usage: aggregate.py URL VERSION TOOL [TOOL ...]   (each TOOL `SERVER__NAME:{json args}`)
"""

from __future__ import annotations

import json
from typing import Any

from _common import connect, dump, main, outcome, types
from mcp.shared.context import RequestContext


async def run(url: str, args: list[str]) -> dict[str, Any]:
    version, *specs = args
    asked: list[str] = []

    async def elicitation(
        context: RequestContext[Any, Any], params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(
            action="accept", content={"username": "ada", "email": "ada@example.com"}
        )

    async with connect(url, version, elicitation_callback=elicitation) as (session, init, _):
        out: dict[str, Any] = {"initialize": dump(init)}
        tools = await session.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["calls"] = {}
        for spec in specs:
            name, _, arguments = spec.partition(":")
            out["calls"][name] = await outcome(
                session.call_tool(name, json.loads(arguments or "{}"))
            )
        out["asked"] = asked
    return out


if __name__ == "__main__":
    main(run)
