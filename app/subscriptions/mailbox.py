"""One listener's bounded queue of notifications, and how it ends.

The fan-out never waits for a listener: `offer` either queues the message or,
when the queue already holds `bound` messages (the client is not reading
fast enough), closes the mailbox with `End.OVERFLOW`. No I/O; the only
asyncio here is the event the reader waits on.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque

from app.call import Message


class End(enum.Enum):
    """Why a subscription ends, when the gateway ends it."""

    SHUTDOWN = "shutdown"  # deliver what is queued, then the graceful closing result
    OVERFLOW = "overflow"  # drop what is queued, then an error response
    UPSTREAM = "upstream"  # the upstream session is gone for good: an error response


class Mailbox:
    __slots__ = ("_bound", "_items", "_wake", "end")

    def __init__(self, bound: int) -> None:
        if bound < 1:
            raise ValueError("a mailbox must hold at least one message")
        self._bound = bound
        self._items: deque[Message] = deque()
        self._wake = asyncio.Event()
        self.end: End | None = None

    @property
    def bound(self) -> int:
        return self._bound

    def __len__(self) -> int:
        return len(self._items)

    def offer(self, message: Message) -> bool:
        """Queue `message`; False when this offer overflowed and closed the mailbox."""
        if self.end is not None:
            return self.end is not End.OVERFLOW
        if len(self._items) >= self._bound:
            self.close(End.OVERFLOW)
            return False
        self._items.append(message)
        self._wake.set()
        return True

    def close(self, end: End) -> None:
        """End the mailbox; the first reason wins. Only a graceful end keeps the queue."""
        if self.end is not None:
            return
        self.end = end
        if end is not End.SHUTDOWN:
            self._items.clear()
        self._wake.set()

    async def get(self, idle_s: float | None) -> Message | End | None:
        """The next message, or the end once the queue is drained, or None after
        `idle_s` seconds without either (time for a keep-alive)."""
        while True:
            if self._items:
                return self._items.popleft()
            if self.end is not None:
                return self.end
            self._wake.clear()
            try:
                async with asyncio.timeout(idle_s):
                    await self._wake.wait()
            except TimeoutError:
                return None
