"""One request in flight upstream per legacy session and id as text."""

from __future__ import annotations

import asyncio

from app.rejections import RequestId


class IdTurns:
    """One request in flight upstream per session and id *as text*.

    The client's ids go upstream unchanged (the session is the client's alone),
    and 1 and "1" are two ids, but servers may key their calls by the id's text:
    the official Python SDK 1.x's Streamable HTTP transport routes each answer
    to the POST of `str(id)`, so with both in flight one answer lands on the
    other's stream and the other call never ends. Such a request waits for its
    twin to finish; any other request passes without waiting."""

    def __init__(self) -> None:
        # Taken keys; the value is the event its waiters wait on, once there are any.
        self._taken: dict[tuple[str, str], asyncio.Event | None] = {}

    def of(self, session_id: str, request_id: RequestId) -> _Turn:
        return _Turn(self._taken, (session_id, str(request_id)))

    def __len__(self) -> int:
        return len(self._taken)

    async def free(self, session_id: str, text: str) -> None:
        """Return once no request of this id text is in flight on the session."""
        key = (session_id, text)
        while key in self._taken:
            turn = self._taken[key]
            if turn is None:
                turn = self._taken[key] = asyncio.Event()
            await turn.wait()


class _Turn:
    __slots__ = ("_key", "_taken")

    def __init__(self, taken: dict[tuple[str, str], asyncio.Event | None], key: tuple[str, str]):
        self._taken = taken
        self._key = key

    async def __aenter__(self) -> None:
        while self._key in self._taken:
            turn = self._taken[self._key]
            if turn is None:
                turn = self._taken[self._key] = asyncio.Event()
            await turn.wait()
        self._taken[self._key] = None

    async def __aexit__(self, *_exc: object) -> None:
        turn = self._taken.pop(self._key, None)
        if turn is not None:
            turn.set()
