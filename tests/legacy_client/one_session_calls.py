"""One legacy session, many calls, several at once.

Usage: one_session_calls.py URL VERSION ROUNDS CONCURRENCY

Initializes offering VERSION, then ROUNDS rounds of CONCURRENCY `echo` calls
at once (the SDK's HTTP client then holds several connections), each with a
text of its own; reports how many answers carried their own call's text.
"""

from __future__ import annotations

from typing import Any

import anyio
from _common import connect, main


async def run(url: str, args: list[str]) -> dict[str, Any]:
    version, rounds, concurrency = args[0], int(args[1]), int(args[2])
    right: list[int] = []
    wrong: list[Any] = []
    async with connect(url, version) as (session, _, session_id):

        async def one(n: int) -> None:
            result = await session.call_tool("echo", {"text": f"call-{n}"})
            text = result.content[0].text if result.content else None  # type: ignore[union-attr]
            (right if text == f"call-{n}" and not result.isError else wrong).append(
                n if text == f"call-{n}" else text
            )

        for r in range(rounds):
            async with anyio.create_task_group() as group:
                for k in range(concurrency):
                    group.start_soon(one, r * concurrency + k)
        return {"session": session_id(), "right": len(right), "wrong": wrong[:5]}


if __name__ == "__main__":
    main(run)
