"""A legacy client (mcp 1.x) lists tools and calls one (many servers behind one gateway),
over Streamable HTTP offering VERSION, or over HTTP+SSE (2024-11-05) when URL ends in /sse.

Usage: list_and_call.py URL VERSION TOOL ARGS_JSON
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp.types as types
from _common import connect, dump, main, outcome
from mcp import ClientSession
from mcp.client.sse import sse_client


@asynccontextmanager
async def session_at(url: str, version: str) -> AsyncIterator[tuple[ClientSession, Any]]:
    if not url.endswith("/sse"):
        async with connect(url, version) as (session, init, _session_id):
            yield session, init
        return
    types.LATEST_PROTOCOL_VERSION = version
    async with sse_client(url) as (read, write), ClientSession(read, write) as session:
        yield session, await session.initialize()


async def run(url: str, args: list[str]) -> dict[str, Any]:
    version, tool, arguments = args[0], args[1], json.loads(args[2])
    async with session_at(url, version) as (session, init):
        listed = await session.list_tools()
        return {
            "protocolVersion": init.protocolVersion,
            "server": dump(init.serverInfo),
            "tools": [t.name for t in listed.tools],
            "call": await outcome(session.call_tool(tool, arguments)),
        }


if __name__ == "__main__":
    main(run)
