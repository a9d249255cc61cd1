"""The workers' shared load table (app/serving/balance.py): each worker's busy fraction
in a memfd the supervisor makes, one slot per worker; after the slots, flags
that any worker raises for all (`flag`), which outlive a worker's restart.

A module of its own so that the supervisor, which creates the table, imports
neither the HTTP server nor the balancer (it stays a small process)."""

from __future__ import annotations

import mmap
import os
import struct
from typing import Final

# A slot not written for this long belongs to a worker that is gone or starting.
STALE_S: Final = 1.0
_SLOT: Final = struct.Struct("=dd")  # busy fraction, CLOCK_MONOTONIC of the write
# One byte per flag: a worker raising one never writes over another's (bits of
# one word would be read, or-ed and written back, and two at once lose one).
FLAGS: Final = 128
# A stdio server died of a cancellation: no worker sends them (app/upstream/stdio).
# One flag per server of the gateway: CANCELS_WITHHELD + the index of its graph
# (app/servers: at most MAX_SERVERS of them, and the aggregated /mcp's).
CANCELS_WITHHELD: Final = 0


class BoardFlag:
    """One flag of the table: raised by any worker, seen by all; never lowered.
    Reads as lowered once the table is closed (the worker is stopping)."""

    __slots__ = ("_board", "_index")

    def __init__(self, board: LoadBoard, index: int) -> None:
        if not 0 <= index < FLAGS:
            raise IndexError(f"flag {index} is not one of the table's {FLAGS}")
        self._board = board
        self._index = index

    def is_set(self) -> bool:
        return self._board.flagged(self._index)

    def set(self) -> None:
        self._board.raise_flag(self._index)


class LoadBoard:
    """Each worker's busy fraction, in memory shared by the supervisor and workers."""

    def __init__(self, fd: int, slots: int) -> None:
        self._map = mmap.mmap(fd, slots * _SLOT.size + FLAGS)
        self.slots = slots

    @staticmethod
    def create(slots: int) -> int:
        """A new table's descriptor, for the supervisor to pass to the workers."""
        fd = os.memfd_create("mcp-shim-load", 0)  # no MFD_CLOEXEC: workers inherit it
        os.ftruncate(fd, slots * _SLOT.size + FLAGS)
        return fd

    def flag(self, index: int) -> BoardFlag:
        return BoardFlag(self, index)

    def flagged(self, index: int) -> bool:
        if self._map.closed:
            return False
        return self._map[self.slots * _SLOT.size + index] != 0

    def raise_flag(self, index: int) -> None:
        if not self._map.closed:
            self._map[self.slots * _SLOT.size + index] = 1

    def write(self, slot: int, busy: float, now: float) -> None:
        _SLOT.pack_into(self._map, slot * _SLOT.size, busy, now)

    def read(self, now: float) -> list[float | None]:
        fresh: list[float | None] = []
        for slot in range(self.slots):
            busy, stamp = _SLOT.unpack_from(self._map, slot * _SLOT.size)
            fresh.append(busy if 0 < stamp and now - stamp < STALE_S else None)
        return fresh

    def close(self) -> None:
        self._map.close()
