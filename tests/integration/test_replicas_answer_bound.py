"""A multi round-trip retry forwarded to the replica holding its exchange
(app/cluster/forwarding.py): the owner's answer is read within
MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES, as an upstream's answer is, and beyond it
the caller gets the error of an oversized upstream answer.

Two gateway replicas sharing a state key, each advertising its own URL, in
front of the legacy fixture (mcp 1.x); the client picks the replica of each
request itself. The replica that forwards has a bound of 256 KiB, the owner the
default, so the owner serves what the forwarding replica must refuse.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import wire

pytestmark = pytest.mark.peers

# Above the fixture's tools/list (which the forwarding replica reads itself).
BOUND = 256 * 1024


@pytest.fixture(scope="module")
def replicas(legacy_url: str, logs_dir: Path) -> Iterator[tuple[str, str, Path]]:
    """(owner, forwarder, the forwarder's log)."""
    key = base64.b64encode(os.urandom(32)).decode()
    ports = [procs.free_port() for _ in range(2)]
    logs = [logs_dir / "bound-owner.log", logs_dir / "bound-forwarder.log"]
    envs = [
        {"MCP_SHIM_STATE_KEY": key, "MCP_SHIM_ADVERTISE_URL": f"http://127.0.0.1:{p}"}
        for p in ports
    ]
    envs[1]["MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES"] = str(BOUND)
    with contextlib.ExitStack() as stack:
        owner, forwarder = (
            stack.enter_context(procs.gateway(legacy_url, port, env=env, log_path=log))
            for port, env, log in zip(ports, envs, logs, strict=True)
        )
        yield owner, forwarder, logs[1]


def retry_elsewhere(client: httpx.Client, owner: str, forwarder: str, name_chars: int) -> mw.Answer:
    """`ask_name` parked at the owner, its retry (with a name of `name_chars`,
    which its result repeats) sent to the forwarder."""
    first = mw.tool_call(client, owner, "ask_name")
    assert first.input_required, first.messages
    ((key, request),) = first.requests.items()
    assert request["method"] == "elicitation/create"
    answer = {"action": "accept", "content": {"name": "n" * name_chars}}
    return mw.tool_call(
        client, forwarder, "ask_name", input_responses={key: answer}, state=first.state
    )


def test_a_forwarded_answer_over_the_bound_is_an_oversized_upstream_answer(
    replicas: tuple[str, str, Path],
) -> None:
    owner, forwarder, log = replicas
    with httpx.Client(timeout=30.0) as client:
        small = retry_elsewhere(client, owner, forwarder, 10)
        assert small.status == 200 and "n" * 10 in str(small.result), small.messages
        big = retry_elsewhere(client, owner, forwarder, 2 * BOUND)
        # The same call answered by the forwarder's own upstream, oversized too.
        direct = mw.tool_call(client, forwarder, "large_result", {"bytes": 2 * BOUND})
    assert big.status == direct.status == 502, (big.messages, direct.messages)
    assert big.error["code"] == direct.error["code"] == -32603
    # How the call ended is said first (the direct one's upstream broke its stream off).
    said = f"the upstream answer to 'tools/call' exceeded {BOUND} bytes (MCP_SHIM_MAX_UPSTREAM_"
    assert said in big.error["message"] and said in direct.error["message"], (big, direct)
    forwarded = [line for line in wire.log_lines(log) if line.get("event") == "mrtr_forwarded"]
    assert len(forwarded) == 2, forwarded
    too_large = [
        line for line in wire.log_lines(log) if line.get("event") == "upstream_answer_too_large"
    ]
    assert len(too_large) == 2 and too_large[0]["limit"] == BOUND, too_large
