"""The aggregated /mcp through the mcp 2.x client: every server's tools listed
(prefixed), one tool of each server called, and an elicitation of the legacy
server answered (the gateway's input_required round, its requestState sealed
with the server's name, the retry routed back to it).

Usage: aggregate.py URL TOOL [TOOL ...]   (each TOOL `SERVER__NAME:{json args}`)
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
from _common import connection_facts, dump, main, outcome
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitRequestParams, ElicitResult

asked: list[str] = []


async def on_elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    asked.append(str(getattr(params, "message", "")))
    return ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})


async def run(url: str, args: list[str]) -> dict[str, Any]:
    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=30.0))
    client = Client(
        transport,
        mode="auto",
        cache=None,
        read_timeout_seconds=30.0,
        elicitation_callback=on_elicit,
    )
    out: dict[str, Any] = {}
    async with client:
        out.update(connection_facts(client))
        tools = await client.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["calls"] = {}
        for spec in args:
            name, _, arguments = spec.partition(":")
            out["calls"][name] = await outcome(
                client.call_tool(name, json.loads(arguments or "{}"))
            )
        out["asked"] = asked
    return dump(out)


if __name__ == "__main__":
    main(run)
