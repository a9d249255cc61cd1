"""A client's connection handed to the sibling worker that owns its session.

With `MCP_SHIM_WORKERS` > 1 and a stdio upstream, a legacy client's session is
a server process, and the process's pipes belong to the worker that started
it: only that worker can serve the session's requests. The kernel hands the
client's connections to any worker, so about half of the requests reached a
worker that could only relay them over HTTP to the owner (app/cluster/replicas.py):
a relayed call cost the gateway more than twice a call served where it
arrived (bench/stdio_workers.py). Here the relaying worker hands
the *connection* to the owner instead, once: the request it read goes with it,
and every later request on that keep-alive connection reaches the owner
directly, with no hop at all.

The channel is a `SOCK_SEQPACKET` socket pair per worker that the supervisor
makes and keeps across the worker's restarts (app/serving/workers.py): the worker reads
its inbox, its siblings hold the outbox. No name in any namespace: nothing but
the gateway's own processes can hand it a connection. One message is the
socket (`SCM_RIGHTS`) and the request as it was read, rebuilt (its body is
whole by then), with `Mcp-Shim-Hop`, so the owner never passes it on again.

A connection is handed over only when nothing else of it is under way in the
worker (no pipelined request, nothing unwritten: `GuardedHttpToolsProtocol.
detach`), and only a request of at most `MAX_MESSAGE` bytes; otherwise, or
when the owner's inbox is full, the request is relayed as before.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import structlog

from app.serving.http_protocol import GuardedHttpToolsProtocol, connection_protocol

log = structlog.get_logger("mcp_shim.handoff")

# One handed-over request with its headers: a request larger than this is
# relayed instead (a tool call's arguments are rarely near it).
MAX_MESSAGE: Final = 64 * 1024
# A connection that waited this long in the inbox (its owner was restarting)
# is closed rather than served: its client has likely given up on it.
STALE_S: Final = 30.0
_FD_SIZE: Final = array.array("i").itemsize


class Handoff:
    """This worker's inbox and its siblings' outboxes (descriptors from the supervisor)."""

    def __init__(self, inbox: int, outboxes: Mapping[str, int]) -> None:
        self._inbox = socket.socket(fileno=inbox)
        self._inbox.setblocking(False)
        self._outboxes = {url: socket.socket(fileno=fd) for url, fd in outboxes.items()}
        for box in self._outboxes.values():
            box.setblocking(False)
        self._factory: Callable[[], GuardedHttpToolsProtocol] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._adopting: set[asyncio.Task[None]] = set()

    # -- receiving --------------------------------------------------------------

    def start(self, factory: Callable[[], GuardedHttpToolsProtocol]) -> None:
        """Serve what siblings hand over with the server's own protocol."""
        self._factory = factory
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._inbox.fileno(), self._receive)

    def _receive(self) -> None:
        while True:
            try:
                data, ancillary, flags, _ = self._inbox.recvmsg(
                    MAX_MESSAGE + 64, socket.CMSG_SPACE(_FD_SIZE)
                )
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("handoff_receive_failed", error=exc.strerror)
                return
            fds = _descriptors(ancillary)
            if not fds or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(data) < 8:
                for fd in fds:
                    os.close(fd)
                log.warning("handoff_malformed", length=len(data))
                continue
            for extra in fds[1:]:
                os.close(extra)
            self._adopt(fds[0], data)

    def _adopt(self, fd: int, data: bytes) -> None:
        sent_at = int.from_bytes(data[:8], "big") / 1e6
        sock = socket.socket(fileno=fd)
        if time.time() - sent_at > STALE_S:
            log.warning("handoff_stale", waited_s=round(time.time() - sent_at, 1))
            sock.close()
            return
        assert self._loop is not None
        task = self._loop.create_task(self._serve(sock, data[8:]))
        self._adopting.add(task)
        task.add_done_callback(self._adopting.discard)

    async def _serve(self, sock: socket.socket, request: bytes) -> None:
        assert self._loop is not None and self._factory is not None
        factory = self._factory

        def adopting() -> GuardedHttpToolsProtocol:
            protocol = factory()
            protocol.adopt(request)  # parsed in connection_made, before any read
            return protocol

        try:
            await self._loop.connect_accepted_socket(adopting, sock)
        except OSError as exc:
            log.warning("handoff_adopt_failed", error=exc.strerror)
            sock.close()

    # -- sending ------------------------------------------------------------------

    def reaches(self, owner: str) -> bool:
        return owner in self._outboxes

    def send_idle(self, owner: str, connection: object, data: bytes = b"") -> bool:
        """Hand a keep-alive connection between requests to `owner` (app/serving/balance.py),
        with `data`, the first bytes of its next request if they came: True when
        it is the owner's now, False when it stays here."""
        outbox = self._outboxes.get(owner)
        if (
            outbox is None
            or len(data) > MAX_MESSAGE
            or not isinstance(connection, GuardedHttpToolsProtocol)
        ):
            return False
        fd = connection.detach_idle()
        return fd is not None and self._pass(outbox, fd, data, connection)

    def send(self, owner: str, scope: Mapping[str, Any], request: bytes) -> bool:
        """Hand this request's connection to `owner` with `request`; True when it
        is the owner's now (this worker writes nothing more on it), False when it
        stays here, untouched, to be relayed."""
        outbox = self._outboxes.get(owner)
        if outbox is None or len(request) > MAX_MESSAGE:
            return False
        protocol = connection_protocol(scope)
        if not isinstance(protocol, GuardedHttpToolsProtocol):
            return False
        fd = protocol.detach(scope)
        return fd is not None and self._pass(outbox, fd, request, protocol)

    @staticmethod
    def _pass(
        outbox: socket.socket, fd: int, request: bytes, protocol: GuardedHttpToolsProtocol
    ) -> bool:
        stamp = int(time.time() * 1e6).to_bytes(8, "big")
        try:
            outbox.sendmsg(
                [stamp, request],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))],
                socket.MSG_DONTWAIT,
            )
        except OSError as exc:
            # Its inbox is full (the owner is stopped or overwhelmed): it stays here.
            log.info("handoff_refused", error=exc.strerror)
            protocol.reattach()
            return False
        finally:
            os.close(fd)
        protocol.handed_off()
        return True

    def close(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._inbox.fileno())
        for task in self._adopting:
            task.cancel()
        self._inbox.close()
        for box in self._outboxes.values():
            box.close()


def _descriptors(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % _FD_SIZE
            fds.extend(array.array("i", payload[:usable]))
    return fds
