"""Issue 19 on the legacy clients' HTTP+SSE front (`GET /sse` + `POST /messages`,
app/fronts/http_sse/front.py) and the batch rules, in front of the real legacy fixture
(mcp 1.x): one `initialize` per channel, whatever arrives at once; the batch
rules of `POST /mcp` on `POST /messages` too, ids 1 and "1" both answered;
channels that never initialize are closed and bounded per address.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.test_legacy_clients import (
    check_legacy,
    headers,
    initialize,
    messages,
    rpc,
)
from tests.integration.test_legacy_hardening import (
    gateway_in_process,
    init_message,
    next_events,
    sse_channel,
)
from tests.waiting import until_sync

pytestmark = pytest.mark.peers

AUTH = {"authorization": "Bearer sse"}


def refused(response: httpx.Response, status: int, rid: Any, *words: str) -> None:
    assert response.status_code == status, response.text[:300]
    body = response.json()
    assert body["error"]["code"] == -32600 and body["id"] == rid, body
    for word in words:
        assert word in body["error"]["message"], body


# ---------------------------------------------------------------------------
# Defect 3: concurrent initializes on one channel leaked upstream sessions
# ---------------------------------------------------------------------------


def test_concurrent_initializes_on_a_channel_open_one_session(
    legacy_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four initializes at once on each of three channels: one per channel is
    served, the others get the error of an initialized session; once the channels
    closed, nothing is left open, and the pool (MCP_SHIM_MAX_SESSIONS=8) serves
    eight new credentials. Before the fix each initialize opened a session, the
    channel ended only the last, and the leaked ones filled the pool for good."""
    from app.fronts.legacy.sessions import LegacySessions

    real_open = LegacySessions.open

    async def slow_open(self: LegacySessions, *args: Any, **kwargs: Any) -> Any:
        # The upstream's initialize takes a while: all four arrive during it.
        await asyncio.sleep(0.5)
        return await real_open(self, *args, **kwargs)

    monkeypatch.setattr(LegacySessions, "open", slow_open)
    settings = {"max_sessions": 8, "max_sessions_per_credential": 8, "max_parked": 8}
    with (
        gateway_in_process(legacy_url, **settings) as (base, app),
        concurrent.futures.ThreadPoolExecutor(4) as pool,
        httpx.Client(timeout=15.0) as poster,
    ):
        for round_ in range(3):
            with sse_channel(base) as (endpoint, chunks):
                inits = [init_message("2024-11-05", f"init-{round_}-{n}") for n in range(4)]
                posts = [pool.submit(poster.post, endpoint, json=m, headers=AUTH) for m in inits]
                answers = [p.result(timeout=15) for p in posts]
                accepted = [a for a in answers if a.status_code == 202]
                assert len(accepted) == 1, [a.text for a in answers]
                for inited, answer in zip(inits, answers, strict=True):
                    if answer.status_code != 202:
                        refused(answer, 400, inited["id"], "initialized already")
                (served,) = next_events(chunks, 1)
                check_legacy("2024-11-05", served, "initialize")
        sessions = app.state.wiring.legacy._sessions
        until_sync(lambda: len(sessions) == 0, timeout_s=15, what="the channels' sessions to end")
        assert sessions._pool.open_sessions == 0
        # The pool's whole room, for new credentials.
        url = base + "/mcp"
        opened = [initialize(poster, url, "2025-03-26", f"Bearer new-{n}") for n in range(8)]
        for n, (session, _) in enumerate(opened):
            poster.delete(url, headers={**headers(session), "authorization": f"Bearer new-{n}"})


# ---------------------------------------------------------------------------
# Defect 4: POST /messages skipped the batch rules; ids 1 and "1"
# ---------------------------------------------------------------------------


