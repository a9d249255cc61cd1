"""Legacy clients' sessions cannot lock out other credentials (issue 19, defect 7).

They counted against the same MCP_SHIM_MAX_SESSIONS as the pooled sessions
modern callers share and were never reclaimed: four credentials with four idle
sessions each left a fifth credential's modern calls at 503, and at the
defaults 256 anonymous `initialize`s gave every anonymous caller 429 for 300 s.
Now they have their own bound and per-credential share, and at the bound an
idle one is ended to make room (its client gets 404, as for an expired
session), never one with a request in flight or a GET stream open.

One gateway in front of the legacy fixture (mcp 1.x), with small bounds.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.test_legacy_clients import call, headers, initialize

pytestmark = pytest.mark.peers

VERSION = "2025-11-25"
CREDENTIALS = [f"Bearer holder-{i}" for i in range(4)]
PER_CREDENTIAL = 4
# Small enough to wait for, long enough that nothing is taken while a test sets up.
RECLAIM_IDLE_S = 2.0


@dataclass
class Gateway:
    mcp: str
    log: Path


@pytest.fixture(scope="module")
def gateway(legacy_url: str, logs_dir: Path) -> Iterator[Gateway]:
    log = logs_dir / "legacy-session-bounds.log"
    bound = str(len(CREDENTIALS) * PER_CREDENTIAL)
    env = {
        # The deployment: one bound for everything, a quarter per credential.
        "MCP_SHIM_MAX_SESSIONS": bound,
        "MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL": str(PER_CREDENTIAL),
        "MCP_SHIM_MAX_PARKED": "1",
        "MCP_SHIM_MAX_LEGACY_SESSIONS": bound,
        "MCP_SHIM_MAX_LEGACY_SESSIONS_PER_CREDENTIAL": str(PER_CREDENTIAL),
        "MCP_SHIM_LEGACY_SESSION_RECLAIM_IDLE_S": str(RECLAIM_IDLE_S),
    }
    with procs.gateway(legacy_url, procs.free_port(), env=env, log_path=log) as base:
        yield Gateway(base + "/mcp", log)


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30.0) as c:
        yield c


@contextlib.contextmanager
def legacy_sessions(
    client: httpx.Client, url: str, authorization: str | None, count: int
) -> Iterator[list[str]]:
    """`count` sessions of one credential, DELETEd at the end."""
    opened: list[str] = []
    try:
        for _ in range(count):
            opened.append(initialize(client, url, VERSION, authorization)[0])
        yield opened
    finally:
        for session in opened:
            client.delete(url, headers=headers(session, VERSION, authorization=authorization))


def modern_echo(url: str, authorization: str | None, text: str) -> httpx.Response:
    message = wire.body("tools/call", {"name": "echo", "arguments": {"text": text}})
    return httpx.post(
        url,
        content=json.dumps(message).encode(),
        headers=wire.headers_for(message, authorization=authorization),
        timeout=30.0,
    )


def assert_echoed(response: httpx.Response, text: str) -> None:
    assert response.status_code == 200, response.text[:300]
    answer = wire.answer_messages(response)[-1]
    assert answer["result"]["content"] == [{"type": "text", "text": text}]


def ping(client: httpx.Client, url: str, session: str, authorization: str | None) -> int:
    return call(client, url, session, VERSION, "ping", authorization=authorization).status_code


def refused_initialize(client: httpx.Client, url: str, authorization: str | None) -> httpx.Response:
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {}},
    }
    return client.post(url, json=message, headers=headers(authorization=authorization))


@contextlib.contextmanager
def get_streams(
    client: httpx.Client, url: str, sessions: list[str], authorization: str | None
) -> Iterator[None]:
    """A GET stream open on each session (the gateway answers once it holds the
    upstream's), closed at the end."""
    with contextlib.ExitStack() as stack:
        for session in sessions:
            response = stack.enter_context(
                client.stream(
                    "GET",
                    url,
                    headers=headers(session, VERSION, authorization, accept="text/event-stream"),
                )
            )
            assert response.status_code == 200
        yield


def ended(log: Path, reason: str) -> int:
    return sum(
        1
        for line in wire.log_lines(log)
        if line.get("event") == "legacy_session_ended" and line.get("reason") == reason
    )


def test_idle_legacy_sessions_leave_other_credentials_modern_calls_served(
    gateway: Gateway, client: httpx.Client
) -> None:
    with contextlib.ExitStack() as stack:
        for authorization in CREDENTIALS:
            stack.enter_context(legacy_sessions(client, gateway.mcp, authorization, PER_CREDENTIAL))
        # Every credential holds its whole legacy share, the legacy bound is
        # reached: a fifth credential's modern call is served (it was 503), and
        # so is a holder's own (its share of pooled sessions is untouched).
        assert_echoed(modern_echo(gateway.mcp, "Bearer fifth", "fifth"), "fifth")
        assert_echoed(modern_echo(gateway.mcp, CREDENTIALS[0], "holder"), "holder")
        assert_echoed(modern_echo(gateway.mcp, None, "anonymous"), "anonymous")


def test_an_anonymous_flood_gets_its_own_429_while_others_are_served(
    gateway: Gateway, client: httpx.Client
) -> None:
    with (
        legacy_sessions(client, gateway.mcp, None, PER_CREDENTIAL) as anonymous,
        # Busy sessions (a GET stream open): none can be taken to make room.
        get_streams(client, gateway.mcp, anonymous, None),
    ):
        refused = refused_initialize(client, gateway.mcp, None)
        assert refused.status_code == 429, refused.text[:300]
        error = refused.json()["error"]
        assert error["code"] == -32603
        assert "MCP_SHIM_MAX_LEGACY_SESSIONS_PER_CREDENTIAL" in error["message"]
        # What holds them, truly; and any of them may be idle in a second.
        assert f"all busy: {PER_CREDENTIAL} with a GET stream open" in error["message"]
        assert int(refused.headers["retry-after"]) == 1
        # Another credential's legacy client is served, and modern callers,
        # anonymous ones included, do not meet the legacy flood at all.
        with legacy_sessions(client, gateway.mcp, "Bearer served", 1) as (served,):
            assert ping(client, gateway.mcp, served, "Bearer served") == 200
        assert_echoed(modern_echo(gateway.mcp, None, "anonymous"), "anonymous")
        assert_echoed(modern_echo(gateway.mcp, "Bearer served", "served"), "served")
        # The flood's own sessions still work.
        assert ping(client, gateway.mcp, anonymous[0], None) == 200


def test_a_full_share_ends_its_least_recently_used_idle_session_at_once(
    gateway: Gateway, client: httpx.Client
) -> None:
    """Clients that drop the connection without DELETE fill their credential's
    share: the next `initialize` ends the one used least recently, idle for far
    less than the reclaim time, and its client gets 404."""
    lru = "Bearer leaves-without-delete"
    with legacy_sessions(client, gateway.mcp, lru, PER_CREDENTIAL) as left:
        # The oldest is used last: the second oldest is the least recently used.
        assert ping(client, gateway.mcp, left[0], lru) == 200
        with get_streams(client, gateway.mcp, [left[1]], lru):
            # ... but a GET stream is open on it: the next one goes instead.
            with legacy_sessions(client, gateway.mcp, lru, 1) as (newest,):
                assert ping(client, gateway.mcp, newest, lru) == 200
                assert ping(client, gateway.mcp, left[2], lru) == 404
                assert ping(client, gateway.mcp, left[1], lru) == 200
                assert ping(client, gateway.mcp, left[0], lru) == 200


def test_an_idle_session_is_reclaimed_under_pressure_and_its_client_gets_404(
    gateway: Gateway, client: httpx.Client
) -> None:
    with contextlib.ExitStack() as stack:
        held = [
            stack.enter_context(legacy_sessions(client, gateway.mcp, a, PER_CREDENTIAL))
            for a in CREDENTIALS
        ]
        oldest, second = held[0][0], held[0][1]
        stack.enter_context(get_streams(client, gateway.mcp, [oldest], CREDENTIALS[0]))
        before = ended(gateway.log, "reclaimed")
        # Every session but the streaming one has been idle for the reclaim time.
        time.sleep(RECLAIM_IDLE_S + 0.5)
        # The bound is reached: a new credential's initialize takes the session
        # idle longest (not the older one with a GET stream open).
        with legacy_sessions(client, gateway.mcp, "Bearer fifth", 1) as (fifth,):
            assert ping(client, gateway.mcp, fifth, "Bearer fifth") == 200
            assert ended(gateway.log, "reclaimed") == before + 1
            # 2025-11-25 streamable-http "Session Management": an expired
            # session is answered 404, and the client initialises again.
            assert ping(client, gateway.mcp, second, CREDENTIALS[0]) == 404
            assert ping(client, gateway.mcp, oldest, CREDENTIALS[0]) == 200
            # The next one comes from a credential holding the most (four),
            # not from the first one's older sessions (it holds three now).
            with legacy_sessions(client, gateway.mcp, "Bearer sixth", 1):
                assert ended(gateway.log, "reclaimed") == before + 2
                assert ping(client, gateway.mcp, held[1][0], CREDENTIALS[1]) == 404
                assert ping(client, gateway.mcp, held[0][2], CREDENTIALS[0]) == 200
