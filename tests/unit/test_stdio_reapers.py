"""Several stdio transports in one gateway process (many servers,
app/servers): each one's orphan reaper leaves the others' servers alone, and
only the last one open ends the leftovers at shutdown
(app/upstream/stdio/containment.py)."""

from __future__ import annotations

import asyncio
import os

import pytest

from app.upstream.stdio import containment
from app.upstream.stdio.containment import OrphanReaper


@pytest.fixture
def zombies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The gateway's children, every one a zombie; the pids waited for."""
    waited: list[int] = []
    monkeypatch.setattr(containment, "_prctl", lambda *args: 0)
    gateway = os.getpid()
    monkeypatch.setattr(
        containment, "_children", lambda pid: [101, 202, 303] if pid == gateway else []
    )
    monkeypatch.setattr(containment, "_is_zombie", lambda pid: True)

    def waitpid(pid: int, options: int) -> tuple[int, int]:
        waited.append(pid)
        return pid, 0

    monkeypatch.setattr(containment.os, "waitpid", waitpid)
    return waited


def test_a_reaper_never_reaps_another_transports_server(zombies: list[int]) -> None:
    async def run() -> None:
        first = OrphanReaper(lambda: [101])
        second = OrphanReaper(lambda: [202])
        first.start()
        second.start()
        try:
            assert first.reap() == 1 and zombies == [303]
            zombies.clear()
            assert second.reap() == 1 and zombies == [303]
        finally:
            await first.aclose()
            await second.aclose()

    asyncio.run(run())


def test_one_being_started_anywhere_holds_every_sweep(zombies: list[int]) -> None:
    async def run() -> None:
        first = OrphanReaper(lambda: [101])
        starting = OrphanReaper(lambda: None)
        first.start()
        starting.start()
        try:
            assert first.reap() == 0 and zombies == []
        finally:
            await first.aclose()
            await starting.aclose()

    asyncio.run(run())


def test_only_the_last_open_reaper_ends_leftovers(
    zombies: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    killed: list[int] = []
    monkeypatch.setattr(containment.os, "kill", lambda pid, sig: killed.append(pid))
    monkeypatch.setattr(containment, "_is_zombie", lambda pid: pid in killed)

    async def run() -> None:
        first = OrphanReaper(lambda: [])
        second = OrphanReaper(lambda: [])
        first.start()
        second.start()
        assert await first.end_leftovers(wait_s=0.05) == 0 and killed == []
        await first.aclose()
        assert await second.end_leftovers(wait_s=0.05) > 0 and killed
        await second.aclose()

    asyncio.run(run())
