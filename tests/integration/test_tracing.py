"""W3C Trace Context through the gateway: the client's `traceparent` and
`tracestate` reach the upstream on the requests the call causes (seen by a
recording proxy in front of the legacy fixture), an invalid one does not,
and every log line of the call carries the trace id."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.recording_proxy import RecordingProxy

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
TRACESTATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"


@dataclass
class Chain:
    gateway: str
    back: RecordingProxy
    log: Path


@pytest.fixture(scope="module")
def chain(legacy_url: str, logs_dir: Path) -> Iterator[Chain]:
    log = logs_dir / "gateway-tracing.log"
    with (
        RecordingProxy(legacy_url) as back,
        procs.gateway(back.url, procs.free_port(), log_path=log) as gateway,
    ):
        yield Chain(gateway, back, log)


def call(chain: Chain, **trace: str) -> str:
    message = wire.body("tools/call", {"name": "slow_echo", "arguments": {"ms": 1, "steps": 1}})
    headers = {**wire.headers_for(message), **trace}
    with httpx.Client(timeout=30.0) as client:
        response = wire.post(client, chain.gateway + "/mcp", message, headers)
    assert response.status_code == 200, response.text
    return headers["x-request-id"]


def lines_of(chain: Chain, request_id: str) -> list[dict[str, object]]:
    wire.wait_for_log(chain.log, request_id, "call")
    return [line for line in wire.log_lines(chain.log) if line.get("request_id") == request_id]


def test_traceparent_reaches_the_upstream_and_every_log_line(chain: Chain) -> None:
    mark = chain.back.mark()
    # The first call of this gateway also opens its upstream session: more
    # than one log line and more than one upstream request belong to it.
    request_id = call(chain, traceparent=TRACEPARENT, tracestate=TRACESTATE)
    caused = chain.back.since(mark)
    assert {r.method for r in caused} >= {"initialize", "tools/call"}
    for record in caused:
        assert record.headers.get("traceparent") == TRACEPARENT, record.method
        assert record.headers.get("tracestate") == TRACESTATE, record.method
    lines = lines_of(chain, request_id)
    assert len(lines) >= 2, lines
    assert all(line.get("trace_id") == TRACE_ID for line in lines), lines


@pytest.mark.parametrize(
    "traceparent",
    [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # not lowercase
        "not a traceparent",
    ],
)
def test_invalid_traceparent_is_dropped(chain: Chain, traceparent: str) -> None:
    mark = chain.back.mark()
    request_id = call(chain, traceparent=traceparent, tracestate=TRACESTATE)
    record = chain.back.wait_for(lambda r: r.method == "tools/call", since=mark)
    # W3C trace-context 3.3: no valid traceparent, no tracestate either.
    assert "traceparent" not in record.headers
    assert "tracestate" not in record.headers
    assert all("trace_id" not in line for line in lines_of(chain, request_id))


def test_no_trace_context_adds_none(chain: Chain) -> None:
    call(chain, traceparent=TRACEPARENT)
    mark = chain.back.mark()
    request_id = call(chain)
    record = chain.back.wait_for(lambda r: r.method == "tools/call", since=mark)
    assert "traceparent" not in record.headers
    assert all("trace_id" not in line for line in lines_of(chain, request_id))
