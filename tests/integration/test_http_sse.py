"""HTTP+SSE upstreams (2024-11-05 transport, issue 11): the published
`@modelcontextprotocol/server-everything` in its `sse` mode (official TypeScript
SDK's SSEServerTransport: GET /sse, POST /message?sessionId=...) behind the
gateway, found by the detection 2025-03-26 basic/transports "Backwards
Compatibility" describes, and driven with raw 2026-07-28 requests, raw legacy
requests and the official mcp 2.x and 1.x clients. The checks every transport
passes are shared with tests/integration/test_stdio.py
(tests/integration/everything.py); the ones here are HTTP+SSE's own: detection,
cancellation seen on the wire (a recording proxy between the gateway and the
server), stream loss and reconnection.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import everything as ev
from tests.integration import mrtr_wire as mw
from tests.integration import wire
from tests.integration.everything import (
    SAMPLING,
    call,
    everything_sse,
    sampled,
    text_of,
)
from tests.integration.recording_proxy import Record, RecordingProxy
from tests.waiting import until_sync

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
    ev.check_discover_list_and_calls(http, base, "HTTP+SSE", ev.EVERYTHING_PROFILE)
    # Detected once: Streamable HTTP was refused (POST /sse: 404), HTTP+SSE worked.
    detected = [
        line for line in wire.log_lines(log) if line.get("event") == "upstream_transport_detected"
    ]
    assert [line["transport"] for line in detected] == ["sse"]


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


def test_an_unprompted_roots_request_is_answered(
    sse_gateway: tuple[str, str, Path], http: httpx.Client
) -> None:
    """The request comes on the session's SSE stream with no call in flight; the
    refusal goes back by POST. The server's stderr is its own log here."""
    server_log = sse_gateway[2].parent / "everything.log"
    ev.check_an_unprompted_roots_request_is_answered(
        http, sse_gateway[0], lambda: server_log.read_text().splitlines()
    )


@pytest.fixture(scope="module")
def recorded_sse_gateway(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, RecordingProxy, Path]]:
    """A gateway whose HTTP+SSE upstream is server-everything behind a recording
    proxy: what the gateway GETs and POSTs, as the server received it."""
    logs = tmp_path_factory.mktemp("sse-recorded")
    with (
        everything_sse(procs.free_port(), logs / "everything.log") as sse_url,
        RecordingProxy(sse_url, every_path=True) as proxy,
        procs.gateway(
            proxy.url,
            procs.free_port(),
            {"MCP_SHIM_STATE_KEY": STATE_KEY, "MCP_SHIM_MRTR_TTL_S": str(PARKED_TTL_S)},
            logs / "gateway.log",
        ) as base,
    ):
        yield base, proxy, logs / "gateway.log"


PARKED_TTL_S = 2.0


def long_operation(token: str) -> dict[str, Any]:
    return mw.message_for(
        "tools/call",
        {"name": "trigger-long-running-operation", "arguments": {"duration": 30, "steps": 30}},
        caps={},
        meta={"progressToken": token},
    )


def check_cancelled_upstream(proxy: RecordingProxy, mark: int) -> None:
    """notifications/cancelled for the gateway's own id of the call went by POST to
    the session's endpoint, and the server took it (202). 2025-11-25
    basic/utilities/cancellation: the side that sent a request MAY cancel it with
    `notifications/cancelled` naming its `requestId`."""
    sent = proxy.wait_for(lambda r: r.method == "tools/call", since=mark)
    cancel = proxy.wait_for(lambda r: r.method == "notifications/cancelled" and r.done, since=mark)
    assert cancel.body["params"]["requestId"] == sent.body["id"]
    assert cancel.http_method == "POST" and cancel.status == 202


