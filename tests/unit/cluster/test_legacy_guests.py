"""Guest copies of legacy sessions (app/cluster/guests.py, notes.py): two
workers' `LegacySessions` over one scripted upstream, their notes delivered to
each other in process (the HTTP between them is tests/integration/test_workers.py's).

A copy speaks on the owner's upstream session; the owner hears of the copy's
use (touch), of its upstream 404 (expired), of its server requests; a session
the owner ends is forgotten by the copy, even one whose join was on its way; a
release of a held id text that was lost is not waited for past the next touch."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from app.call import Outgoing
from app.cluster.notes import Notes
from app.cluster.replicas import OwnedIds
from app.cluster.sealing import Sealer
from app.cluster.session import LegacySession
from app.fronts.legacy.bound import Limits
from app.fronts.legacy.calls import LegacyCalls
from app.fronts.legacy.checks import LegacyRequest
from app.fronts.legacy.sessions import LegacySessions
from app.upstream.errors import SessionShareExceeded
from app.upstream.sessions.pool import SessionPool
from tests.seam_fake import Script, ScriptedSession, ScriptedTransport, result, server_request
from translators.registry import Version, get_version

VERSION = get_version("2025-11-25")
assert VERSION is not None
KEY = os.urandom(32)
A, B = "http://10.0.0.1:9000", "http://10.0.0.2:9000"


class SharedSession(ScriptedSession):
    """A session another worker can speak on (`Shareable`), as a Streamable HTTP one."""

    @property
    def version(self) -> Version:
        return VERSION

    def shared_state(self) -> dict[str, Any]:
        return {"u": self.serial, "w": VERSION.name}


class SharingTransport(ScriptedTransport):
    async def open_session(
        self, initialize: dict[str, Any], headers: Mapping[str, str]
    ) -> tuple[ScriptedSession, dict[str, Any]]:
        session, init = await super().open_session(initialize, headers)
        session.__class__ = SharedSession
        return session, init

    def rejoin(self, state: Mapping[str, Any], authorization: str | None) -> ScriptedSession:
        return self.sessions[int(state["u"]) - 1]


@dataclass
class Loopback:
    """The replicas' relay, delivering each note to the addressed worker in process."""

    workers: dict[str, LegacySessions] = field(default_factory=dict)
    request_timeout_s: float = 30.0
    # Runs after the addressed worker answered, before the sender reads the answer.
    after: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    sent: list[str] = field(default_factory=list)

    async def note(self, replica: str, body: bytes, *, timeout_s: float) -> bytes | None:
        reply = await self.workers[replica].copies.answer_note(body)
        self.sent.append(replica)
        if self.after is not None:
            await self.after({"to": replica})
        return reply

    def ended(self, *_args: Any, **_kwargs: Any) -> None:
        pass


@dataclass
class Worker:
    sessions: LegacySessions
    calls: LegacyCalls
    pool: SessionPool


@contextlib.asynccontextmanager
async def two_workers(
    script: Script, share: int = 8
) -> AsyncIterator[tuple[Worker, Worker, SharingTransport]]:
    transport = SharingTransport(script)
    loop = Loopback()
    made: list[Worker] = []
    for me in (A, B):
        sealer = Sealer([KEY])
        pool = SessionPool(transport, max_sessions=8, idle_s=300)
        sessions = LegacySessions(
            pool,
            idle_s=300,
            ids=OwnedIds(sealer, me),
            limits=Limits(total=8, share=share, reclaim_idle_s=60.0),
            notes=Notes(sealer, loop, me),  # type: ignore[arg-type]
        )
        loop.workers[me] = sessions
        made.append(Worker(sessions, LegacyCalls(sessions), pool))
    try:
        yield made[0], made[1], transport
    finally:
        for worker in made:
            await worker.sessions.aclose()
            await worker.pool.aclose()


async def opened(owner: Worker) -> LegacySession:
    return await owner.sessions.open(VERSION, {}, VERSION, None, None)


async def call(worker: Worker, session: LegacySession, rid: Any) -> list[Outgoing]:
    message = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": "t"}}
    request = LegacyRequest(rid, "tools/call", message)
    events = worker.calls.call(session, request, resumable=False, streamed=True)
    return [out async for out in events]


def loopback(worker: Worker) -> Loopback:
    notes = worker.sessions.copies._notes
    assert notes is not None
    relay: Loopback = notes._relay  # type: ignore[assignment]
    return relay


TOOL = result({"content": [{"type": "text", "text": "ok"}]})


