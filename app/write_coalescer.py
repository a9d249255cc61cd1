"""Small socket writes of one event-loop iteration, sent together at the start
of the next (and a stdio server's stdin lines, a pipe, the same way).

A write to a loopback peer that sleeps in `epoll_wait` wakes it, and the
waking is paid by the writer: a small TCP write costs several times more when
its reader sleeps than when it is running (`bench/wake_cost.py`). Under load
the gateway's writes are
spread over an iteration, each call's upstream request and answer between
other calls' work, so nearly every write woke its peer, which did its little
work and slept again. Queued, and written back to back when the loop comes
round, the iteration's writes to a peer wake it once: the others find it
running, and it reads them in one pass. A write waits at most for the rest of
the iteration it was made in (the calls already under way there) and one
`epoll_wait` that does not block; the writes to one transport keep their order
and go out as one. A stdio server asleep in its read of stdin is woken the
same way by each line (app/upstream/stdio/session.py queues its lines here).

Large writes go at once, after what is queued for their transport: the
transport's flow control (`pause_writing` at its high-water mark) then sees
every large body as it is written, and the readers' write timeouts stay what
they measure (app/fronts/shared/answer.py, app/serving/http_protocol.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

# Queued bytes per transport stay under this: a write that would reach it goes
# at once, with what is queued before it.
SMALL_WRITE = 16 * 1024


class _Queued:
    __slots__ = ("chunks", "size")

    def __init__(self, data: bytes) -> None:
        self.chunks = [data]
        self.size = len(data)


class WriteCoalescer:
    """One event loop's queue of small writes. `for_loop(loop)` gives it."""

    __slots__ = ("_due", "_loop", "_queued")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # Insertion-ordered: transports are written in the order they first wrote.
        self._queued: dict[asyncio.WriteTransport, _Queued] = {}
        self._due = False

    def write(self, transport: asyncio.WriteTransport, data: bytes) -> None:
        queued = self._queued.get(transport)
        if queued is None:
            if len(data) >= SMALL_WRITE:
                transport.write(data)
                return
            self._queued[transport] = _Queued(data)
            if not self._due:
                self._due = True
                self._loop.call_soon(self.flush_all)
            return
        queued.chunks.append(data)
        queued.size += len(data)
        if queued.size >= SMALL_WRITE:
            del self._queued[transport]
            _send(transport, queued.chunks)

    def flush(self, transport: asyncio.WriteTransport) -> None:
        """Write what is queued for `transport` now: before it is closed, or
        before a write that does not go through the queue."""
        queued = self._queued.pop(transport, None)
        if queued is not None:
            _send(transport, queued.chunks)

    def discard(self, transport: asyncio.WriteTransport) -> None:
        """Drop what is queued for `transport` (it is aborted)."""
        self._queued.pop(transport, None)

    def queued_bytes(self, transport: asyncio.WriteTransport) -> int:
        queued = self._queued.get(transport)
        return 0 if queued is None else queued.size

    def flush_all(self) -> None:
        self._due = False
        queued, self._queued = self._queued, {}
        for transport, pending in queued.items():
            _send(transport, pending.chunks)


def _send(transport: asyncio.WriteTransport, chunks: list[bytes]) -> None:
    # A transport closed (or aborted) since its write was queued takes nothing,
    # as a closed transport's own write() would have: its protocol is told
    # through connection_lost, where the loss is handled.
    if transport.is_closing():
        return
    try:
        transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))
    except (OSError, RuntimeError):
        # The socket failed under the write: connection_lost follows for this
        # transport; the other transports' writes still go.
        return


async def let_writes_out() -> None:
    """After an answer's last write, before the call's bookkeeping (closing the
    upstream exchange, the log line, metrics): the task steps aside once, and
    the queued writes go out at the start of the next iteration instead of
    after that work (which would add it to the answer's latency)."""
    await asyncio.sleep(0)


_current: tuple[asyncio.AbstractEventLoop, WriteCoalescer] | None = None


def for_loop(loop: asyncio.AbstractEventLoop) -> WriteCoalescer:
    """The coalescer of `loop` (a process serves from one loop; a test suite
    runs many, one after another)."""
    global _current
    current = _current
    if current is None or current[0] is not loop:
        current = _current = (loop, WriteCoalescer(loop))
    return current[1]


class CoalescedTransport(asyncio.Transport):
    """A served connection's transport as uvicorn's protocol sees it: its writes
    go through the loop's `WriteCoalescer`; `close()` writes what is queued
    first, `abort()` drops it. Everything else is the transport's own."""

    __slots__ = ("_transport", "_writes")

    def __init__(self, transport: asyncio.Transport, writes: WriteCoalescer) -> None:
        super().__init__()
        self._transport = transport
        self._writes = writes

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._writes.write(self._transport, bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def close(self) -> None:
        self._writes.flush(self._transport)
        self._transport.close()

    def flush_queued(self) -> asyncio.Transport:
        """Write what is queued now; the transport underneath (a connection
        handed to another worker is checked and dropped there: app/serving/handoff.py)."""
        self._writes.flush(self._transport)
        return self._transport

    def abort(self) -> None:
        self._writes.discard(self._transport)
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._writes.queued_bytes(self._transport)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return False

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()
