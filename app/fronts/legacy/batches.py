"""A JSON-RPC batch's requests (2024-11-05, 2025-03-26), each run on its own:
their answers collected for a client that takes JSON, or merged into one
event stream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from app.call import Message, Outgoing
from app.cluster.session import LegacySession
from app.fronts.legacy import checks as front
from app.fronts.legacy.calls import LegacyCalls


async def collect(
    calls: LegacyCalls, session: LegacySession, request: front.LegacyRequest
) -> Message:
    """One batch member's response, for a client that takes no event stream: what the
    upstream asks on the way cannot reach it, so the gateway answers that itself."""
    events_in = calls.call(session, request, resumable=False, streamed=False)
    async with contextlib.aclosing(events_in) as events:
        async for out in events:
            if out.final:
                return out.message
    raise AssertionError("a call's events end with its answer")  # pragma: no cover


async def merged(
    calls: LegacyCalls, session: LegacySession, requests: list[front.LegacyRequest]
) -> AsyncGenerator[Outgoing, None]:
    """One SSE stream for the whole batch: what each call relays, as it comes, and
    every response; the stream ends with the last of them."""
    queue: asyncio.Queue[Outgoing] = asyncio.Queue()

    async def pump(request: front.LegacyRequest) -> None:
        # A member that fails still answers, or the stream would wait for it forever.
        events_in = calls.call(session, request, resumable=False)
        answered = False
        async with contextlib.aclosing(events_in) as events:
            async for out in events:
                answered = answered or out.final
                await queue.put(out)
        if not answered:
            # Cancelled by the client: no answer, but the member is done.
            await queue.put(Outgoing({}, True, keepalive=True))

    tasks = [asyncio.create_task(pump(r)) for r in requests]
    try:
        yield Outgoing({}, keepalive=True)  # an event stream from the start
        answered = 0
        while answered < len(requests):
            out = await queue.get()
            if out.final:
                answered += 1
                if out.keepalive:
                    continue
                out = Outgoing(out.message, answered == len(requests), 200, event_id=out.event_id)
            yield out
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
