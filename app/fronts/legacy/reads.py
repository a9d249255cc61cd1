"""The read loop of the legacy front's relays: an upstream's messages, raced
against a stop and a quiet timer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator

from app.call import Message


async def reads(
    messages: AsyncIterator[Message],
    *,
    stop: asyncio.Event | None = None,
    quiet_s: float | None = None,
) -> AsyncGenerator[Message | None, None]:
    """`messages`, until `stop` is set, with None after each `quiet_s` without one.

    Each read is raced against `stop`, since closing a stream that another task
    reads does not wake that read; and the read goes on across a quiet period,
    so a message is never lost to the timer."""
    stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
    step: asyncio.Future[Message] | None = None
    try:
        while True:
            if step is None:
                step = asyncio.ensure_future(anext(messages))
            waited = (step,) if stopped is None else (step, stopped)
            await asyncio.wait(waited, timeout=quiet_s, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                if stopped is not None and stopped.done():
                    return
                yield None
                continue
            finished, step = step, None
            try:
                message = finished.result()
            except StopAsyncIteration:
                return
            yield message
    finally:
        if stopped is not None:
            stopped.cancel()
        # Whatever ends the relay (the cancellation, the client gone), the read
        # in flight ends with it, before the caller closes the exchange.
        if step is not None:
            step.cancel()
            with contextlib.suppress(BaseException):
                await step
