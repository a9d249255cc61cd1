"""Published MCP servers behind the gateway (stdio, and server-everything over
HTTP+SSE too), driven by the mcp 2.x client.

Usage: stdio_servers.py URL SERVER [ARG]

SERVER is the server behind the gateway (its stdio upstream; server-everything
also in its HTTP+SSE mode):

- ``everything`` (@modelcontextprotocol/server-everything, or the mcp 2.x
  fixture behind a modern upstream): ARG is JSON naming the server's tools
  (tests/integration/everything.py, `client_plan`). Tools listed, the echo and
  sum tools ("sum" may be null), then a sampling and an elicitation round trip:
  the server asks its client (over stdio or the SSE stream, or answers
  `input_required` itself), the gateway answers the client `input_required`,
  the client's own MRTR loop answers through the callbacks below, accepting
  the elicitation with the plan's "elicited" content;
- ``memory`` (@modelcontextprotocol/server-memory): `create_entities` then
  `read_graph`; ARG names the entity;
- ``time`` (PyPI mcp-server-time): `get_current_time` in ARG's time zone;
- ``filesystem`` (@modelcontextprotocol/server-filesystem): `read_text_file`
  of the path ARG.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import mcp_types as types
from _common import connection_facts, dump, main, outcome
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

SAMPLED_TEXT = "Sampled through the shim."

asked: list[str] = []
elicited: dict[str, Any] = {}


async def on_elicit(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    asked.append("elicitation/create")
    return types.ElicitResult(action="accept", content=elicited)


async def on_sample(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    asked.append("sampling/createMessage")
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=SAMPLED_TEXT),
        model="test-model",
        stop_reason="endTurn",
    )


async def run(url: str, args: list[str]) -> dict[str, Any]:
    server, *rest = args
    arg = rest[0] if rest else ""
    client = Client(
        streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=30.0)),
        mode="auto",
        cache=None,
        read_timeout_seconds=30.0,
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
    )
    out: dict[str, Any] = {}
    async with client:
        out.update(connection_facts(client))
        tools = await client.list_tools()
        out["tools"] = sorted(tool.name for tool in tools.tools)
        if server == "everything":
            plan: dict[str, Any] = json.loads(arg)
            elicited.update(plan["elicited"])

            def call(step: dict[str, Any]) -> Any:
                return client.call_tool(step["tool"], step["arguments"])

            out["echo"] = await outcome(call(plan["echo"]))
            out["sum"] = None if plan["sum"] is None else await outcome(call(plan["sum"]))
            asked.clear()
            out["sampling"] = await outcome(call(plan["sampling"]))
            out["elicitation"] = await outcome(call(plan["elicitation"]))
            out["asked"] = list(asked)
        elif server == "memory":
            entity = {"name": arg, "entityType": "person", "observations": ["likes stdio"]}
            out["create"] = await outcome(
                client.call_tool("create_entities", {"entities": [entity]})
            )
            out["graph"] = await outcome(client.call_tool("read_graph", {}))
        elif server == "time":
            out["now"] = await outcome(client.call_tool("get_current_time", {"timezone": arg}))
        elif server == "filesystem":
            out["read"] = await outcome(client.call_tool("read_text_file", {"path": arg}))
        else:
            raise SystemExit(f"unknown server {server!r}")
    return dump(out)


if __name__ == "__main__":
    main(run)
