"""`IdTurns` (app/fronts/legacy/turns.py): a legacy client's requests whose ids have one
text (1 and "1") never run upstream at once; others never wait (issue 19)."""

from __future__ import annotations

import asyncio

from app.fronts.legacy.turns import IdTurns


async def test_ids_of_one_text_take_turns_and_others_do_not_wait() -> None:
    turns = IdTurns()
    order: list[str] = []
    first_in = asyncio.Event()
    release = asyncio.Event()

    async def hold(request_id: int | str, name: str) -> None:
        async with turns.of("s", request_id):
            order.append(f"{name} in")
            first_in.set()
            await release.wait()
            order.append(f"{name} out")

    async def quick(session: str, request_id: int | str, name: str) -> None:
        async with turns.of(session, request_id):
            order.append(name)

    holder = asyncio.create_task(hold(1, "int"))
    await first_in.wait()
    # Another id, or the same text on another session: no wait.
    await asyncio.wait_for(quick("s", 2, "other id"), 1.0)
    await asyncio.wait_for(quick("t", "1", "other session"), 1.0)
    twin = asyncio.create_task(quick("s", "1", "text"))
    await asyncio.sleep(0)
    assert not twin.done()
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, twin), 1.0)
    assert order == ["int in", "other id", "other session", "int out", "text"]
    assert len(turns) == 0


async def test_a_waiter_cancelled_takes_nothing() -> None:
    turns = IdTurns()
    async with turns.of("s", 1):
        waiter = asyncio.create_task(quick_enter(turns))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    assert len(turns) == 0
    await asyncio.wait_for(quick_enter(turns), 1.0)
    assert len(turns) == 0


async def quick_enter(turns: IdTurns) -> None:
    async with turns.of("s", "1"):
        pass
