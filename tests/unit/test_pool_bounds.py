"""SessionPool's bounds (issue 7 "Hardening", defect 6),
as accounting: a transport double whose `initialize` takes a while, so that
sessions being opened overlap. The same behaviour against the real legacy
fixture is in tests/integration/test_hardening.py."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from app.upstream.errors import PoolExhausted, SessionShareExceeded
from app.upstream.sessions.pool import PooledSession, SessionPool
from tests.unit.pool_session import Session
from translators.registry import get_version

LEGACY = get_version("2025-11-25")


class SlowTransport:
    def __init__(self) -> None:
        self.opened: list[Session] = []
        self.initialized: list[dict[str, Any]] = []

    async def open_session(
        self, initialize: dict[str, Any], headers: Mapping[str, str]
    ) -> tuple[Session, dict[str, Any]]:
        await asyncio.sleep(0.05)
        self.initialized.append(initialize)
        session = Session()
        self.opened.append(session)
        return session, {"protocolVersion": "2025-11-25", "capabilities": {}}

    async def aclose(self) -> None:
        pass


async def take(
    pool: SessionPool, authorization: str | None, caps: dict[str, Any] | None = None
) -> PooledSession:
    assert LEGACY is not None
    key = pool.key_for(caps or {}, LEGACY, authorization)
    return await pool.acquire(key, caps or {}, authorization)


async def test_sessions_being_opened_count_against_the_bound() -> None:
    # The bound was checked against open sessions only: five concurrent openings
    # all passed a bound of 2.
    transport = SlowTransport()
    pool = SessionPool(transport, max_sessions=2, idle_s=300)
    results = await asyncio.gather(
        *(take(pool, f"Bearer {i}") for i in range(5)), return_exceptions=True
    )
    assert sum(isinstance(r, PooledSession) for r in results) == 2
    assert sum(isinstance(r, PoolExhausted) for r in results) == 3
    assert len(transport.opened) == 2 and pool.open_sessions == 2


async def test_one_credential_gets_its_share_and_no_more() -> None:
    transport = SlowTransport()
    pool = SessionPool(transport, max_sessions=8, idle_s=300, max_per_credential=2)
    assert LEGACY is not None
    key = pool.key_for({}, LEGACY, "Bearer greedy")
    lanes = await asyncio.gather(
        *(pool.open_detached(key, {}, "Bearer greedy") for _ in range(4)), return_exceptions=True
    )
    refused = [r for r in lanes if isinstance(r, SessionShareExceeded)]
    assert len(refused) == 2 and refused[0].status == 429
    assert "MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL" in refused[0].message
    assert isinstance(await take(pool, "Bearer other"), PooledSession)
    # Closing a detached session gives its place back.
    await pool.close_detached(next(r for r in lanes if isinstance(r, PooledSession)))
    assert isinstance(await pool.open_detached(key, {}, "Bearer greedy"), PooledSession)


async def test_an_idle_session_of_the_same_credential_makes_room() -> None:
    transport = SlowTransport()
    pool = SessionPool(transport, max_sessions=8, idle_s=300, max_per_credential=1)
    first = await take(pool, None)
    pool.release(first)
    second = await take(pool, None, {"roots": {"listChanged": True}})
    assert first.session.closed  # type: ignore[attr-defined]
    assert second is not first and pool.open_sessions == 1


async def test_capabilities_sent_upstream_are_the_canonical_key() -> None:
    transport = SlowTransport()
    pool = SessionPool(transport, max_sessions=8, idle_s=300)
    for i in range(10):
        pool.release(await take(pool, None, {"experimental": {f"x{i}": {}}, "roots": {"junk": i}}))
    assert len(transport.opened) == 1
    assert transport.initialized[0]["params"]["capabilities"] == {"roots": {}}


@pytest.mark.parametrize("share", [None, 3])
async def test_session_share_never_exceeds_the_pool(share: int | None) -> None:
    pool = SessionPool(SlowTransport(), max_sessions=2, idle_s=300, max_per_credential=share)
    results = await asyncio.gather(
        *(take(pool, None, {"roots": {"listChanged": i % 2 == 0}}) for i in range(4)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, PooledSession) for r in results) == 4  # two keys, shared
    assert pool.open_sessions == 2


@pytest.mark.parametrize(
    ("client_kind", "bad"),
    [
        ("h1", "\xe9"),
        ("h1", "\u20ac"),
        ("h1", "\r\nx-injected: 1"),
        ("aiohttp", "\xe9"),
        ("aiohttp", "\u20ac"),
        ("aiohttp", "\r\nx-injected: 1"),
    ],
)
async def test_a_header_httpx_cannot_encode_never_reaches_an_exception(
    client_kind: str, bad: str
) -> None:
    # Defect 3, below the front: httpx's UnicodeEncodeError holds the whole header
    # value; what leaves the transport is the gateway's own error, naming nothing.
    # Both POST stacks (h1; aiohttp, which would send a non-ASCII value as
    # UTF-8) refuse the values httpx refused, the same way.
    import traceback

    from app.upstream.errors import UpstreamError
    from app.upstream.httpclient.client import build_client
    from app.upstream.streamable_http.transport import StreamableHttpSession

    assert LEGACY is not None
    secret = "Bearer sk-live-TOPSECRET" + bad
    async with build_client(
        connect_timeout_s=5.0, max_connections=2, transport=client_kind
    ) as client:
        session = StreamableHttpSession(
            client, "http://127.0.0.1:9/mcp", {"authorization": secret}, "s-1", LEGACY, 5.0
        )
        with pytest.raises(UpstreamError) as caught:
            await session.request({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    rendered = "".join(traceback.format_exception(caught.value)) + repr(caught.value)
    assert "TOPSECRET" not in rendered
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


async def test_a_credential_at_its_share_never_closes_another_credentials_session() -> None:
    # The bound was checked before the share: a greedy credential at its share,
    # in a full pool, closed another credential's idle session to make room,
    # then was refused anyway (429), and did so on every retry.
    transport = SlowTransport()
    pool = SessionPool(transport, max_sessions=4, idle_s=300, max_per_credential=2)
    others = [await take(pool, f"Bearer other-{i}") for i in range(2)]
    for pooled in others:
        pool.release(pooled)  # idle
    for i in range(2):
        await take(pool, "Bearer greedy", {"roots": {"listChanged": i == 0}})  # busy
    with pytest.raises(SessionShareExceeded):
        await take(pool, "Bearer greedy", {"sampling": {}})
    assert not any(p.session.closed for p in others)  # type: ignore[attr-defined]
    # A third credential still gets room, from the least recently used idle one.
    assert isinstance(await take(pool, "Bearer third"), PooledSession)
    assert sum(p.session.closed for p in others) == 1  # type: ignore[attr-defined]


async def test_legacy_clients_own_sessions_take_no_room_in_the_pool() -> None:
    transport = SlowTransport()
    pool = SessionPool(transport, max_sessions=1, idle_s=300, max_per_credential=1)
    assert LEGACY is not None
    key = pool.key_for({}, LEGACY, None)
    owned = [await pool.open_owned(key, None, None) for _ in range(3)]
    assert pool.open_sessions == 0
    assert isinstance(await take(pool, None), PooledSession)
    await pool.close_owned(owned[0])
    assert pool.open_sessions == 1


async def test_a_caller_gone_while_its_session_opens_leaves_it_to_the_others() -> None:
    # The first caller of a key opened the session in its own task: a client
    # that disconnected then (its task cancelled) cancelled the open, and every
    # caller waiting on it got the CancelledError, a plain 500 (seen in front
    # of a stdio server whose process was starting).
    transport = SlowTransport()
    pool = SessionPool(transport, max_sessions=2, idle_s=300)
    first = asyncio.create_task(take(pool, None))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(take(pool, None))
    await asyncio.sleep(0.01)
    first.cancel()
    pooled = await asyncio.wait_for(second, 5)
    assert first.cancelled()
    assert len(transport.opened) == 1 and pooled.session is transport.opened[0]
    # The session is the pool's; the gone caller holds no lease on it.
    assert pooled.in_flight == 1 and pool.open_sessions == 1
    await pool.aclose()
