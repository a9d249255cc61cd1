"""HTTP+SSE upstreams (2024-11-05 transport, issue 11): the published
`@modelcontextprotocol/server-everything` in its `sse` mode (official TypeScript
SDK's SSEServerTransport: GET /sse, POST /message?sessionId=...) behind the
gateway, found by the detection 2025-03-26 basic/transports "Backwards
Compatibility" describes, and driven with raw 2026-07-28 requests.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration import everything as ev
from tests.integration import wire
from tests.integration.everything import SAMPLING, call, everything_sse, sampled, text_of

pytestmark = pytest.mark.peers

STATE_KEY = "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s="  # 32 bytes, base64


@pytest.fixture(scope="module")
def sse_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    logs = tmp_path_factory.mktemp("sse")
    with (
        everything_sse(procs.free_port(), logs / "everything.log") as sse_url,
        procs.gateway(
            sse_url, procs.free_port(), {"MCP_SHIM_STATE_KEY": STATE_KEY}, logs / "gateway.log"
        ) as base,
    ):
        yield base, sse_url, logs / "gateway.log"


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60.0) as client:
        yield client


def test_discover_list_and_calls_over_http_sse(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    base, _, log = sse_gateway
    ev.check_discover_list_and_calls(http, base, "HTTP+SSE")
    # Detected once: Streamable HTTP was refused (POST /sse: 404), HTTP+SSE worked.
    detected = [
        line for line in wire.log_lines(log) if line.get("event") == "upstream_transport_detected"
    ]
    assert [line["transport"] for line in detected] == ["sse"]


def test_the_official_modern_client_over_http_sse(sse_gateway: tuple[str, str, Path]) -> None:
    """The mcp 2.x client: discover, tools, and a sampling and an elicitation round
    trip, the server's requests read off the SSE stream, the answers POSTed."""
    ev.check_the_official_modern_client(sse_gateway[0])


def test_concurrent_calls_share_the_stream(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    """Responses come back on the one GET stream and reach their own calls by id."""
    base = sse_gateway[0]

    def one(n: int) -> str:
        with httpx.Client(timeout=60.0) as client:
            return text_of(call(client, base, "echo", {"message": f"n{n}"}))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(one, range(24)))
    assert texts == [f"Echo: n{n}" for n in range(24)]


def test_sampling_round_trip_over_http_sse(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    """server-everything's sampling request, sent on the SSE stream during the call,
    becomes input_required; the retry's answer goes back by POST."""
    base = sse_gateway[0]
    args = {"prompt": "Capital of France?"}
    first = call(http, base, "trigger-sampling-request", args, caps=SAMPLING)
    assert first.input_required, first.final
    ((key, question),) = first.requests.items()
    assert question["method"] == "sampling/createMessage"
    done = call(
        http,
        base,
        "trigger-sampling-request",
        args,
        caps=SAMPLING,
        input_responses={key: sampled("Paris")},
        state=first.state,
    )
    assert done.status == 200 and done.result["resultType"] == "complete", done.final
    assert '"Paris"' in text_of(done)


def test_unrelated_calls_complete_while_a_call_is_parked(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    ev.check_unrelated_calls_complete_while_a_call_is_parked(http, sse_gateway[0])


def test_two_parked_calls_answered_in_reverse_order(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    ev.check_two_parked_calls_answered_in_reverse_order(http, sse_gateway[0])


def test_progress_of_a_call_reaches_its_caller(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    ev.check_progress_reaches_its_caller(http, sse_gateway[0])


def test_logs_of_a_call_reach_its_caller(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    ev.check_logs_of_a_call_reach_its_caller(http, sse_gateway[0])


def test_a_resource_subscription_over_http_sse(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    """subscriptions/listen: `resources/subscribe` POSTed, the server's
    `notifications/resources/updated` read off the SSE stream (tied to no call)
    into the listen stream."""
    ev.check_a_resource_subscription(http, sse_gateway[0])


def test_stream_loss_fails_calls_and_the_next_session_reconnects(
    tmp_path: Path, http: httpx.Client
) -> None:
    port = procs.free_port()
    log = tmp_path / "gateway.log"
    with procs.gateway(f"http://127.0.0.1:{port}/sse", procs.free_port(), log_path=log) as base:
        with everything_sse(port, tmp_path / "everything-1.log"):
            assert text_of(call(http, base, "echo", {"message": "one"})) == "Echo: one"
            worker, outcome = ev.call_in_background(
                base, "trigger-long-running-operation", {"duration": 20, "steps": 20}
            )
            time.sleep(1.5)
        # The server is gone, and its stream with it: the call in flight fails at
        # once, not after its 20 s.
        worker.join(15)
        assert not worker.is_alive()
        assert outcome["answer"].status == 502, outcome["answer"].final
        assert outcome["took"] < 10
        assert any(line.get("event") == "upstream_sse_stream_ended" for line in wire.log_lines(log))
        # Nothing to connect to now.
        assert call(http, base, "echo", {"message": "two"}).status == 502
        with everything_sse(port, tmp_path / "everything-2.log"):
            # A new session on a new stream, without restarting the gateway.
            assert text_of(call(http, base, "echo", {"message": "three"})) == "Echo: three"


def test_forced_streamable_http_does_not_fall_back(
    sse_gateway: tuple[str, str, Path], tmp_path: Path, http: httpx.Client
) -> None:
    sse_url = sse_gateway[1]
    env = {"MCP_SHIM_UPSTREAM_TRANSPORT": "streamable-http"}
    with procs.gateway(sse_url, procs.free_port(), env, tmp_path / "gateway.log") as base:
        answer = call(http, base, "echo", {"message": "x"})
    assert answer.status == 502
    assert "HTTP 404" in answer.error["message"]
    assert "HTTP+SSE" not in answer.error["message"]
