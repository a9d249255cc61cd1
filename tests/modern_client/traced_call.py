"""One tools/call under a W3C trace context: every request the client sends
carries the given `traceparent` header, as a traced application's HTTP client would.

Usage: traced_call.py URL TRACEPARENT
"""

from __future__ import annotations

from typing import Any

import httpx2
from _common import connection_facts, dump, main, outcome
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def run(url: str, args: list[str]) -> dict[str, Any]:
    (traceparent,) = args
    http = httpx2.AsyncClient(headers={"traceparent": traceparent}, timeout=30.0)
    transport = streamable_http_client(url, http_client=http)
    async with Client(transport, mode="auto", cache=None, read_timeout_seconds=30.0) as client:
        out: dict[str, Any] = {**connection_facts(client)}
        await client.list_tools()
        out["echo"] = await outcome(client.call_tool("echo", {"text": "traced"}))
        return dump(out)


if __name__ == "__main__":
    main(run)
