"""Shared by the modern client scripts: run under the mcp 2.x peer venv (.peers/modern).

Each script connects to a gateway's MCP endpoint with the official mcp 2.x
``Client`` in ``mode="auto"`` (it probes ``server/discover`` and adopts the
2026-07-28 answer; the scripts then check that it really did), does its
scenario and prints one JSON document on its last stdout line, which
``tests.procs.run_modern_client`` parses for the pytest side to assert on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.session import LoggingFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import LoggingLevel
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


def error_of(exc: BaseException) -> dict[str, Any]:
    """What the client surfaced for a failed request."""
    if isinstance(exc, MCPError):
        return {"error": {"code": exc.code, "message": exc.message, "data": exc.data}}
    return {"exception": type(exc).__name__, "text": str(exc)}


async def outcome(call: Awaitable[Any]) -> dict[str, Any]:
    """{"result": ...} or {"error": {code, message, data}}: never raises for an MCP error."""
    try:
        return {"result": dump(await call)}
    except MCPError as exc:
        return error_of(exc)


def connect(
    url: str,
    *,
    authorization: str | None = None,
    log_level: LoggingLevel | None = None,
    logging_callback: LoggingFnT | None = None,
) -> Client:
    headers = {"authorization": authorization} if authorization else {}
    transport = streamable_http_client(
        url, http_client=httpx2.AsyncClient(headers=headers, timeout=30.0)
    )
    return Client(
        transport,
        mode="auto",
        log_level=log_level,
        logging_callback=logging_callback,
        # Every request must reach the gateway: no client-side response cache.
        cache=None,
        read_timeout_seconds=30.0,
    )


def connection_facts(client: Client) -> dict[str, Any]:
    session = client.session
    return {
        "protocolVersion": client.protocol_version,
        "adoptedVia": "discover"
        if session.discover_result is not None
        else ("initialize" if session.initialize_result is not None else None),
    }


def main(run: Callable[[str, list[str]], Awaitable[dict[str, Any]]]) -> None:
    """Run `run(url, extra_args)` and print its JSON document as the last stdout line."""
    url, *rest = sys.argv[1:]
    document = anyio.run(run, url, rest)
    sys.stdout.write(json.dumps(document) + "\n")