def test_post_messages_applies_the_batch_rules(gateway_url: str) -> None:
    ping = rpc(1, "ping")
    with sse_channel(gateway_url) as (endpoint, chunks), httpx.Client(timeout=15.0) as poster:
        # Before initialize: no session, the batch is not served.
        response = poster.post(endpoint, json=[ping], headers=AUTH)
        assert response.status_code == 404, response.text
        refused(
            poster.post(endpoint, json=[init_message("2024-11-05"), ping], headers=AUTH),
            400,
            "server-error",
            "initialize must not be part of a JSON-RPC batch",
        )
        assert poster.post(endpoint, json=init_message("2024-11-05"), headers=AUTH).is_success
        next_events(chunks, 1)
        # 2024-11-05 is plain JSON-RPC 2.0: batches, within MCP_SHIM_MAX_BATCH (50).
        big = [rpc(n, "ping") for n in range(51)]
        refused(poster.post(endpoint, json=big, headers=AUTH), 400, "server-error", "51", "50")
        refused(poster.post(endpoint, json=[], headers=AUTH), 400, "server-error", "empty")
        twice = [ping, {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}, ping]
        refused(poster.post(endpoint, json=twice, headers=AUTH), 400, "server-error", "share")
        # 1 and "1" are two ids: both answered, each with its own.
        batch = [
            ping,
            rpc("1", "ping"),
            rpc("e", "tools/call", {"name": "echo", "arguments": {"text": "x"}}),
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        ]
        assert poster.post(endpoint, json=batch, headers=AUTH).status_code == 202
        answers = next_events(chunks, 3)
        assert sorted(repr(a["id"]) for a in answers) == ["'1'", "'e'", "1"], answers
        for answer in answers:
            check_legacy("2024-11-05", answer, "tools/call" if answer["id"] == "e" else "ping")
        exactly = [rpc(n, "ping") for n in range(50)]
        assert poster.post(endpoint, json=exactly, headers=AUTH).status_code == 202
        assert len(next_events(chunks, 50)) == 50

    # A revision that removed batching, over the same transport: refused, named.
    with sse_channel(gateway_url) as (endpoint, chunks), httpx.Client(timeout=15.0) as poster:
        assert poster.post(endpoint, json=init_message("2025-06-18"), headers=AUTH).is_success
        (answer,) = next_events(chunks, 1)
        assert answer["result"]["protocolVersion"] == "2025-06-18"
        response = poster.post(endpoint, json=[ping, rpc(2, "ping")], headers=AUTH)
        refused(response, 400, "server-error", "2025-06-18 removed batching")


@pytest.mark.parametrize("accept", [wire.ACCEPT_BOTH, "application/json"])
def test_ids_1_and_text_1_are_two_requests(gateway_url: str, accept: str) -> None:
    """Both answered, each under its own id and type. The fixture's SDK keys its
    calls by the id's text; before the fix both went upstream at once, one
    answer was routed to the other's call and the batch never ended."""
    url = gateway_url + "/mcp"
    with httpx.Client(timeout=10.0) as client:
        session, _ = initialize(client, url, "2025-03-26")
        on_session = headers(session, "2025-03-26", accept=accept)
        batch = [rpc(1, "ping"), rpc("1", "ping")]
        response = client.post(url, json=batch, headers=on_session)
        assert response.status_code == 200, response.text
        answers = messages(response)
        assert sorted(repr(a["id"]) for a in answers) == ["'1'", "1"], answers
        assert all(a["result"] == {} for a in answers)
        # The same as two POSTs in flight together.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            posts = [pool.submit(client.post, url, json=m, headers=on_session) for m in batch]
            for message, post in zip(batch, posts, strict=True):
                (answer,) = messages(post.result(timeout=10))
                assert answer == {"jsonrpc": "2.0", "id": message["id"], "result": {}}
        client.delete(url, headers=on_session)


# ---------------------------------------------------------------------------
# Defect 6: idle GET /sse streams took every connection slot
# ---------------------------------------------------------------------------

INIT_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def guarded_gateway(legacy_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        "MCP_SHIM_MAX_CONNECTIONS": "8",
        "MCP_SHIM_MAX_UNINITIALIZED_SSE_PER_ADDRESS": "4",
        "MCP_SHIM_SSE_INIT_TIMEOUT_S": str(INIT_TIMEOUT_S),
    }
    log = tmp_path_factory.mktemp("sse-guard") / "gateway.log"
    with procs.gateway(legacy_url, procs.free_port(), env, log) as base:
        yield base


def open_stream(stack: ExitStack, base: str) -> httpx.Response:
    client = stack.enter_context(httpx.Client(timeout=30.0))
    return stack.enter_context(client.stream("GET", base + "/sse", headers=AUTH))


def test_idle_channels_are_bounded_per_address_and_closed(guarded_gateway: str) -> None:
    """Eight idle streams from one address on a gateway of eight connections: four
    are served, four refused (429, Retry-After), and a normal call still gets
    through; the four are closed MCP_SHIM_SSE_INIT_TIMEOUT_S after they opened.
    Before the fix the eight took every connection and the call got 503."""
    base = guarded_gateway
    with ExitStack() as stack:
        opened_at = time.monotonic()
        streams = [open_stream(stack, base) for _ in range(8)]
        served = [s for s in streams if s.status_code == 200]
        assert len(served) == 4, [s.status_code for s in streams]
        for extra in streams[4:]:
            assert extra.status_code == 429
            assert extra.headers["retry-after"] == "2"
            body = httpx.Response(429, content=extra.read()).json()
            assert body["error"]["code"] == -32603 and body["id"] == "server-error", body
            assert "MCP_SHIM_MAX_UNINITIALIZED_SSE_PER_ADDRESS" in body["error"]["message"]
            extra.close()
        with httpx.Client(timeout=10.0) as client:
            message = wire.body("tools/call", {"name": "echo", "arguments": {"text": "through"}})
            response = wire.post(client, base + "/mcp", message, wire.headers_for(message))
            assert response.status_code == 200, response.text
        # The gateway ends each idle stream after its time (the first event came).
        for stream in served:
            text = "".join(stream.iter_text())
            assert text.startswith("event: endpoint\n"), text
        took = time.monotonic() - opened_at
        assert INIT_TIMEOUT_S * 0.9 <= took < INIT_TIMEOUT_S + 10, took


