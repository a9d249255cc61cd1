"""At log level debug every call logs its timeline (`call_timeline`): when the
request body was read, the call sent upstream, the upstream's answer head and
answer read, the answer written to the client and the upstream exchange
closed. That is how a slow call is taken apart (bench/timeline.py, in
front of the mcp 1.x server); at the default level it costs nothing and logs
nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration import wire

pytestmark = pytest.mark.peers

STEPS = [
    "body_read_ms",
    "upstream_sent_ms",
    "answer_head_ms",
    "answer_read_ms",
    "answer_written_ms",
    "done_ms",
]


@pytest.fixture(scope="module")
def debug_gateway(legacy_url: str, logs_dir: Path) -> Iterator[tuple[str, Path]]:
    log = logs_dir / "gateway-timeline.log"
    env = {"MCP_SHIM_LOG_LEVEL": "debug"}
    with procs.gateway(legacy_url, procs.free_port(), env=env, log_path=log) as base:
        yield base + "/mcp", log


def _call(url: str, rid: int) -> str:
    message = wire.body("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, rid=rid)
    headers = wire.headers_for(message)
    with httpx.Client(timeout=30.0) as client:
        response = wire.post(client, url, message, headers)
    assert response.status_code == 200, response.text
    return headers["x-request-id"]


def test_each_call_logs_its_steps_in_order_at_debug(debug_gateway: tuple[str, Path]) -> None:
    url, log = debug_gateway
    # The first call opens the upstream session (an initialize with an answer
    # head of its own before the call's): its steps are the call's all the same.
    for rid in (1, 2):
        request_id = _call(url, rid)
        line = wire.wait_for_log(log, request_id, "call_timeline")
        times = [line[step] for step in STEPS]
        assert all(isinstance(t, float | int) for t in times), line
        assert times == sorted(times), line
        assert line["level"] == "debug"


def test_no_timeline_at_the_default_level(gateway_url: str, gateway_log: Path) -> None:
    request_id = _call(gateway_url + "/mcp", 3)
    wire.wait_for_log(gateway_log, request_id, "call")
    mine = [line for line in wire.log_lines(gateway_log) if line.get("request_id") == request_id]
    assert [line["event"] for line in mine if line["event"] == "call_timeline"] == []
