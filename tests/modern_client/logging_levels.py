"""notifications/message through the gateway, with and without a logLevel opt-in.

Usage: logging_levels.py URL [LEVEL]   (no LEVEL: the client does not opt in)
"""

from __future__ import annotations

from typing import Any

from _common import connect, connection_facts, dump, main, outcome
from mcp_types import LoggingMessageNotificationParams


async def run(url: str, args: list[str]) -> dict[str, Any]:
    level = args[0] if args else None
    received: list[dict[str, Any]] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        received.append(dump(params))

    async with connect(url, log_level=level, logging_callback=on_log) as client:  # type: ignore[arg-type]
        result = await outcome(client.call_tool("emit_logs", {}))
        return {**connection_facts(client), "result": result, "received": received}


if __name__ == "__main__":
    main(run)
