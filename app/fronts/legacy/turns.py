"""One request in flight upstream per legacy session and id as text."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from app.rejections import RequestId

_Key = tuple[str, str]


class _Line:
    """The requests waiting for a taken key's turn, in the order they came, and
    what waits for the key to be free (`IdTurns.free`)."""

    __slots__ = ("free", "waiters")

    def __init__(self) -> None:
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.free: list[asyncio.Future[None]] = []


class IdTurns:
    """One request in flight upstream per session and id *as text*.

    The client's ids go upstream unchanged (the session is the client's alone),
    and 1 and "1" are two ids, but servers may key their calls by the id's text:
    the official Python SDK 1.x's Streamable HTTP transport routes each answer
    to the POST of `str(id)`, so with both in flight one answer lands on the
    other's stream and the other call never ends. Such a request waits for its
    twin to finish; any other request passes without waiting.

    Waiters of one key form a line: the end of a turn hands it to the first of
    them and wakes no other, so draining N waiters costs N wake-ups, not the
    N^2 / 2 of waking them all at every turn (bench/turns.py). How many may
    wait is the front's bound (the requests a client may have running or
    waiting), not this one's."""

    def __init__(self) -> None:
        # Taken keys; the value is its line, once anything waits on it.
        self._taken: dict[_Key, _Line | None] = {}

    def of(self, session_id: str, request_id: RequestId) -> _Turn:
        return _Turn(self._taken, (session_id, str(request_id)))

    def __len__(self) -> int:
        return len(self._taken)

    async def free(self, session_id: str, text: str) -> None:
        """Return once no request of this id text is in flight or waiting on the session."""
        key = (session_id, text)
        if key not in self._taken:
            return
        line = self._taken[key]
        if line is None:
            line = self._taken[key] = _Line()
        freed = asyncio.get_running_loop().create_future()
        line.free.append(freed)
        try:
            await freed
        except asyncio.CancelledError:
            with contextlib.suppress(ValueError):  # told already
                line.free.remove(freed)
            raise


class _Turn:
    __slots__ = ("_key", "_taken")

    def __init__(self, taken: dict[_Key, _Line | None], key: _Key):
        self._taken = taken
        self._key = key

    async def __aenter__(self) -> None:
        taken, key = self._taken, self._key
        if key not in taken:
            taken[key] = None
            return
        line = taken[key]
        if line is None:
            line = taken[key] = _Line()
        waiter = asyncio.get_running_loop().create_future()
        line.waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Handed the turn, then cancelled before it ran: the next one's.
                _hand_on(taken, key)
            else:
                # Still in line, unless a turn's end passed over it already.
                with contextlib.suppress(ValueError):
                    line.waiters.remove(waiter)
            raise

    async def __aexit__(self, *_exc: object) -> None:
        _hand_on(self._taken, self._key)


def _hand_on(taken: dict[_Key, _Line | None], key: _Key) -> None:
    """The turn of `key` to its first waiter still waiting (the key stays taken),
    or the key free, and whatever waited for that told."""
    line = taken.get(key)
    if line is not None:
        while line.waiters:
            waiter = line.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        for freed in line.free:
            if not freed.done():
                freed.set_result(None)
    taken.pop(key, None)
