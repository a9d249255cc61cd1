"""A worker's accepting on the shared port, off while its load is gathered on a
sibling (app/serving/balance.py) and on again once that sibling is saturated or gone.

Gathering moves the keep-alive connections that exist. New ones would still be
spread by the kernel over every worker accepting on the shared socket, and
each would serve its first period or two here, on a second loop, before it
moved: a client that opens its connections for a short run paid two loops'
wakes for much of it. A worker whose load is gathered elsewhere stops
accepting, and new connections go straight to the worker that carries it.

asyncio has no pause for a server. Off closes this worker's server for the
shared socket (uvloop closes that descriptor and detaches the socket object,
so uvicorn's shutdown closes nothing twice); on opens a new server on a
duplicate kept for it. Connections arriving meanwhile wait in the shared
accept queue, which the other workers and the supervisor keep open.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger("mcp_shim.balance")

Opener = Callable[[socket.socket], Awaitable[asyncio.AbstractServer]]


class AcceptGate:
    """Turns one worker's accepting on the shared port off and on."""

    def __init__(
        self,
        servers: list[asyncio.AbstractServer],
        index: int,
        sock: socket.socket,
        open_server: Opener,
    ) -> None:
        # uvicorn's own list: its shutdown closes whichever server is there then.
        self._servers = servers
        self._index = index
        self._spare = os.dup(sock.fileno())  # close-on-exec: no stdio server inherits it
        self._open = open_server
        self._opening: asyncio.Task[None] | None = None
        self._closed = False
        self.accepting = True

    def set(self, accepting: bool) -> None:
        if self._closed or accepting == self.accepting:
            return
        self.accepting = accepting
        log.info("accepting_changed", accepting=accepting)
        if self._opening is not None:
            return  # the server being opened is kept or closed by `accepting` when it is ready
        if accepting:
            self._opening = asyncio.get_running_loop().create_task(self._reopen())
        else:
            self._servers[self._index].close()

    async def _reopen(self) -> None:
        try:
            server = await self._open(socket.socket(fileno=os.dup(self._spare)))
        except OSError as exc:
            # Accepting stays off here; the other workers accept, and the next
            # period tries again.
            log.error("accepting_failed", error=str(exc))
            self.accepting = False
            return
        finally:
            self._opening = None
        if self._closed or not self.accepting:
            server.close()
            return
        self._servers[self._index] = server

    def close(self) -> None:
        """At shutdown, before uvicorn's: nothing is opened after it."""
        self._closed = True
        if self._opening is not None:
            self._opening.cancel()
            self._opening = None
        os.close(self._spare)
