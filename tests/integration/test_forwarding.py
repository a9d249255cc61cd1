"""What the gateway forwards, and how: schemas on both sides, JSON vs SSE,
cancellation, sessions, error codes, a dying upstream, and its logs.

Most tests here use their own chain of real processes, so they can see both
sides of the gateway and disturb the upstream without touching the session
fixtures other modules use::

    client ── front proxy ── gateway (own process) ── back proxy ── legacy fixture (own process)

The proxies (tests/integration/recording_proxy.py) forward unchanged and
record every HTTP exchange with the JSON-RPC messages it carried; the tests
validate those messages against the spec's ``tests/spec/<version>/schema.json`` and
read what reached the upstream. The fixture's own ledger (``GET
/debug/stats``: tool calls by marker, cancellations) and its ``whoami`` tool
(session id, credential digest) tell what its handlers saw.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.recording_proxy import Record, RecordingProxy
from tests.schema import (
    MODERN,
    SPEC,
    check_legacy_sent,
    check_modern_answer,
    check_modern_error,
    check_notification,
    check_request,
    check_response,
)
from tests.waiting import until_sync

LEGACY = "2025-11-25"  # what the gateway offers by default, and the fixture accepts
LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
MODERN_META_PREFIX = "io.modelcontextprotocol/"


@dataclass
class Chain:
    front: RecordingProxy  # clients -> gateway
    gateway: str  # the gateway's MCP endpoint
    back: RecordingProxy  # gateway -> fixture
    fixture: str  # the fixture's base URL (debug routes)
    log: Path  # the gateway's log

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = httpx.get(self.fixture + "/debug/stats", timeout=10).json()
        return stats


@pytest.fixture(scope="module")
def chain(logs_dir: Path) -> Iterator[Chain]:
    with (
        procs.legacy_server(procs.free_port(), log_path=logs_dir / "fwd-legacy.log") as legacy,
        RecordingProxy(legacy) as back,
        procs.gateway(
            back.url, procs.free_port(), log_path=logs_dir / "fwd-gateway.log"
        ) as gateway,
        RecordingProxy(gateway + "/mcp") as front,
    ):
        yield Chain(
            front=front,
            gateway=gateway + "/mcp",
            back=back,
            fixture=legacy.rsplit("/mcp", 1)[0],
            log=logs_dir / "fwd-gateway.log",
        )


def rpc(
    url: str,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    rid: Any = 1,
    accept: str = wire.ACCEPT_BOTH,
    meta: dict[str, Any] | None = None,
    authorization: str | None = None,
    timeout: float = 30.0,
) -> httpx.Response:
    message = wire.body(method, params, rid=rid, meta=meta)
    headers = wire.headers_for(message, accept=accept, authorization=authorization)
    return httpx.post(url, content=json.dumps(message).encode(), headers=headers, timeout=timeout)


def call_tool(url: str, name: str, arguments: dict[str, Any], **kw: Any) -> httpx.Response:
    return rpc(url, "tools/call", {"name": name, "arguments": arguments}, **kw)


def marker() -> str:
    return "m-" + uuid.uuid4().hex[:12]


def upstream_calls(records: list[Record], mark: str) -> list[Record]:
    """The tools/call POSTs the gateway sent upstream for the call carrying `mark`."""
    return [
        r
        for r in records
        if r.method == "tools/call"
        and isinstance(r.body["params"].get("arguments"), dict)
        and r.body["params"]["arguments"].get("marker") == mark
    ]


def digest(authorization: str) -> str:
    """The fixture's credential digest (tests/fixtures/legacy/state.py)."""
    return hashlib.sha256(authorization.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------
# (a) every message crossing the gateway, against the spec's schemas
# ---------------------------------------------------------------------------


def check_front(records: list[Record]) -> dict[str, int]:
    """Client <-> gateway: requests, answers and relayed notifications are 2026-07-28."""
    seen: dict[str, int] = {}
    for record in records:
        if record.http_method != "POST" or not isinstance(record.body, dict):
            continue
        body = record.body
        if "id" not in body:
            continue
        method = body["method"]
        assert record.messages, f"no answer to {method}"
        *relayed, final = record.messages
        if SPEC.method_definition(MODERN, method, "Request") is None:
            # Sent on purpose: a method 2026-07-28 does not have.
            assert final["error"]["code"] == -32601, final
        else:
            check_request(SPEC, MODERN, body)
        for message in relayed:
            # Never a server-to-client request on a response stream.
            assert "id" not in message, message
            check_notification(SPEC, MODERN, message)
        assert final["id"] == body["id"]
        check_modern_answer(SPEC, method, final)
        seen[method] = seen.get(method, 0) + 1
    return seen


def check_back(records: list[Record]) -> dict[str, int]:
    """Gateway <-> legacy fixture: every message in the negotiated legacy version."""
    versions: dict[str, str] = {}  # session id -> negotiated version
    seen: dict[str, int] = {}
    for record in records:
        body = record.body
        if record.method == "initialize":
            assert "mcp-session-id" not in record.headers
            assert body["params"]["protocolVersion"] == LEGACY
            assert body["params"]["clientInfo"]["name"] == "mcp-shim"
            check_request(SPEC, LEGACY, body)
            (answer,) = [m for m in record.messages if m.get("id") == body["id"]]
            check_response(SPEC, LEGACY, answer, "initialize")
            versions[record.response_headers["mcp-session-id"]] = answer["result"][
                "protocolVersion"
            ]
            seen["initialize"] = seen.get("initialize", 0) + 1
            continue
        session = record.session_id
        assert session is not None, f"{record.http_method} without Mcp-Session-Id"
        if record.status == 404:
            continue  # an expired session: nothing was served
        version = versions[session]
        # 2025-06-18 and later: the negotiated version on every request after initialize.
        assert record.headers.get("mcp-protocol-version") == version
        if not isinstance(body, dict):
            continue  # GET stream or DELETE
        check_legacy_sent(SPEC, version, body)
        params = body.get("params") or {}
        meta = params.get("_meta") or {}
        leaked = [k for k in meta if k.startswith(MODERN_META_PREFIX)]
        assert not leaked, f"modern _meta keys sent upstream: {leaked} in {body}"
        name = body.get("method") or "response"
        seen[name] = seen.get(name, 0) + 1
        for message in record.messages:
            if "method" in message and "id" in message:
                check_request(SPEC, version, message)
            elif "method" in message:
                check_notification(SPEC, version, message)
            else:
                check_response(SPEC, version, message, body.get("method"))
    # Each new session: notifications/initialized is the first thing on it.
    firsts: dict[str, str] = {}
    for record in records:
        session = record.session_id
        if session in versions and session not in firsts and isinstance(record.body, dict):
            firsts[session] = str(record.body.get("method"))
    assert set(firsts.values()) <= {"notifications/initialized"}, firsts
    return seen


def test_every_message_crossing_the_gateway_matches_the_schema(chain: Chain) -> None:
    front_mark, back_mark = chain.front.mark(), chain.back.mark()
    # Real client traffic ...
    for script, *args in (
        ("discover_and_list.py",),
        ("call_tools.py",),
        ("read_resources.py",),
        ("prompts_and_completion.py",),
        ("logging_levels.py", "info"),
        ("whoami.py", "Bearer schema-check"),
    ):
        procs.run_modern_client(script, chain.front.url, *args)
    # ... and raw requests for what the client does not send on its own.
    url = chain.front.url
    assert rpc(url, "tools/list", accept="application/json").status_code == 200
    assert rpc(url, "ping", rid=2).status_code == 404
    response = call_tool(url, "slow_echo", {"ms": 200, "steps": 4}, meta={"progressToken": "p"})
    assert response.headers["content-type"].startswith("text/event-stream")
    call_tool(url, "raise_error", {"code": -32050, "data": {"x": 1}})
    rpc(url, "resources/read", {"uri": "test://missing"})

    front_records = chain.front.since(front_mark)
    seen = check_front(front_records)
    for method in (
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "completion/complete",
        "ping",
    ):
        assert seen.get(method), f"no {method} crossed the gateway: {seen}"
    relayed = [m["method"] for r in front_records for m in r.messages if "method" in m]
    assert "notifications/progress" in relayed and "notifications/message" in relayed

    until_sync(
        lambda: all(r.done for r in chain.back.since(back_mark) if r.http_method == "POST"),
        what="upstream exchanges",
    )
    upstream = check_back(chain.back.since(back_mark))
    for method in ("initialize", "notifications/initialized", "tools/call", "resources/read"):
        assert upstream.get(method), f"no {method} went upstream: {upstream}"
    # The gateway's own method table answered ping: it never went upstream.
    assert "ping" not in upstream


def test_progress_token_is_the_gateways_own_upstream(chain: Chain) -> None:
    mark, tag = chain.back.mark(), marker()
    response = call_tool(
        chain.gateway,
        "slow_echo",
        {"ms": 100, "steps": 2, "marker": tag},
        meta={"progressToken": "client-token"},
    )
    assert response.status_code == 200
    (sent,) = upstream_calls(chain.back.since(mark), tag)
    # Tokens must be unique per legacy session, which many callers share: the
    # upstream sees the gateway's request id, never the client's token.
    assert sent.body["params"]["_meta"]["progressToken"] == sent.body["id"]
    progress = [m for m in sent.messages if m.get("method") == "notifications/progress"]
    assert [m["params"]["progressToken"] for m in progress] == [sent.body["id"]] * 2


# ---------------------------------------------------------------------------
# (b) JSON or SSE, as the client's Accept allows; what is relayed on SSE
# ---------------------------------------------------------------------------


def test_json_only_client_gets_json_even_for_a_progress_call(chain: Chain) -> None:
    mark, tag = chain.back.mark(), marker()
    response = call_tool(
        chain.gateway,
        "slow_echo",
        {"text": "json please", "ms": 300, "steps": 3, "marker": tag},
        rid="json-1",
        accept="application/json",
        meta={"progressToken": "tok-json"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    answer = response.json()
    check_modern_answer(SPEC, "tools/call", answer)
    assert answer["id"] == "json-1"
    assert answer["result"]["content"] == [{"type": "text", "text": "json please"}]
    # The upstream did send progress; a JSON answer has no room for it.
    (sent,) = upstream_calls(chain.back.since(mark), tag)
    assert sum(m.get("method") == "notifications/progress" for m in sent.messages) == 3


@pytest.mark.parametrize("token", ["progress-test-1", 4242])
def test_sse_relays_progress_with_the_clients_token_before_the_result(
    chain: Chain, token: str | int
) -> None:
    response = call_tool(
        chain.gateway,
        "slow_echo",
        {"text": "streamed", "ms": 400, "steps": 4},
        rid=31,
        meta={"progressToken": token},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    *notes, final = wire.sse_messages(response.text)
    assert [n["method"] for n in notes] == ["notifications/progress"] * 4
    for note in notes:
        check_notification(SPEC, MODERN, note)
        assert note["params"]["progressToken"] == token
        assert type(note["params"]["progressToken"]) is type(token)
    assert [n["params"]["progress"] for n in notes] == [1, 2, 3, 4]
    assert notes[-1]["params"]["message"] == "step 4 of 4"
    check_modern_answer(SPEC, "tools/call", final)
    assert final["id"] == 31
    assert final["result"]["content"] == [{"type": "text", "text": "streamed"}]


def test_nothing_to_relay_means_a_json_answer(chain: Chain) -> None:
    response = call_tool(chain.gateway, "slow_echo", {"ms": 100, "steps": 2}, rid=32)
    # SSE is opened lazily, at the first relayed notification: without a
    # progressToken there is none, so the client that accepts both gets JSON.
    assert response.headers["content-type"].startswith("application/json")
    check_modern_answer(SPEC, "tools/call", response.json())


def test_sse_only_client_gets_sse(chain: Chain) -> None:
    response = call_tool(chain.gateway, "echo", {"text": "sse"}, rid=33, accept="text/event-stream")
    assert response.headers["content-type"].startswith("text/event-stream")
    (answer,) = wire.sse_messages(response.text)
    check_modern_answer(SPEC, "tools/call", answer)
    assert answer["result"]["content"] == [{"type": "text", "text": "sse"}]


@pytest.mark.parametrize("level", [None, "debug", "warning", "emergency"])
def test_log_messages_only_with_log_level_and_at_or_above_it(
    chain: Chain, level: str | None
) -> None:
    meta = {wire.META_LOG_LEVEL: level} if level else None
    response = call_tool(chain.gateway, "emit_logs", {}, rid=34, meta=meta)
    assert response.status_code == 200
    *notes, final = wire.answer_messages(response)
    check_modern_answer(SPEC, "tools/call", final)
    # The fixture sent every level (nobody set a level on its session).
    assert final["result"]["structuredContent"] == {"sent": LEVELS}
    expected = [] if level is None else LEVELS[LEVELS.index(level) :]
    assert [n["params"]["level"] for n in notes] == expected
    for note in notes:
        check_notification(SPEC, MODERN, note)
        assert note["method"] == "notifications/message"
        assert note["params"]["data"] == f"{note['params']['level']} message"
    if level is None:
        assert response.headers["content-type"].startswith("application/json")


def test_log_messages_dropped_for_a_json_only_client(chain: Chain) -> None:
    response = call_tool(
        chain.gateway,
        "emit_logs",
        {"levels": ["error"]},
        rid=35,
        accept="application/json",
        meta={wire.META_LOG_LEVEL: "debug"},
    )
    assert response.headers["content-type"].startswith("application/json")
    check_modern_answer(SPEC, "tools/call", response.json())


# ---------------------------------------------------------------------------
# (c) a client that goes away cancels the upstream call
# ---------------------------------------------------------------------------


def assert_cancelled_upstream(chain: Chain, mark: int, tag: str, before: int) -> None:
    (sent,) = upstream_calls(chain.back.since(mark), tag)
    cancel = chain.back.wait_for(
        lambda r: (
            r.method == "notifications/cancelled"
            and r.body["params"]["requestId"] == sent.body["id"]
            # recorded once the upstream answered, not merely once it was sent
            and r.status is not None
        ),
        since=mark,
    )
    check_legacy_sent(SPEC, LEGACY, cancel.body)
    assert cancel.session_id == sent.session_id
    assert cancel.status == 202
    until_sync(
        lambda: chain.stats()["toolCancellations"].get("slow_echo", 0) == before + 1,
        what="the fixture to record the cancellation",
    )
    # The tool was stopped: no answer to the cancelled request ever went upstream.
    until_sync(lambda: sent.done, what="the upstream stream to close")
    assert not [m for m in sent.messages if m.get("id") == sent.body["id"]]


def test_closing_the_sse_answer_cancels_the_upstream_call(chain: Chain) -> None:
    before = chain.stats()["toolCancellations"].get("slow_echo", 0)
    mark, tag = chain.back.mark(), marker()
    message = wire.body(
        "tools/call",
        {"name": "slow_echo", "arguments": {"ms": 30000, "steps": 300, "marker": tag}},
        rid=41,
        meta={"progressToken": "cancel-me"},
    )
    headers = wire.headers_for(message)
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", chain.gateway, content=json.dumps(message).encode(), headers=headers
        ) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data:"):
                assert json.loads(line[5:])["method"] == "notifications/progress"
                break
    # The `with` closed the connection mid-call.
    assert_cancelled_upstream(chain, mark, tag, before)
    logged = wire.wait_for_log(chain.log, headers["x-request-id"], "call")
    assert logged["outcome"] == "client_disconnected"


def test_dropping_a_json_request_mid_call_cancels_too(chain: Chain) -> None:
    before = chain.stats()["toolCancellations"].get("slow_echo", 0)
    mark, tag = chain.back.mark(), marker()
    with pytest.raises(httpx.ReadTimeout):
        call_tool(
            chain.gateway,
            "slow_echo",
            {"ms": 30000, "steps": 3, "marker": tag},
            accept="application/json",
            timeout=1.0,
        )
    assert_cancelled_upstream(chain, mark, tag, before)


# ---------------------------------------------------------------------------
# (d) sessions: keyed by credentials and capabilities, renewed when expired
# ---------------------------------------------------------------------------


def whoami(url: str, **kw: Any) -> dict[str, Any]:
    response = call_tool(url, "whoami", {}, **kw)
    assert response.status_code == 200, response.text
    (answer,) = [m for m in wire.answer_messages(response) if "id" in m]
    structured: dict[str, Any] = answer["result"]["structuredContent"]
    return structured


def test_credentials_separate_sessions_and_are_forwarded_as_they_came(chain: Chain) -> None:
    mark = chain.back.mark()
    alice = f"Bearer alice-{uuid.uuid4().hex}"
    bob = f"Bearer bob-{uuid.uuid4().hex}"
    seen: dict[str, dict[str, Any]] = {}
    for name, authorization in (("alice", alice), ("bob", bob)):
        # The real modern client, with the caller's Authorization on every request.
        document = procs.run_modern_client("whoami.py", chain.front.url, authorization)
        assert isinstance(document, dict)
        first, second = (c["result"]["structuredContent"] for c in document["calls"])
        # One caller, one legacy session, reused.
        assert first["sessionId"] == second["sessionId"] is not None
        assert first["authorization"] == digest(authorization)
        # That session never carried anybody else's credentials.
        assert first["credentials"] == [digest(authorization)]
        seen[name] = first
    anonymous = whoami(chain.gateway)
    assert anonymous["authorization"] is None and anonymous["credentials"] == []
    sessions = {seen["alice"]["sessionId"], seen["bob"]["sessionId"], anonymous["sessionId"]}
    assert len(sessions) == 3

    # At the upstream: initialize and every call on a caller's session carry
    # exactly the header that caller sent.
    records = chain.back.since(mark)
    for authorization, session in (
        (alice, seen["alice"]["sessionId"]),
        (bob, seen["bob"]["sessionId"]),
    ):
        init = [
            r
            for r in records
            if r.method == "initialize" and r.response_headers.get("mcp-session-id") == session
        ]
        assert len(init) == 1 and init[0].headers["authorization"] == authorization
        on_session = [r for r in records if r.session_id == session]
        assert on_session and all(r.headers["authorization"] == authorization for r in on_session)


def test_client_capabilities_separate_sessions(chain: Chain) -> None:
    plain = whoami(chain.gateway, authorization="Bearer caps")
    sampling = whoami(
        chain.gateway, authorization="Bearer caps", meta={wire.META_CAPABILITIES: {"sampling": {}}}
    )
    assert plain["sessionId"] != sampling["sessionId"]
    assert plain["clientCapabilities"] == {}
    assert sampling["clientCapabilities"] == {"sampling": {}}
    again = whoami(
        chain.gateway, authorization="Bearer caps", meta={wire.META_CAPABILITIES: {"sampling": {}}}
    )
    assert again["sessionId"] == sampling["sessionId"]


def test_expired_session_is_reinitialised_once_and_the_call_runs_once(chain: Chain) -> None:
    authorization = f"Bearer carol-{uuid.uuid4().hex}"
    before = whoami(chain.gateway, authorization=authorization)["sessionId"]
    expired = httpx.post(chain.fixture + "/debug/expire-sessions", timeout=10).json()
    assert expired["expired"] >= 1

    mark, tag = chain.back.mark(), marker()
    response = call_tool(
        chain.gateway,
        "echo",
        {"text": "after expiry", "marker": tag},
        rid=51,
        authorization=authorization,
    )
    assert response.status_code == 200, response.text
    (answer,) = wire.answer_messages(response)
    check_modern_answer(SPEC, "tools/call", answer)
    assert answer["id"] == 51
    assert answer["result"]["content"] == [{"type": "text", "text": "after expiry"}]

    # The tool ran exactly once ...
    assert chain.stats()["markers"].get(tag) == 1
    # ... because an attempt on the expired session is refused (404) before any
    # handler runs, and the one resend goes to a fresh session. A 404 retires
    # only the session that got it: this credential's session met its own.
    attempts = upstream_calls(chain.back.since(mark), tag)
    assert [r.status for r in attempts] == [404, 200], attempts
    assert attempts[0].session_id == before
    after = whoami(chain.gateway, authorization=authorization)["sessionId"]
    assert attempts[-1].session_id == after != before
    records = chain.back.since(mark)
    init = [r for r in records if r.method == "initialize"]
    assert any(
        r.response_headers.get("mcp-session-id") == after
        and r.headers["authorization"] == authorization
        for r in init
    )
    assert any(line["event"] == "upstream_session_expired" for line in wire.log_lines(chain.log))


# ---------------------------------------------------------------------------
# (e) error codes, version-scoped end to end
# ---------------------------------------------------------------------------


def test_resource_not_found_becomes_invalid_params_with_the_uri(chain: Chain) -> None:
    mark = chain.back.mark()
    response = rpc(chain.gateway, "resources/read", {"uri": "test://nowhere"}, rid="rr-1")
    assert response.status_code == 400  # -32602 -> 400 (one table for every error)
    answer = response.json()
    check_modern_error(SPEC, answer)
    assert answer["id"] == "rr-1"
    assert answer["error"]["code"] == -32602
    assert answer["error"]["data"] == {"uri": "test://nowhere"}
    # What the legacy fixture answered: its -32002.
    # (An earlier test expired every session: a 404 and one resend may come first.)
    (sent,) = [
        r for r in chain.back.since(mark) if r.method == "resources/read" and r.status != 404
    ]
    (upstream_answer,) = [m for m in sent.messages if m.get("id") == sent.body["id"]]
    assert upstream_answer["error"]["code"] == -32002
    assert upstream_answer["error"]["data"] == {"uri": "test://nowhere"}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (-32001, -32001),  # a 2025 SDK's request timeout passes as it is
        (-32000, -32000),  # legacy implementation-defined sub-range
        (-32602, -32602),
        # A -32042 with no elicitations to offer cannot become input_required.
        (-32042, -32603),
        (-32020, -32603),  # means nothing from a 2025 server; collides with HeaderMismatch
        (-32021, -32603),
        (-32022, -32603),
        (-32050, -32603),  # unassigned in the reserved range
        (-32099, -32603),
    ],
)
def test_error_codes_from_a_2025_upstream(chain: Chain, code: int, expected: int) -> None:
    data = {"detail": f"from the fixture {code}"}
    response = call_tool(
        chain.gateway,
        "raise_error",
        {"code": code, "message": f"raised {code}", "data": data},
        rid=f"err{code}",
    )
    answer = response.json()
    check_modern_error(SPEC, answer)
    assert answer["id"] == f"err{code}"
    error = answer["error"]
    assert error["code"] == expected
    assert error["message"] == f"raised {code}"
    if expected == code:
        assert error["data"] == data
    else:
        # The original is kept whole for whoever debugs it.
        assert error["data"] == {
            "originalError": {"code": code, "message": f"raised {code}", "data": data}
        }
    assert response.status_code == (400 if expected == -32602 else 200)


# ---------------------------------------------------------------------------
# (f) the upstream dies mid-call
# ---------------------------------------------------------------------------


@contextmanager
def killable_fixture(port: int, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    argv = [str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE), "--port", str(port)]
    with procs.running(argv, f"http://127.0.0.1:{port}/mcp", log_path=log_path) as proc:
        yield proc


def started_calls(fixture: str, tool: str) -> int:
    calls: int = httpx.get(fixture + "/debug/stats", timeout=5).json()["toolCalls"].get(tool, 0)
    return calls


def test_upstream_dies_mid_call_and_a_later_call_works(logs_dir: Path) -> None:
    port = procs.free_port()
    fixture = f"http://127.0.0.1:{port}"
    log = logs_dir / "dying-gateway.log"
    with procs.gateway(fixture + "/mcp", procs.free_port(), log_path=log) as gateway:
        url = gateway + "/mcp"

        # 1. JSON answer: the fixture is killed while slow_echo sleeps.
        with killable_fixture(port, logs_dir / "dying-legacy-1.log") as proc:
            assert call_tool(url, "echo", {"text": "warm"}).status_code == 200
            outcome: dict[str, Any] = {}

            def slow() -> None:
                started = time.monotonic()
                outcome["response"] = call_tool(
                    url, "slow_echo", {"ms": 60000, "steps": 2}, rid=61, accept="application/json"
                )
                outcome["seconds"] = time.monotonic() - started

            caller = threading.Thread(target=slow)
            caller.start()
            until_sync(lambda: started_calls(fixture, "slow_echo") == 1, what="slow_echo to start")
            proc.kill()
            proc.wait()
            caller.join(30)
        response = outcome["response"]
        assert 500 <= response.status_code < 600, response.text
        answer = response.json()
        check_modern_error(SPEC, answer)
        assert answer["id"] == 61 and answer["error"]["code"] == -32603
        assert "upstream unreachable during 'tools/call'" in answer["error"]["message"]
        assert outcome["seconds"] < 20  # noticed at once, not at a timeout

        # 2. While it is down: a clear 5xx, not a hang.
        # (A refused connection is "unreachable", 502; not a timeout, 504.)
        down = call_tool(url, "echo", {"text": "anyone?"}, rid=62)
        assert down.status_code == 502, down.text
        assert down.json()["id"] == 62
        assert "upstream unreachable" in down.json()["error"]["message"]

        # 3. Back on the same port: calls work again (its old session is gone:
        # the gateway re-initialises), then an SSE answer loses its upstream.
        with killable_fixture(port, logs_dir / "dying-legacy-2.log") as proc:
            after = call_tool(url, "echo", {"text": "back"}, rid=63)
            assert after.status_code == 200, after.text
            assert after.json()["result"]["content"] == [{"type": "text", "text": "back"}]

            message = wire.body(
                "tools/call",
                {"name": "slow_echo", "arguments": {"ms": 60000, "steps": 600}},
                rid=64,
                meta={"progressToken": "dies"},
            )
            with (
                httpx.Client(timeout=30) as client,
                client.stream(
                    "POST",
                    url,
                    content=json.dumps(message).encode(),
                    headers=wire.headers_for(message),
                ) as streamed,
            ):
                assert streamed.headers["content-type"].startswith("text/event-stream")
                events: list[dict[str, Any]] = []
                for line in streamed.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    events.append(json.loads(line[5:]))
                    if len(events) == 1:
                        proc.kill()
                        proc.wait()
            final = events[-1]
            assert final["id"] == 64, events
            check_modern_error(SPEC, final)
            assert final["error"]["code"] == -32603
            assert "upstream" in final["error"]["message"]

        # 4. And once more after a restart.
        with killable_fixture(port, logs_dir / "dying-legacy-3.log"):
            again = call_tool(url, "echo", {"text": "again"}, rid=65)
            assert again.status_code == 200, again.text
            assert again.json()["result"]["content"] == [{"type": "text", "text": "again"}]
    assert any(line["event"] == "upstream_error" for line in wire.log_lines(log))


# ---------------------------------------------------------------------------
# (g) logs: one JSON line per call, no secrets, no bodies
# ---------------------------------------------------------------------------


def test_log_lines_carry_call_facts_and_no_secrets_or_bodies(
    gateway_url: str, gateway_log: Path
) -> None:
    secret = f"sk-live-{uuid.uuid4().hex}"
    authorization = f"Bearer {secret}"
    argument = f"argument-body-{uuid.uuid4().hex}"
    url = gateway_url + "/mcp"
    ids: list[tuple[str, str, str]] = []  # (request id, method, outcome)
    for method, params, meta, outcome in (
        ("tools/call", {"name": "echo", "arguments": {"text": argument}}, None, "ok"),
        (
            "tools/call",
            {"name": "slow_echo", "arguments": {"text": argument, "ms": 100, "steps": 2}},
            {"progressToken": argument},
            "ok",
        ),
        ("resources/read", {"uri": f"test://{argument}"}, None, "error -32602"),
    ):
        message = wire.body(method, params, meta=meta)
        headers = wire.headers_for(message, authorization=authorization)
        response = httpx.post(url, content=json.dumps(message).encode(), headers=headers)
        assert argument in response.text  # it did travel, in the body
        ids.append((headers["x-request-id"], method, outcome))
    # A rejected request with the same secrets.
    rejected = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": argument}}
    headers = wire.headers_for(rejected, authorization=authorization)
    assert (
        httpx.post(url, content=json.dumps(rejected).encode(), headers=headers).status_code == 400
    )

    for request_id, method, outcome in ids:
        line = wire.wait_for_log(gateway_log, request_id, "call")
        assert line["method"] == method
        assert line["client_version"] == MODERN
        assert line["upstream_version"] == LEGACY
        assert isinstance(line["duration_ms"], int | float) and line["duration_ms"] >= 0
        assert line["outcome"] == outcome
        assert line["level"] == "info" and "timestamp" in line
    wire.wait_for_log(gateway_log, headers["x-request-id"], "request_rejected")

    text = gateway_log.read_text(encoding="utf-8", errors="replace")
    for needle in (secret, argument, authorization):
        assert needle not in text, f"{needle!r} leaked into the gateway log"
    # Nothing that looks like a body or a header value either.
    for line in wire.log_lines(gateway_log):
        assert not {"params", "arguments", "result", "authorization", "headers"} & set(line)
