"""The workers' shared load table (app/balance.py): each worker's busy fraction
in a memfd the supervisor makes, one slot per worker.

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


class LoadBoard:
    """Each worker's busy fraction, in memory shared by the supervisor and workers."""

    def __init__(self, fd: int, slots: int) -> None:
        self._map = mmap.mmap(fd, slots * _SLOT.size)
        self.slots = slots

    @staticmethod
    def create(slots: int) -> int:
        """A new table's descriptor, for the supervisor to pass to the workers."""
        fd = os.memfd_create("mcp-shim-load", 0)  # no MFD_CLOEXEC: workers inherit it
        os.ftruncate(fd, slots * _SLOT.size)
        return fd

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
