"""Which stdio processes the transport stops to make room (`_reclaim_one`): one
just opened has nothing in flight until its opener sends its first request,
and must not be taken for idle then."""

from __future__ import annotations

import asyncio

from tests.unit.stdio_spawn import spawned


async def test_a_process_is_not_reclaimed_before_its_openers_first_request() -> None:
    # Reads and answers nothing: a request stays in flight until closed here.
    transport, session = await spawned(["sh", "-c", "cat >/dev/null"], grace_s=0.3)
    try:
        session.initialized = True  # as open_session leaves it, to its opener
        await transport._reclaim_one()
        assert not session.closing and session.gone is None
        exchange = await session.request({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        await transport._reclaim_one()
        assert not session.closing  # in flight
        await exchange.aclose()
        # Its opener's first request is over: an idle process like any other.
        await transport._reclaim_one()
        assert session.closing
    finally:
        await transport.aclose()
        await asyncio.wait_for(session.exited, 5)
