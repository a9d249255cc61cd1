"""SessionPool: a session just opened is its opener's until the opener's first
request ends, and a 404 retires only the session that got it. Accounting with
a transport double; the same against the real legacy fixture is in
tests/integration/test_legacy_pool_churn.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from app.upstream.errors import PoolExhausted
from app.upstream.sessions.pool import PooledSession, SessionPool
from tests.unit.pool_session import Session
from translators.registry import get_version

LEGACY = get_version("2025-11-25")


class HookedTransport:
    """Opens at once; `on_open` runs as an open finishes, before the pool (and
    whoever awaits the open) sees the session."""

    def __init__(self) -> None:
        self.opened: list[Session] = []
        self.on_open: Callable[[], None] | None = None

    async def open_session(
        self, initialize: dict[str, Any], headers: Mapping[str, str]
    ) -> tuple[Session, dict[str, Any]]:
        await asyncio.sleep(0)
        session = Session()
        self.opened.append(session)
        hook, self.on_open = self.on_open, None
        if hook is not None:
            hook()
        return session, {"protocolVersion": "2025-11-25", "capabilities": {}}

    async def aclose(self) -> None:
        pass


async def take(pool: SessionPool, authorization: str | None) -> PooledSession:
    assert LEGACY is not None
    return await pool.acquire(pool.key_for({}, LEGACY, authorization), {}, authorization)


async def test_a_session_just_opened_is_not_reclaimed_before_its_opener_uses_it() -> None:
    # The open finished (the session in the pool's map) a few loop turns before
    # its opener resumed and leased it; another caller at the bound, in between,
    # saw it idle and closed it: the opener's first request met a 404.
    transport = HookedTransport()
    pool = SessionPool(transport, max_sessions=1, idle_s=300)
    other: list[asyncio.Task[PooledSession]] = []
    # The other caller starts as the open finishes: it reaches the bound
    # before the opener is scheduled again.
    transport.on_open = lambda: other.append(asyncio.create_task(take(pool, "Bearer other")))
    mine = await take(pool, "Bearer mine")
    assert not mine.session.closed  # type: ignore[attr-defined]
    assert mine.in_flight == 1 and len(pool) == 1 and pool.open_sessions == 1
    with pytest.raises(PoolExhausted):
        await other[0]  # nothing was idle: refused, the bound kept
    # Once the opener's call ends, the session is anyone's to reclaim.
    pool.release(mine)
    theirs = await take(pool, "Bearer other")
    assert mine.session.closed and theirs is not mine  # type: ignore[attr-defined]
    await pool.aclose()


async def test_every_caller_waiting_on_an_open_holds_its_lease_at_once() -> None:
    transport = HookedTransport()
    pool = SessionPool(transport, max_sessions=1, idle_s=300)
    seen: list[int] = []
    key = pool.key_for({}, LEGACY, None) if LEGACY is not None else None
    assert key is not None
    # As the open finishes (before any waiter runs again), both waiters' leases
    # are already counted: nothing may close the session in between.
    waiters = [asyncio.create_task(take(pool, None)) for _ in range(2)]
    await asyncio.sleep(0)
    opening = pool._opening[key]
    opening.add_done_callback(lambda _: seen.append(pool._sessions[key].in_flight))
    first, second = await asyncio.gather(*waiters)
    assert first is second and seen == [2] and first.in_flight == 2
    await pool.aclose()


async def test_a_waiter_cancelled_as_the_open_finishes_leaves_no_lease() -> None:
    transport = HookedTransport()
    pool = SessionPool(transport, max_sessions=1, idle_s=300)
    gone = asyncio.create_task(take(pool, None))
    stays = asyncio.create_task(take(pool, None))
    # Cancelled after the open finished, before it resumed: the lease counted
    # for it is given back.
    transport.on_open = lambda: gone.cancel() and None
    pooled = await stays
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert pooled.in_flight == 1
    pool.release(pooled)
    assert pooled.in_flight == 0
    await pool.aclose()


async def test_a_404_retires_only_the_session_that_got_it() -> None:
    transport = HookedTransport()
    pool = SessionPool(transport, max_sessions=8, idle_s=300)
    idle = [await take(pool, f"Bearer {i}") for i in range(3)]
    busy = await take(pool, "Bearer busy")
    for pooled in idle:
        pool.release(pooled)
    pool.expired(idle[0])
    await asyncio.sleep(0)  # closings run in the background
    await asyncio.sleep(0)
    assert idle[0].session.closed  # type: ignore[attr-defined]
    assert not any(p.session.closed for p in [*idle[1:], busy])  # type: ignore[attr-defined]
    assert len(pool) == 3 and pool.open_sessions == 3
    # A leased session that got a 404 leaves the map at once, closed when released.
    pool.expired(busy)
    assert len(pool) == 2 and not busy.session.closed  # type: ignore[attr-defined]
    pool.release(busy)
    await asyncio.sleep(0)
    assert busy.session.closed and pool.open_sessions == 2  # type: ignore[attr-defined]
    # The others are still served from the pool, no new initialize.
    opened = len(transport.opened)
    assert await take(pool, "Bearer 1") is idle[1]
    assert len(transport.opened) == opened
    await pool.aclose()