def test_an_initialized_channel_outlives_the_init_timeout(guarded_gateway: str) -> None:
    with sse_channel(guarded_gateway) as (endpoint, chunks), httpx.Client(timeout=15) as poster:
        assert poster.post(endpoint, json=init_message("2024-11-05"), headers=AUTH).is_success
        next_events(chunks, 1)
        time.sleep(INIT_TIMEOUT_S + 0.5)  # past the deadline an idle channel would have
        assert poster.post(endpoint, json=rpc(5, "ping"), headers=AUTH).status_code == 202
        (answer,) = next_events(chunks, 1)
        assert answer == {"jsonrpc": "2.0", "id": 5, "result": {}}
    # Its place among the uninitialized was given back at initialize: four more open.
    with ExitStack() as stack:
        assert [open_stream(stack, guarded_gateway).status_code for _ in range(4)] == [200] * 4


# ---------------------------------------------------------------------------
# Requests one channel may have running or waiting
# ---------------------------------------------------------------------------

CHANNEL_BOUND = 16


@pytest.fixture(scope="module")
def busy_gateway(
    legacy_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("sse-busy") / "gateway.log"
    env = {"MCP_SHIM_MAX_CONNECTIONS": str(CHANNEL_BOUND)}
    with procs.gateway(legacy_url, procs.free_port(), env, log) as base:
        yield base, log


def test_a_channel_holds_at_most_max_connections_requests(
    busy_gateway: tuple[str, Path],
) -> None:
    """A slow call of id 7 and 15 pings of id 7 behind it (each waits its turn:
    the fixture's SDK keys calls by the id's text) fill a channel of
    MCP_SHIM_MAX_CONNECTIONS=16. One request more, alone or in a batch, is
    refused as `POST /mcp` is at that bound (503, -32603, naming it) and a
    line is logged; the 16 are answered, the slow call first, and the channel
    serves the next request. Before, every request was taken (202) however
    many waited."""
    base, log = busy_gateway
    with sse_channel(base) as (endpoint, chunks), httpx.Client(timeout=15.0) as poster:
        assert poster.post(endpoint, json=init_message("2024-11-05"), headers=AUTH).is_success
        next_events(chunks, 1)
        slow = rpc(7, "tools/call", {"name": "slow_echo", "arguments": {"ms": 3000, "steps": 3}})
        accepted = [poster.post(endpoint, json=slow, headers=AUTH).status_code]
        accepted += [
            poster.post(endpoint, json=rpc(7, "ping"), headers=AUTH).status_code
            for _ in range(CHANNEL_BOUND - 1)
        ]
        assert accepted == [202] * CHANNEL_BOUND
        one_more = poster.post(endpoint, json=rpc(7, "ping"), headers=AUTH)
        assert one_more.status_code == 503, one_more.text
        body = one_more.json()
        assert body["id"] == 7 and body["error"]["code"] == -32603, body
        assert "MCP_SHIM_MAX_CONNECTIONS" in body["error"]["message"], body
        batch = poster.post(endpoint, json=[rpc(8, "ping"), rpc(9, "ping")], headers=AUTH)
        assert batch.status_code == 503, batch.text
        assert batch.json()["error"]["code"] == -32603
        answers = next_events(chunks, CHANNEL_BOUND)
        assert len(answers) == CHANNEL_BOUND, answers
        assert answers[0]["id"] == 7 and answers[0]["result"]["content"][0]["text"] == "done"
        assert answers[1:] == [{"jsonrpc": "2.0", "id": 7, "result": {}}] * (CHANNEL_BOUND - 1)
        assert poster.post(endpoint, json=rpc(8, "ping"), headers=AUTH).status_code == 202
        (answer,) = next_events(chunks, 1)
        assert answer == {"jsonrpc": "2.0", "id": 8, "result": {}}
    refusals = [line for line in wire.log_lines(log) if line.get("event") == "sse_request_refused"]
    assert refusals and refusals[0]["setting"] == "MCP_SHIM_MAX_CONNECTIONS", refusals
    assert refusals[0]["limit"] == CHANNEL_BOUND
