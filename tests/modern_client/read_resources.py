"""resources/read through the gateway: text, binary, template, and not found.

Usage: read_resources.py URL
"""

from __future__ import annotations

from typing import Any

from _common import connect, connection_facts, main, outcome


async def run(url: str, args: list[str]) -> dict[str, Any]:
    async with connect(url) as client:
        return {
            **connection_facts(client),
            "text": await outcome(client.read_resource("test://static-text")),
            "binary": await outcome(client.read_resource("test://static-binary")),
            "template": await outcome(client.read_resource("test://template/42/data")),
            "not_found": await outcome(client.read_resource("test://does-not-exist")),
        }


if __name__ == "__main__":
    main(run)
