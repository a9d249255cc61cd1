"""The legacy front (app/fronts/legacy/front.py) against a scripted upstream: a 2025-03-26
client initializes, calls, and sends a batch; every message is translated
between its revision and the upstream session's (2025-11-25 here)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from starlette.responses import Response

from app.cluster.replicas import OwnedIds
from app.cluster.sealing import Sealer
from app.fronts.legacy import checks as legacy
from app.fronts.legacy.bound import Limits
from app.fronts.legacy.front import LegacyFront
from app.fronts.legacy.service import LegacyService
from app.fronts.legacy.sessions import LegacySessions
from app.upstream.sessions.pool import SessionPool
from tests.seam_fake import Script, ScriptedTransport, notification, result
from translators.registry import get_version

CLIENT = "2025-03-26"
OFFERED = get_version("2025-11-25")
assert OFFERED is not None
# 2025-06-18 added structuredContent: a 2025-03-26 client must not see it.
STRUCTURED = result(
    {"content": [{"type": "text", "text": "42"}], "structuredContent": {"answer": 42}}
)


@asynccontextmanager
async def front_on(transport: ScriptedTransport) -> AsyncIterator[LegacyFront]:
    """The legacy front as app/serving/server.py builds it, on `transport`."""
    pool = SessionPool(transport, max_sessions=8, idle_s=300)
    sessions = LegacySessions(
        pool,
        idle_s=300,
        ids=OwnedIds(Sealer([os.urandom(32)]), "local:seam-test"),
        limits=Limits(total=8, share=8, reclaim_idle_s=60.0),
    )
    front = LegacyFront(LegacyService(sessions, offered=OFFERED, max_batch=8, write_timeout_s=5.0))
    try:
        yield front
    finally:
        await sessions.aclose()
        await pool.aclose()


async def _never_disconnects() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def answered(response: Response) -> tuple[int, dict[str, str], Any]:
    """Status, headers and parsed JSON body of an answer, run as the server would."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await response({"type": "http"}, _never_disconnects, send)
    start = sent[0]
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], headers, orjson.loads(body) if body else None


async def post(
    front: LegacyFront, message: Any, session_id: str | None = None
) -> tuple[int, dict[str, str], Any]:
    body = orjson.dumps(message)
    headers = {"content-type": "application/json", "accept": "application/json"}
    if session_id is not None:
        headers[legacy.SESSION_HEADER] = session_id
    claim = legacy.claims(body, headers)
    assert claim is not None, "the legacy front must take this POST"
    return await answered(await front.post(claim, headers, sse_ok=False, json_ok=True))


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": CLIENT,
        "capabilities": {"roots": {"listChanged": True}},
        "clientInfo": {"name": "old-client", "version": "0.1"},
    },
}


async def initialized(front: LegacyFront) -> str:
    status, headers, answer = await post(front, INITIALIZE)
    assert status == 200, answer
    assert answer["result"]["protocolVersion"] == CLIENT
    return headers[legacy.SESSION_HEADER]


async def test_initialize_opens_an_upstream_session_of_its_own() -> None:
    transport = ScriptedTransport(capabilities={"tools": {"listChanged": True}})
    async with front_on(transport) as front:
        session_id = await initialized(front)
        assert session_id and not session_id.startswith("scripted")
        (init,) = transport.initializes
        # Upstream: the offered version, the client's own capabilities and identity.
        assert init["params"]["protocolVersion"] == "2025-11-25"
        assert init["params"]["capabilities"] == {"roots": {"listChanged": True}}
        assert init["params"]["clientInfo"] == {"name": "old-client", "version": "0.1"}
        # A second client gets a second upstream session.
        await initialized(front)
        assert len(transport.sessions) == 2


async def test_a_call_is_translated_to_the_clients_revision() -> None:
    transport = ScriptedTransport(Script({"tools/call": [STRUCTURED]}))
    async with front_on(transport) as front:
        session_id = await initialized(front)
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "answer"}}
        status, _, answer = await post(front, call, session_id)
    assert status == 200
    assert answer == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"content": STRUCTURED["result"]["content"]},
    }
    # The client's id is the upstream session's id: the session is this client's alone.
    (sent,) = transport.record.requests("tools/call")
    assert sent["id"] == 7


async def test_a_batch_is_sent_member_by_member_and_answered_as_one() -> None:
    script = Script(
        {
            "tools/call": [STRUCTURED],
            "prompts/list": [result({"prompts": [{"name": "p"}]})],
        }
    )
    transport = ScriptedTransport(script)
    async with front_on(transport) as front:
        session_id = await initialized(front)
        batch = [
            {"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "answer"}},
            notification("notifications/roots/list_changed"),
            {"jsonrpc": "2.0", "id": "b", "method": "prompts/list", "params": {}},
        ]
        status, _, answers = await post(front, batch, session_id)
    assert status == 200
    by_id = {a["id"]: a for a in answers}
    assert set(by_id) == {"a", "b"}
    assert "structuredContent" not in by_id["a"]["result"]
    assert by_id["b"]["result"]["prompts"] == [{"name": "p"}]
    # Each request once, and the notification, all on the client's own session.
    assert sorted(transport.record.methods()) == ["prompts/list", "tools/call"]
    assert [n["method"] for n in transport.record.notifications()] == [
        "notifications/roots/list_changed"
    ]
    assert {s.session for s in transport.record.sent} == {1}


async def test_an_expired_upstream_session_ends_the_clients_session() -> None:
    transport = ScriptedTransport(Script({"tools/call": [STRUCTURED]}))
    async with front_on(transport) as front:
        session_id = await initialized(front)
        transport.expire_sessions()
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "answer"}}
        status, _, answer = await post(front, call, session_id)
        assert status == 404, answer
        # Never a silent new upstream session under a client that holds state.
        assert len(transport.initializes) == 1
        status, _, _ = await post(front, call, session_id)
        assert status == 404
