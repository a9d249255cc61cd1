"""The read loop of the legacy front's relays (app/fronts/legacy/reads.py `reads`): a
call's stream ended by the client's cancellation, a GET stream kept alive
with comments. Plain asyncio, no server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from app.fronts.legacy.reads import reads
from tests.waiting import until


class Source:
    """An upstream stream the test feeds; says whether a read was left running."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.reading = False

    async def messages(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            self.reading = True
            try:
                item = await self.queue.get()
            finally:
                self.reading = False
            if item is None:
                return
            yield item


async def test_until_stops_a_silent_stream_at_the_cancellation() -> None:
    source = Source()
    stop = asyncio.Event()
    relayed = reads(source.messages(), stop=stop)
    source.queue.put_nowait({"n": 1})
    assert await anext(relayed) == {"n": 1}
    pending = asyncio.ensure_future(anext(relayed))
    await until(lambda: source.reading, what="the relay's next read")
    assert not pending.done()
    stop.set()  # the upstream never answers: the relay must not wait for it
    try:
        await asyncio.wait_for(pending, 1)
        raise AssertionError("the relay went on after the cancellation")
    except StopAsyncIteration:
        pass
    assert not source.reading  # the read in flight was cancelled with it


async def test_until_passes_everything_and_the_end_through() -> None:
    source = Source()
    for n in range(3):
        source.queue.put_nowait({"n": n})
    source.queue.put_nowait(None)
    got = [m async for m in reads(source.messages(), stop=asyncio.Event())]
    assert got == [{"n": 0}, {"n": 1}, {"n": 2}]


async def test_keepalive_on_quiet_and_no_message_lost_to_the_timer() -> None:
    source = Source()
    relayed = reads(source.messages(), quiet_s=0.05)
    assert await anext(relayed) is None  # quiet: a keepalive
    assert await anext(relayed) is None
    source.queue.put_nowait({"n": 1})  # arrives while the same read is in flight
    assert await anext(relayed) == {"n": 1}
    source.queue.put_nowait(None)
    items = [item async for item in relayed]
    assert all(item is None for item in items)


async def test_keepalive_relay_closed_cancels_its_read() -> None:
    source = Source()
    relayed = reads(source.messages(), quiet_s=0.05)
    assert await anext(relayed) is None
    assert source.reading
    await relayed.aclose()
    await until(lambda: not source.reading, what="the read cancelled")


async def test_until_cancelled_from_outside_cancels_its_read() -> None:
    """The client went away (the answer's task is cancelled): the read in
    flight ends too, before the front closes the exchange under it."""
    source = Source()
    relayed = reads(source.messages(), stop=asyncio.Event())
    waiting = asyncio.ensure_future(anext(relayed))
    await until(lambda: source.reading, what="the relay's read")
    waiting.cancel()
    try:
        await waiting
    except asyncio.CancelledError:
        pass
    await until(lambda: not source.reading, what="the read cancelled")


async def test_stop_and_quiet_together_keepalive_then_stop() -> None:
    source = Source()
    stop = asyncio.Event()
    relayed = reads(source.messages(), stop=stop, quiet_s=0.05)
    assert await anext(relayed) is None  # quiet: a keepalive, the read goes on
    source.queue.put_nowait({"n": 1})
    assert await anext(relayed) == {"n": 1}
    pending = asyncio.ensure_future(anext(relayed))
    await until(lambda: source.reading, what="the relay's next read")
    stop.set()
    assert [item async for item in _drain(pending, relayed)] == []
    assert not source.reading


async def _drain(
    first: asyncio.Future[dict[str, Any] | None], rest: AsyncIterator[dict[str, Any] | None]
) -> AsyncIterator[dict[str, Any] | None]:
    """What the relay yields from `first` on, keepalives aside, until it ends."""
    try:
        item = await first
    except StopAsyncIteration:
        return
    if item is not None:
        yield item
    async for item in rest:
        if item is not None:
            yield item
