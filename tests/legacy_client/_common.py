"""Shared by the legacy client scripts: run under the mcp 1.x peer venv (.peers/legacy).

Each script connects to a gateway's MCP endpoint with the official mcp 1.x
``ClientSession`` over Streamable HTTP, as a legacy client would connect to
the server itself, offering the protocol version given on its command line
(the SDK always offers its latest; the scripts set the one to offer). It does
its scenario and prints one JSON document on its last stdout line, which
``tests.procs.run_legacy_client`` parses for the pytest side to assert on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError
from pydantic import BaseModel


def dump(value: Any) -> Any:
    """A pydantic model (or anything holding them) as the JSON the wire carried."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, list | tuple):
        return [dump(v) for v in value]
    if isinstance(value, dict):
        return {k: dump(v) for k, v in value.items()}
    return value


async def outcome(call: Awaitable[Any]) -> dict[str, Any]:
    """{"result": ...} or {"error": {code, message}}: never raises for an MCP error."""
    try:
        return {"result": dump(await call)}
    except McpError as exc:
        return {"error": {"code": exc.error.code, "message": exc.error.message}}


@asynccontextmanager
async def connect(
    url: str,
    version: str,
    *,
    authorization: str | None = None,
    **callbacks: Any,
) -> AsyncIterator[tuple[ClientSession, types.InitializeResult, Callable[[], str | None]]]:
    """A ClientSession that offered `version` at initialize, its result, and its session id."""
    # ClientSession.initialize offers types.LATEST_PROTOCOL_VERSION, read at call time.
    types.LATEST_PROTOCOL_VERSION = version
    headers = {"authorization": authorization} if authorization else None
    async with (
        streamablehttp_client(url, headers=headers, timeout=30) as (read, write, session_id),
        ClientSession(read, write, **callbacks) as session,
    ):
        init = await session.initialize()
        yield session, init, session_id


def main(run: Callable[[str, list[str]], Awaitable[dict[str, Any]]]) -> None:
    """Run `run(url, extra_args)` and print its JSON document as the last stdout line."""
    url, *rest = sys.argv[1:]
    document = anyio.run(run, url, rest)
    sys.stdout.write(json.dumps(document) + "\n")


__all__ = ["connect", "dump", "httpx", "main", "outcome", "types"]
