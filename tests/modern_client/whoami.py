"""Which legacy session a caller lands on: `whoami` twice with one Authorization header.

Usage: whoami.py URL AUTHORIZATION
"""

from __future__ import annotations

from typing import Any

from _common import connect, connection_facts, main, outcome


async def run(url: str, args: list[str]) -> dict[str, Any]:
    async with connect(url, authorization=args[0]) as client:
        first = await outcome(client.call_tool("whoami", {}))
        second = await outcome(client.call_tool("whoami", {}))
        return {**connection_facts(client), "calls": [first, second]}


if __name__ == "__main__":
    main(run)
