"""New credentials churning a small pool in front of a legacy server that never
restarts: a session just opened is its opener's until the opener's first
request ends, so nobody at the bound closes it in between, and nothing meets a
404. It did: `upstream_session_opened`, then within milliseconds
`upstream_session_expired` and the whole pool retired for the same request,
several times a run, and now and then a 502 "upstream no longer knows the
session" from a healthy upstream.

One gateway in front of the legacy fixture (mcp 1.x), MCP_SHIM_MAX_SESSIONS=8.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.test_hardening import tool_call

pytestmark = [pytest.mark.peers, pytest.mark.slow]

ROUNDS = 6
CALLERS = 30


async def _round(client: httpx.AsyncClient, url: str, number: int) -> list[httpx.Response]:
    calls = [
        tool_call(
            "echo",
            {"text": f"r{number}-c{i}"},
            rid=i,
            authorization=f"Bearer churn-{number}-{i}",  # new credentials every round
        )
        for i in range(CALLERS)
    ]
    return list(
        await asyncio.gather(
            *(client.post(url, content=content, headers=headers) for content, headers in calls)
        )
    )


async def _rounds(url: str) -> list[httpx.Response]:
    responses: list[httpx.Response] = []
    async with httpx.AsyncClient(timeout=30) as client:
        for number in range(ROUNDS):
            responses += await _round(client, url, number)
    return responses


def test_new_sessions_are_never_reclaimed_before_their_first_call(
    legacy_url: str, logs_dir: Path
) -> None:
    log = logs_dir / "legacy-pool-churn.log"
    env = {"MCP_SHIM_MAX_SESSIONS": "8", "MCP_SHIM_MAX_PARKED": "4"}
    with procs.gateway(legacy_url, procs.free_port(), env=env, log_path=log) as base:
        responses = asyncio.run(_rounds(base + "/mcp"))
    statuses = Counter(r.status_code for r in responses)
    # At the bound, with all 8 busy, a call is refused (503); nothing else fails.
    assert set(statuses) <= {200, 503}, statuses
    assert statuses[200] >= CALLERS, statuses
    for response in responses:
        if response.status_code == 200:
            (answer,) = wire.answer_messages(response)
            assert "result" in answer, answer
    events = Counter(line["event"] for line in wire.log_lines(log))
    assert events["upstream_session_opened"] >= CALLERS, events
    assert events["upstream_session_expired"] == 0, events
    assert events["upstream_sessions_retired"] == 0, events