async def test_a_copy_speaks_on_the_owner_s_upstream_session_and_keeps_its_clock() -> None:
    async with two_workers(Script({"tools/call": [TOOL]})) as (a, b, transport):
        session = await opened(a)
        copy = await b.sessions.copies.guest(session.id, None, hopped=False)
        assert copy is not None and copy.owner == A
        assert session.guests == {B}
        outs = await call(b, copy, 7)
        assert outs[-1].message["result"]["content"][0]["text"] == "ok"
        assert [s.session for s in transport.record.sent_requests("tools/call")] == [1]
        # Another credential gets no copy (the same 404 as before, answered elsewhere).
        assert await b.sessions.copies.guest(session.id, "Bearer mallory", hopped=False) is None
        # Used only at B: the owner's clock moves with B's touch.
        session.last_used -= 1000
        stale = session.last_used
        await b.sessions.copies._touch_once()
        assert session.last_used > stale + 999


async def test_a_server_request_met_on_a_copy_is_told_to_the_owner_first() -> None:
    asked = server_request("sampling/createMessage", {"messages": []}, ident="srv-1")
    async with two_workers(Script({"tools/call": [asked, TOOL]})) as (a, b, _transport):
        session = await opened(a)
        copy = await b.sessions.copies.guest(session.id, None, hopped=False)
        assert copy is not None
        outs = await call(b, copy, 8)
        assert outs[0].message["method"] == "sampling/createMessage"
        # The client's answer is a POST relayed to the owner: it knows the method.
        assert session.server_requests == {"srv-1": "sampling/createMessage"}


async def test_an_upstream_404_on_a_copy_ends_the_session_at_its_owner() -> None:
    async with two_workers(Script({"tools/call": [TOOL]})) as (a, b, transport):
        session = await opened(a)
        copy = await b.sessions.copies.guest(session.id, None, hopped=False)
        assert copy is not None
        transport.expire_sessions()
        outs = await call(b, copy, 9)
        assert outs[-1].status == 404
        assert len(a.sessions) == 0 and session.ended
        assert await b.sessions.copies.guest(session.id, None, hopped=False) is None


async def test_an_end_reaches_a_copy_and_a_join_on_its_way() -> None:
    async with two_workers(Script({"tools/call": [TOOL]})) as (a, b, _transport):
        first = await opened(a)
        copy = await b.sessions.copies.guest(first.id, None, hopped=False)
        assert copy is not None
        await a.sessions.end(first, "client_deleted")
        assert copy.ended
        assert await b.sessions.copies.guest(first.id, None, hopped=False) is None
        # The owner answers B's join, then ends the session (its DELETE) before
        # B reads that answer: B keeps no copy.
        second = await opened(a)
        relay = loopback(b)

        async def end_it(delivered: dict[str, Any]) -> None:
            relay.after = None
            await a.sessions.end(second, "client_deleted")

        relay.after = end_it
        assert await b.sessions.copies.guest(second.id, None, hopped=False) is None
        assert second.guests == {B}


class WatchedEvent(asyncio.Event):
    """An event that says when someone waits on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = asyncio.Event()

    async def wait(self) -> Literal[True]:
        self.waited.set()
        return await super().wait()


async def test_a_lost_release_is_not_waited_for_past_the_next_touch() -> None:
    async with two_workers(Script({"tools/call": [TOOL]})) as (a, b, _transport):
        session = await opened(a)
        copy = await b.sessions.copies.guest(session.id, None, hopped=False)
        assert copy is not None
        # The owner held "7" and released it, but the release never arrived.
        copy.held["7"] = held = WatchedEvent()
        waiting = asyncio.ensure_future(call(b, copy, 7))
        await held.waited.wait()
        assert not waiting.done()
        await b.sessions.copies._touch_once()
        outs = await asyncio.wait_for(waiting, 2.0)
        assert outs[-1].message["result"]["content"][0]["text"] == "ok"


async def test_a_full_share_ends_its_idle_session_for_every_worker() -> None:
    """The least recently used idle session makes room at once, and the copies
    forget it as after a DELETE: its client's next request is relayed, and 404."""
    async with two_workers(Script({}), share=1) as (a, b, _):
        session = await opened(a)
        copy = await b.sessions.copies.guest(session.id, None, hopped=False)
        assert copy is not None
        newer = await opened(a)
        assert session.ended and copy.ended and not newer.ended
        assert await b.sessions.copies.guest(session.id, None, hopped=False) is None
        assert a.sessions.find(session.id, None) is None


async def test_a_full_share_takes_no_session_a_copy_is_using() -> None:
    """A request on a guest copy is unseen at the owner: a copy said used at the
    last touch keeps the session from being taken, and the refusal says so."""
    async with two_workers(Script({"tools/call": [TOOL]}), share=1) as (a, b, _):
        session = await opened(a)
        copy = await b.sessions.copies.guest(session.id, None, hopped=False)
        assert copy is not None
        await call(b, copy, 7)
        await b.sessions.copies._touch_once()
        with pytest.raises(SessionShareExceeded) as refused:
            await opened(a)
        assert "all busy: 1 in use on another worker" in refused.value.message
        assert not session.ended and not copy.ended
