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
_FLAGS: Final = struct.Struct("=Q")
# A stdio server died of a cancellation: no worker sends them (app/upstream/stdio).
CANCELS_WITHHELD: Final = 1


class BoardFlag:
    """One flag of the table: raised by any worker, seen by all; never lowered.
    Reads as lowered once the table is closed (the worker is stopping)."""

    __slots__ = ("_bit", "_board")

    def __init__(self, board: LoadBoard, bit: int) -> None:
        self._board = board
        self._bit = bit

    def is_set(self) -> bool:
        return bool(self._board.flags() & self._bit)

    def set(self) -> None:
        self._board.raise_flags(self._bit)


class LoadBoard:
    """Each worker's busy fraction, in memory shared by the supervisor and workers."""

    def __init__(self, fd: int, slots: int) -> None:
        self._map = mmap.mmap(fd, slots * _SLOT.size + _FLAGS.size)
        self.slots = slots

    @staticmethod
    def create(slots: int) -> int:
        """A new table's descriptor, for the supervisor to pass to the workers."""
        fd = os.memfd_create("mcp-shim-load", 0)  # no MFD_CLOEXEC: workers inherit it
        os.ftruncate(fd, slots * _SLOT.size + _FLAGS.size)
        return fd

    def flag(self, bit: int) -> BoardFlag:
        return BoardFlag(self, bit)

    def flags(self) -> int:
        if self._map.closed:
            return 0
        (flags,) = _FLAGS.unpack_from(self._map, self.slots * _SLOT.size)
        return int(flags)

    def raise_flags(self, bits: int) -> None:
        # Read, or, write: two workers raising different flags at the same
        # instant could lose one; there is one flag so far.
        if not self._map.closed:
            _FLAGS.pack_into(self._map, self.slots * _SLOT.size, self.flags() | bits)

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
