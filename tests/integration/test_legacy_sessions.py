"""Lifetimes of legacy clients' sessions (issue 9): upstream expiry, the bound, idle end,
DELETE, cancellation, and both eras on one gateway at once.

Its own fixture and gateway (small MCP_SHIM_MAX_LEGACY_SESSIONS and
MCP_SHIM_SESSION_IDLE_S; the fixture's /debug/expire-sessions forgets every
session, which the shared fixture's other users must not see).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.test_legacy_clients import call, check_legacy, headers, initialize, messages

pytestmark = pytest.mark.peers

MAX_SESSIONS = 3
IDLE_S = 3.0


@dataclass
class Chain:
    fixture: str  # the fixture's base URL
    mcp: str  # the gateway's MCP endpoint
    log: Path


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    logs = tmp_path_factory.mktemp("legacy-sessions")
    with (
        procs.legacy_server(procs.free_port(), log_path=logs / "legacy.log") as upstream,
        procs.gateway(
            upstream,
            procs.free_port(),
            env={
                "MCP_SHIM_MAX_SESSIONS": str(MAX_SESSIONS),
                # One credential may take the whole (small) pool; parked calls must fit in it.
                "MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL": str(MAX_SESSIONS),
                "MCP_SHIM_MAX_PARKED": "1",
                "MCP_SHIM_MAX_LEGACY_SESSIONS": str(MAX_SESSIONS),
                "MCP_SHIM_MAX_LEGACY_SESSIONS_PER_CREDENTIAL": str(MAX_SESSIONS),
                "MCP_SHIM_SESSION_IDLE_S": str(IDLE_S),
            },
            log_path=logs / "gateway.log",
        ) as base,
    ):
        yield Chain(upstream.removesuffix("/mcp"), base + "/mcp", logs / "gateway.log")


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30.0) as c:
        yield c


def ended(chain: Chain, reason: str) -> int:
    return sum(
        1
        for line in wire.log_lines(chain.log)
        if line.get("event") == "legacy_session_ended" and line.get("reason") == reason
    )


def fixture_stats(client: httpx.Client, chain: Chain) -> dict[str, Any]:
    session, _ = initialize(client, chain.mcp, "2025-11-25")
    try:
        response = call(
            client, chain.mcp, session, "2025-11-25", "tools/call", {"name": "debug_stats"}
        )
        (answer,) = messages(response)
        stats: dict[str, Any] = answer["result"]["structuredContent"]
        return stats
    finally:
        client.delete(chain.mcp, headers=headers(session, "2025-11-25"))


def test_upstream_expiry_expires_the_clients_session(chain: Chain, client: httpx.Client) -> None:
    session, _ = initialize(client, chain.mcp, "2025-06-18")
    assert call(client, chain.mcp, session, "2025-06-18", "ping").status_code == 200
    before = ended(chain, "upstream_session_expired")
    expired = httpx.post(chain.fixture + "/debug/expire-sessions", timeout=10).json()
    assert expired["expired"] >= 1
    # 2025-11-25 streamable-http "Session Management": 404, so the client
    # starts a new session; never a silent new upstream session under it
    # (it may hold a log level or subscriptions there).
    first = call(client, chain.mcp, session, "2025-06-18", "ping", rid=2)
    assert first.status_code == 404, first.text
    again = call(client, chain.mcp, session, "2025-06-18", "ping", rid=3)
    assert again.status_code == 404
    assert ended(chain, "upstream_session_expired") == before + 1
    # The client initialises again and goes on.
    fresh, _ = initialize(client, chain.mcp, "2025-06-18")
    assert call(client, chain.mcp, fresh, "2025-06-18", "ping").status_code == 200
    client.delete(chain.mcp, headers=headers(fresh, "2025-06-18"))


def test_sessions_are_bounded_and_delete_frees_a_place(chain: Chain, client: httpx.Client) -> None:
    sessions = [initialize(client, chain.mcp, "2025-11-25")[0] for _ in range(MAX_SESSIONS)]
    try:
        refused = client.post(
            chain.mcp,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
            },
            # Another credential: the whole bound, not the caller's share, is reached.
            headers=headers(authorization="Bearer another"),
        )
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        error = refused.json()["error"]
        assert error["code"] == -32603 and "MCP_SHIM_MAX_LEGACY_SESSIONS" in error["message"]
        # DELETE ends both sides; the place is free again.
        assert (
            client.delete(chain.mcp, headers=headers(sessions[0], "2025-11-25")).status_code == 200
        )
        sessions[0] = initialize(client, chain.mcp, "2025-11-25")[0]
    finally:
        for session in sessions:
            client.delete(chain.mcp, headers=headers(session, "2025-11-25"))


def test_idle_session_ends_on_both_sides(chain: Chain, client: httpx.Client) -> None:
    session, _ = initialize(client, chain.mcp, "2025-11-25")
    who = call(client, chain.mcp, session, "2025-11-25", "tools/call", {"name": "whoami"})
    upstream_id = messages(who)[0]["result"]["structuredContent"]["sessionId"]
    before = ended(chain, "idle")
    deadline = time.monotonic() + IDLE_S * 4
    while ended(chain, "idle") == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ended(chain, "idle") > before
    assert call(client, chain.mcp, session, "2025-11-25", "ping").status_code == 404
    live = {s["sessionId"] for s in fixture_stats(client, chain)["sessions"]}
    assert upstream_id not in live  # DELETEd upstream, not left to the server's own timeout


def test_cancellation_from_the_client_reaches_the_upstream(
    chain: Chain, client: httpx.Client
) -> None:
    session, _ = initialize(client, chain.mcp, "2025-11-25")
    before = fixture_stats(client, chain)["toolCancellations"].get("slow_echo", 0)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            call,
            client,
            chain.mcp,
            session,
            "2025-11-25",
            "tools/call",
            {"name": "slow_echo", "arguments": {"ms": 20000, "steps": 20}},
            "slow-1",
        )
        time.sleep(1.0)
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "slow-1", "reason": "user pressed stop"},
        }
        with httpx.Client(timeout=10.0) as other:
            sent = other.post(chain.mcp, json=note, headers=headers(session, "2025-11-25"))
        assert sent.status_code == 202
        answer = pending.result(timeout=30)
    after = fixture_stats(client, chain)["toolCancellations"].get("slow_echo", 0)
    assert after == before + 1
    # 2025-11-25 basic/utilities/cancellation "Behavior Requirements": receivers
    # of a cancellation SHOULD "Not send a response for the cancelled request".
    # The mcp 1.x server answers it anyway (an error with code 0); the gateway
    # ends the call's stream without relaying that answer (or a -32603 of its own).
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert [m for m in messages(answer) if m.get("id") == "slow-1"] == []
    client.delete(chain.mcp, headers=headers(session, "2025-11-25"))


def test_a_cancelled_batch_member_ends_the_batch_stream_without_its_answer(
    chain: Chain, client: httpx.Client
) -> None:
    """2025-03-26 batches: the member the client cancels gets no response
    (basic/utilities/cancellation), the others theirs, and the stream ends."""
    version = "2025-03-26"
    session, _ = initialize(client, chain.mcp, version)
    batch = [
        {
            "jsonrpc": "2.0",
            "id": "slow-b",
            "method": "tools/call",
            "params": {"name": "slow_echo", "arguments": {"ms": 20000, "steps": 20}},
        },
        {
            "jsonrpc": "2.0",
            "id": "echo-b",
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        },
    ]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(client.post, chain.mcp, json=batch, headers=headers(session, version))
        time.sleep(1.0)
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "slow-b"},
        }
        with httpx.Client(timeout=10.0) as other:
            sent = other.post(chain.mcp, json=note, headers=headers(session, version))
        assert sent.status_code == 202
        answer = pending.result(timeout=15)
    assert answer.status_code == 200
    ids = [m.get("id") for m in messages(answer) if "method" not in m]
    assert ids == ["echo-b"]
    client.delete(chain.mcp, headers=headers(session, version))


def test_modern_and_legacy_clients_on_one_gateway_at_once(chain: Chain) -> None:
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        modern = pool.submit(procs.run_modern_client, "call_tools.py", chain.mcp)
        legacy_new = pool.submit(procs.run_legacy_client, "tour.py", chain.mcp, "2025-11-25")
        legacy_old = pool.submit(procs.run_legacy_client, "tour.py", chain.mcp, "2025-03-26")
        out_modern: Any = modern.result(timeout=180)
        out_new: Any = legacy_new.result(timeout=180)
        out_old: Any = legacy_old.result(timeout=180)
    assert out_modern["protocolVersion"] == "2026-07-28"
    assert out_modern["adoptedVia"] == "discover"
    assert out_modern["echo"]["result"]["content"][0]["text"] == "hello through the shim"
    assert out_new["initialize"]["protocolVersion"] == "2025-11-25"
    assert out_old["initialize"]["protocolVersion"] == "2025-03-26"
    assert "outputSchema" not in out_old["tool_fields"]
    for key in ("sampling", "roots", "completion", "reconnection"):
        assert "result" in out_new[key] and "result" in out_old[key], key
    for out, version in ((out_new, "2025-11-25"), (out_old, "2025-03-26")):
        # The initialize answer exactly as the client's revision defines it.
        check_legacy(
            version, {"jsonrpc": "2.0", "id": 0, "result": out["initialize"]}, "initialize"
        )
