"""How long the client holds a request: its disconnect cancels the work done
for it. Used by every answer that is written as it comes (app/fronts/shared/answer.py, the
modern pass-through of app/fronts/modern/passthrough.py, the relay of app/cluster/replicas.py), so
it sits below all of them (docs/architecture.md, "Imports point down")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from app.connection.link import connection_link

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class ClientHeld:
    """`async with ClientHeld(receive, scope) as held:` runs the body for as long as the
    client holds the request: its disconnect cancels the body (2026-07-28
    streamable-http "Cancellation": closing the stream cancels the call), which
    then ends quietly; `held.disconnected` says it did. Clean-up that must not
    be cut short by a disconnect goes after the block, where the watcher is gone.

    On the gateway's own HTTP protocol the disconnect comes as a callback from
    the connection (no task per call: a task per call was 3% of the hot path's
    CPU, bench/profile.py); elsewhere a task awaits ASGI's `http.disconnect`."""

    def __init__(self, receive: Receive, scope: Scope | None = None) -> None:
        self._receive = receive
        self.link = connection_link(scope) if scope is not None else None
        self.disconnected = asyncio.Event()
        self._main: asyncio.Task[Any] | None = None
        self._watcher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ClientHeld:
        self._main = asyncio.current_task()
        assert self._main is not None
        if self.link is None:
            self._watcher = asyncio.create_task(self._watch(self._main))
        elif self.link.lost:
            # Gone before the answer began: a receive() would say so at once.
            # The cancel lands at the body's first await (or in __aexit__),
            # never after the block.
            self._lost()
        else:
            self.link.on_lost(self._lost)
        return self

    def _lost(self) -> None:
        assert self._main is not None
        if not self.disconnected.is_set():
            self.disconnected.set()
            self._main.cancel()

    async def _watch(self, main: asyncio.Task[Any]) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self._lost()
                return

    async def __aexit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        assert self._main is not None
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        if self.link is not None:
            self.link.on_lost(None)
            if self.disconnected.is_set() and kind is not asyncio.CancelledError:
                # The cancel may still be pending, undelivered (the body ended
                # first): take it here rather than at the caller's next await.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(0)
        if not self.disconnected.is_set():
            return False
        # The disconnect's cancel, whether it reached the body or only the await
        # above, is ours to take back: the request is over, not the server.
        if self._main.cancelling():
            self._main.uncancel()
        return kind is asyncio.CancelledError