def test_closing_the_sse_answer_cancels_the_upstream_call(
    recorded_sse_gateway: tuple[str, RecordingProxy, Path], http: httpx.Client
) -> None:
    base, proxy, log = recorded_sse_gateway
    assert text_of(call(http, base, "echo", {"message": "up"})) == "Echo: up"
    mark = proxy.mark()
    message = long_operation("going-away")
    headers = wire.headers_for(message)
    with http.stream(
        "POST", base + "/mcp", content=json.dumps(message).encode(), headers=headers
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data:"):
                assert json.loads(line[5:])["method"] == "notifications/progress"
                break
    # The `with` closed the connection mid-call.
    check_cancelled_upstream(proxy, mark)
    logged = wire.wait_for_log(log, headers["x-request-id"], "call")
    assert logged["outcome"] == "client_disconnected"
    # The session goes on serving.
    assert text_of(call(http, base, "echo", {"message": "after"})) == "Echo: after"


def test_dropping_a_json_request_mid_call_cancels_too(
    recorded_sse_gateway: tuple[str, RecordingProxy, Path],
) -> None:
    base, proxy, _ = recorded_sse_gateway
    mark = proxy.mark()
    message = long_operation("json-only")
    headers = wire.headers_for(message, accept="application/json")
    with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=1.0) as client:
        wire.post(client, base + "/mcp", message, headers)
    check_cancelled_upstream(proxy, mark)


def test_a_parked_call_nobody_retries_is_abandoned_upstream(
    recorded_sse_gateway: tuple[str, RecordingProxy, Path], http: httpx.Client
) -> None:
    """MCP_SHIM_MRTR_TTL_S after parking, the server's sampling request is answered
    with an error (the client never will), the call is cancelled, and the lane's
    SSE stream (its session) is closed, all through the HTTP+SSE transport."""
    base, proxy, _ = recorded_sse_gateway
    mark = proxy.mark()
    first = call(http, base, "trigger-sampling-request", {"prompt": "never"}, caps=SAMPLING)
    assert first.input_required, first.final

    def asking(record: Record) -> bool:
        return record.http_method == "GET" and any(
            m.get("method") == "sampling/createMessage" for m in record.messages
        )

    # The stream of the lane the call runs on, which carried the server's request.
    stream = proxy.wait_for(asking, since=mark)
    asked = next(m for m in stream.messages if m.get("method") == "sampling/createMessage")
    timeout = PARKED_TTL_S + 10
    # The answer to the server's request: a JSON-RPC error, as a client that timed out.
    reply = proxy.wait_for(
        lambda r: (
            isinstance(r.body, dict)
            and "method" not in r.body
            and r.body.get("id") == asked["id"]
            and r.done
        ),
        since=mark,
        timeout=timeout,
    )
    assert reply.body["error"]["code"] == -32001
    check_cancelled_upstream(proxy, mark)
    # The lane's stream, closed by the gateway.
    until_sync(lambda: stream.done, timeout_s=timeout, what="the lane's SSE stream to close")
    assert stream.ending == "client_gone"
    # The state is no longer valid.
    ((key, _),) = first.requests.items()
    late = call(
        http,
        base,
        "trigger-sampling-request",
        {"prompt": "never"},
        caps=SAMPLING,
        input_responses={key: sampled("too late")},
        state=first.state,
    )
    assert late.status == 400 and late.error["code"] == -32602, late.final


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


def test_a_listen_stream_outlives_the_upstream_stream(tmp_path: Path, http: httpx.Client) -> None:
    """subscriptions/listen over an HTTP+SSE upstream that restarts: its stream ends,
    the gateway opens a new session (a new stream) and subscribes there again, and
    the client's listen stream, still open, gets the new server's updates."""
    port = procs.free_port()
    log = tmp_path / "gateway.log"
    with (
        procs.gateway(f"http://127.0.0.1:{port}/sse", procs.free_port(), log_path=log) as base,
        contextlib.ExitStack() as first,
    ):
        first.enter_context(everything_sse(port, tmp_path / "everything-1.log"))
        with ev.listening(http, base, ev.EVERYTHING_PROFILE.subscribed_uri) as (frames, listen_id):
            ev.check_an_update_arrives(http, base, frames, listen_id, ev.EVERYTHING_PROFILE)
            first.close()  # the server goes, and its streams with it
            with everything_sse(port, tmp_path / "everything-2.log"):
                until_sync(
                    lambda: any(
                        line.get("event") == "listen_session_reopened"
                        for line in wire.log_lines(log)
                    ),
                    timeout_s=15,
                    what="the listen hub to move to a new session",
                )
                ev.check_an_update_arrives(http, base, frames, listen_id, ev.EVERYTHING_PROFILE)


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
