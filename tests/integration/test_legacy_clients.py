"""Legacy clients (2025-03-26 .. 2025-11-25) through the gateway to the legacy fixture.

Issue 9: an operator who puts the gateway in front of a server must not break
the clients that talk to it today. The spec's dual-era server serves both
eras on one endpoint (2026-07-28 basic/versioning "Backward Compatibility with
Initialization-Based Versions"; basic/transports/streamable-http "Backward
Compatibility"): a body carrying `io.modelcontextprotocol/protocolVersion` in
`_meta` is modern, `initialize` (and a session it started) is legacy.

Two kinds of evidence: the official mcp 1.x Python client (tests/legacy_client,
run under .peers/legacy) doing what a client does, and raw HTTP requests whose
every answer is validated against the schema.json of the client's revision.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.schema import SPEC, check_modern_answer, check_notification, check_response
from tests.waiting import until_sync

pytestmark = pytest.mark.peers

LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
# Keys no legacy revision defines: 2026-07-28 result and _meta fields.
MODERN_ONLY_KEYS = {"resultType", "ttlMs", "cacheScope", "inputRequests", "requestState"}
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
# Defined only from 2025-06-18 on: a 2025-03-26 client must never see them.
AFTER_2025_03_26 = {"structuredContent", "outputSchema", "title", "resource_link"}


# ---------------------------------------------------------------------------
# Raw legacy wire
# ---------------------------------------------------------------------------


def headers(
    session: str | None = None,
    version: str | None = None,
    authorization: str | None = None,
    accept: str = wire.ACCEPT_BOTH,
) -> dict[str, str]:
    out = {"content-type": "application/json", "accept": accept}
    if session is not None:
        out["mcp-session-id"] = session
    if version is not None and version not in ("2024-11-05", "2025-03-26"):
        # 2025-06-18 streamable-http "Protocol Version Header": on every request
        # after initialize.
        out["mcp-protocol-version"] = version
    if authorization is not None:
        out["authorization"] = authorization
    return out


def events(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body (priming events, with no data, skipped)."""
    out = []
    for event in text.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip() for line in event.split("\n") if line.startswith("data:")]
        if data and "".join(data).strip():
            out.append(json.loads("\n".join(data)))
    return out


def messages(response: httpx.Response) -> list[dict[str, Any]]:
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "text/event-stream":
        return events(response.text)
    assert kind == "application/json", f"unexpected content type {kind!r}"
    body = response.json()
    return body if isinstance(body, list) else [body]


def assert_legacy_bytes(message: Any, version: str) -> None:
    """Nothing in `message` that the client's revision does not define."""
    text = json.dumps(message)
    for key in MODERN_ONLY_KEYS:
        assert f'"{key}"' not in text, f"{key} reached a {version} client: {text[:300]}"
    assert SERVER_INFO_META not in text
    if version in ("2024-11-05", "2025-03-26"):
        for key in AFTER_2025_03_26:
            assert f'"{key}"' not in text, f"{key} reached a 2025-03-26 client: {text[:300]}"


def check_legacy(version: str, message: dict[str, Any], method: str | None) -> None:
    """A message the gateway sent a legacy client speaking `version`."""
    if "method" in message and "id" not in message:
        check_notification(SPEC, version, message)
    elif "method" not in message:
        check_response(SPEC, version, message, method)
    assert_legacy_bytes(message, version)


def initialize(
    client: httpx.Client,
    url: str,
    version: str,
    authorization: str | None = None,
    capabilities: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    message = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "raw-legacy-test", "version": "0"},
        },
    }
    response = client.post(url, json=message, headers=headers(authorization=authorization))
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    (answer,) = messages(response)
    negotiated = answer["result"]["protocolVersion"]
    check_legacy(negotiated, answer, "initialize")
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    sent = client.post(
        url, json=note, headers=headers(session, negotiated, authorization=authorization)
    )
    assert sent.status_code == 202, sent.text
    return session, answer


def call(
    client: httpx.Client,
    url: str,
    session: str,
    version: str,
    method: str,
    params: dict[str, Any] | None = None,
    rid: Any = 1,
    authorization: str | None = None,
) -> httpx.Response:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return client.post(
        url, json=message, headers=headers(session, version, authorization=authorization)
    )


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30.0) as c:
        yield c


@pytest.fixture(scope="module")
def mcp_url(gateway_url: str) -> str:
    return gateway_url + "/mcp"


# ---------------------------------------------------------------------------
# The official mcp 1.x client
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_mcp1_client_tour(version: str, mcp_url: str) -> None:
    out: Any = procs.run_legacy_client("tour.py", mcp_url, version)
    init = out["initialize"]
    # 2025-11-25 basic/lifecycle "Version Negotiation": the server answers the
    # client's version when it supports it.
    assert init["protocolVersion"] == version
    assert init["serverInfo"]["name"] == "mcp-shim-legacy-fixture"
    assert init["capabilities"]["resources"] == {"subscribe": True, "listChanged": True}
    assert out["session_id_length"] >= 32
    assert {"test_simple_text", "test_sampling", "whoami"} <= set(out["tools"])
    if version == "2025-03-26":
        assert "outputSchema" not in out["tool_fields"]
    else:
        assert "outputSchema" in out["tool_fields"]
    assert out["simple"]["result"]["content"][0]["text"].startswith("This is a simple text")
    assert out["error_tool"]["result"]["isError"] is True
    assert out["sampling"]["result"]["content"][0]["text"] == "LLM response: Paris"
    assert out["asked"]["sampling"]["messages"][0]["content"]["text"] == "Capital?"
    assert out["roots"]["result"]["content"][0]["text"] == "Found 1 root(s)"
    assert out["asked"]["roots"] is True
    if version != "2025-03-26":
        assert "ada@example.com" in out["elicitation"]["result"]["content"][0]["text"]
    assert out["set_level"] == {"result": {}}
    assert [m["data"] for m in out["logs"]] == [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    assert out["progress"] == [0.0, 50.0, 100.0]
    assert "test_prompt_with_arguments" in out["prompts"]
    assert out["prompt"]["result"]["messages"]
    assert "test://static-text" in out["resources"]
    assert out["read"]["result"]["contents"][0]["uri"] == "test://static-text"
    assert out["templates"]["result"]["resourceTemplates"]
    assert out["completion"]["result"]["completion"]["values"] == ["paris", "park", "party"]
    assert out["ping"] == {"result": {}}
    # The upstream closes the call's stream mid-call (SEP-1699); the client
    # resumes with Last-Event-ID through the gateway and gets the result.
    assert "properly reconnected" in out["reconnection"]["result"]["content"][0]["text"]


def test_mcp1_clients_with_different_credentials_and_a_subscription(mcp_url: str) -> None:
    out: Any = procs.run_legacy_client(
        "two_sessions.py", mcp_url, "2025-06-18", uuid.uuid4().hex[:8]
    )
    assert out["session_ids_differ"]
    a = out["whoami"]["a"]["result"]["structuredContent"]
    b = out["whoami"]["b"]["result"]["structuredContent"]
    # Never one upstream session for two credentials; each sent as it came.
    assert a["sessionId"] != b["sessionId"]
    assert a["authorization"] != b["authorization"]
    assert a["clientInfo"]["name"] == "mcp"  # the client's own clientInfo reached upstream
    assert out["subscribe"] == {"result": {}}
    assert out["update"]["result"]["structuredContent"]["notifiedSessions"] == 1

    def methods(name: str) -> list[str]:
        return [m["method"] for m in out["seen"][name]]

    # resources/updated on A's GET stream only: B never subscribed.
    assert "notifications/resources/updated" in methods("a")
    assert "notifications/resources/updated" not in methods("b")
    assert "notifications/tools/list_changed" in methods("a")
    assert "notifications/tools/list_changed" in methods("b")
    for message in out["seen"]["a"] + out["seen"]["b"]:
        check_legacy("2025-06-18", message, None)


# ---------------------------------------------------------------------------
# Raw requests, validated against the client revision's schema
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", (*LEGACY_VERSIONS, "2024-11-05"))
def test_raw_session_answers_in_the_clients_revision(
    version: str, client: httpx.Client, mcp_url: str
) -> None:
    session, init = initialize(client, mcp_url, version)
    assert init["result"]["protocolVersion"] == version
    for rid, (method, params) in enumerate(
        [
            ("tools/list", {}),
            ("tools/call", {"name": "structured_echo", "arguments": {"text": "hi"}}),
            ("tools/call", {"name": "test_tool_with_progress", "_meta": {"progressToken": "p"}}),
            ("prompts/list", {}),
            ("prompts/get", {"name": "test_simple_prompt"}),
            ("resources/list", {}),
            ("resources/read", {"uri": "test://static-text"}),
            ("resources/templates/list", {}),
            ("ping", None),
            ("completion/complete", None),
            ("logging/setLevel", {"level": "debug"}),
        ],
        start=1,
    ):
        if method == "completion/complete":
            params = {
                "ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
                "argument": {"name": "arg2", "value": "wo"},
            }
        response = call(client, mcp_url, session, version, method, params, rid=rid)
        assert response.status_code == 200, (method, response.text)
        answers = messages(response)
        *relayed, final = answers
        assert final["id"] == rid
        check_legacy(version, final, method)
        for message in relayed:
            check_legacy(version, message, None)
        if method == "tools/call" and params and params.get("_meta"):
            tokens = {m["params"]["progressToken"] for m in relayed}
            assert tokens == {"p"}, relayed  # the client's own token, unchanged
    # A 2025-11-25 error code the client's revision does not know is translated.
    response = call(client, mcp_url, session, version, "tools/call", {"name": "no_such"}, rid=99)
    (final,) = messages(response)
    check_legacy(version, final, "tools/call")


def test_json_only_client_is_never_left_waiting_on_a_server_request(
    client: httpx.Client, mcp_url: str
) -> None:
    """A client that takes no event stream cannot receive the server's sampling
    request mid-call: the gateway refuses it upstream at once, so the call ends
    instead of waiting for MCP_SHIM_REQUEST_TIMEOUT_S."""
    session, _ = initialize(client, mcp_url, "2025-11-25", capabilities={"sampling": {}})
    message = rpc(4, "tools/call", {"name": "test_sampling", "arguments": {"prompt": "?"}})
    started = time.monotonic()
    response = client.post(
        mcp_url,
        json=message,
        headers=headers(session, "2025-11-25", accept="application/json"),
        timeout=15.0,
    )
    assert time.monotonic() - started < 10
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    answer = response.json()
    check_legacy("2025-11-25", answer, "tools/call")
    assert answer["id"] == 4


def test_unknown_offered_version_gets_the_latest_legacy_one(
    client: httpx.Client, mcp_url: str
) -> None:
    _, init = initialize(client, mcp_url, "1999-01-01")
    assert init["result"]["protocolVersion"] == "2025-11-25"


def test_stolen_session_id_with_another_credential_is_unknown(
    client: httpx.Client, mcp_url: str
) -> None:
    session, _ = initialize(client, mcp_url, "2025-11-25", authorization="Bearer owner")
    ok = call(client, mcp_url, session, "2025-11-25", "ping", authorization="Bearer owner")
    assert ok.status_code == 200
    for thief in ("Bearer thief", None):
        # 2025-11-25 streamable-http "Session Management": 404 for a session the
        # server does not know: for this credential it does not exist.
        stolen = call(client, mcp_url, session, "2025-11-25", "ping", authorization=thief)
        assert stolen.status_code == 404, stolen.text
        assert stolen.json()["error"]["code"] == -32600
        get = client.get(
            mcp_url,
            headers={
                **headers(session, "2025-11-25"),
                **({"authorization": thief} if thief else {}),
            },
        )
        assert get.status_code == 404
    # The owner's session is untouched.
    again = call(client, mcp_url, session, "2025-11-25", "ping", authorization="Bearer owner")
    assert again.status_code == 200


def test_unknown_session_is_404_and_delete_ends_it(client: httpx.Client, mcp_url: str) -> None:
    response = call(client, mcp_url, "not-a-session-of-ours", "2025-11-25", "ping")
    assert response.status_code == 404
    session, _ = initialize(client, mcp_url, "2025-06-18")
    deleted = client.delete(mcp_url, headers=headers(session, "2025-06-18"))
    assert deleted.status_code == 200
    after = call(client, mcp_url, session, "2025-06-18", "ping")
    assert after.status_code == 404
    assert client.delete(mcp_url, headers=headers(session, "2025-06-18")).status_code == 404


def test_protocol_version_header_must_match_the_session(client: httpx.Client, mcp_url: str) -> None:
    session, _ = initialize(client, mcp_url, "2025-06-18")
    message = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
    for value in ("2025-11-25", "2026-07-28", "bogus"):
        # 2025-06-18 streamable-http: an invalid or unsupported version MUST get 400.
        response = client.post(
            mcp_url, json=message, headers={**headers(session), "mcp-protocol-version": value}
        )
        assert response.status_code == 400, (value, response.text)
        assert response.json()["error"]["code"] == -32600
    # Absent: accepted (the server assumes the negotiated version).
    assert client.post(mcp_url, json=message, headers=headers(session)).status_code == 200


def test_modern_request_with_meta_takes_the_modern_path_even_with_a_session_header(
    client: httpx.Client, mcp_url: str
) -> None:
    session, _ = initialize(client, mcp_url, "2025-11-25")
    message = wire.body("server/discover", rid=7)
    response = wire.post(
        client, mcp_url, message, wire.headers_for(message, mcp_session_id=session)
    )
    assert response.status_code == 200, response.text
    (answer,) = wire.answer_messages(response)
    check_modern_answer(SPEC, "server/discover", answer)
    # Without _meta, without initialize and without a session: the modern 400,
    # so a dual-era client's probe falls back to initialize.
    bare = {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}
    refused = client.post(mcp_url, json=bare, headers=headers())
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == -32020


def test_server_stream_relays_a_server_request_and_the_clients_answer_goes_back(
    client: httpx.Client, mcp_url: str
) -> None:
    session, _ = initialize(client, mcp_url, "2025-11-25")
    hdrs = headers(session, "2025-11-25", accept="text/event-stream")
    seen: list[tuple[str | None, dict[str, Any]]] = []
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        httpx.Client(timeout=httpx.Timeout(10.0)) as streamer,
        streamer.stream("GET", mcp_url, headers=hdrs) as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        # The fixture's tool pings its client on the session's GET stream and
        # waits for the answer.
        pending = pool.submit(
            call, client, mcp_url, session, "2025-11-25", "tools/call", {"name": "ping_client"}, 3
        )
        event_id: str | None = None
        buffer = ""
        for chunk in stream.iter_text():
            buffer += chunk
            while "\n\n" in buffer:
                raw, buffer = buffer.split("\n\n", 1)
                lines = raw.split("\n")
                ids = [line[3:].strip() for line in lines if line.startswith("id:")]
                data = "".join(line[5:].lstrip() for line in lines if line.startswith("data:"))
                event_id = ids[0] if ids else event_id
                if data:
                    seen.append((event_id, json.loads(data)))
            if seen:
                break
        event_id, request = seen[0]
        assert request["method"] == "ping"
        assert event_id, "the upstream's SSE event id is passed through"
        check_legacy("2025-11-25", request, None)
        # 2025-11-25 streamable-http: a POSTed response is answered 202.
        reply = {"jsonrpc": "2.0", "id": request["id"], "result": {}}
        with httpx.Client(timeout=10.0) as other:
            answered = other.post(mcp_url, json=reply, headers=headers(session, "2025-11-25"))
        assert answered.status_code == 202, answered.text
        response = pending.result(timeout=20)
    (final,) = messages(response)
    check_legacy("2025-11-25", final, "tools/call")
    assert final["result"]["isError"] is False, final


# ---------------------------------------------------------------------------
# JSON-RPC batches (2025-03-26 basic/index "Batching"; removed in 2025-06-18)
# ---------------------------------------------------------------------------


def rpc(rid: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


def slow(rid: Any, ms: int) -> dict[str, Any]:
    return rpc(rid, "tools/call", {"name": "slow_echo", "arguments": {"text": str(rid), "ms": ms}})


def post_batch(
    client: httpx.Client,
    url: str,
    session: str | None,
    version: str | None,
    batch: Any,
    accept: str = wire.ACCEPT_BOTH,
) -> httpx.Response:
    return client.post(url, json=batch, headers=headers(session, version, accept=accept))


@pytest.mark.parametrize("accept", [wire.ACCEPT_BOTH, "application/json"])
def test_batch_of_a_2025_03_26_client_is_answered_as_one(
    accept: str, client: httpx.Client, mcp_url: str
) -> None:
    session, _ = initialize(client, mcp_url, "2025-03-26")
    batch = [
        slow("a", 1500),
        slow("b", 1500),
        rpc("c", "tools/call", {"name": "structured_echo", "arguments": {"text": "s"}}),
        rpc(7, "ping"),
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
    ]
    started = time.monotonic()
    response = post_batch(client, mcp_url, session, "2025-03-26", batch, accept)
    elapsed = time.monotonic() - started
    assert response.status_code == 200, response.text
    if accept == "application/json":
        assert response.headers["content-type"].startswith("application/json")
        SPEC.validate("2025-03-26", "JSONRPCBatchResponse", response.json())
    else:
        assert response.headers["content-type"].startswith("text/event-stream")
    answers = {m["id"]: m for m in messages(response) if "id" in m and "method" not in m}
    # One response per request, matched by id.
    assert set(answers) == {"a", "b", "c", 7}
    assert answers["a"]["result"]["content"][0]["text"] == "a"
    assert answers["b"]["result"]["content"][0]["text"] == "b"
    for rid, method in (("a", "tools/call"), ("c", "tools/call"), (7, "ping")):
        check_legacy("2025-03-26", answers[rid], method)
    # Sent upstream each on its own and concurrently: two 1.5 s calls in well under 3 s.
    assert elapsed < 2.8, elapsed


def test_batch_of_only_notifications_is_accepted_with_202(
    client: httpx.Client, mcp_url: str
) -> None:
    session, _ = initialize(client, mcp_url, "2025-03-26")
    batch = [
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
    ]
    response = post_batch(client, mcp_url, session, "2025-03-26", batch)
    assert response.status_code == 202, response.text
    assert response.content == b""


def refused_batch(response: httpx.Response, *words: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["error"]["code"] == -32600
    for word in words:
        assert word in error["error"]["message"], error


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_batch_from_a_client_whose_revision_removed_batching(
    version: str, client: httpx.Client, mcp_url: str
) -> None:
    session, _ = initialize(client, mcp_url, version)
    response = post_batch(client, mcp_url, session, version, [rpc(1, "ping"), rpc(2, "ping")])
    refused_batch(response, version, "removed batching")


def test_modern_batch_is_refused(client: httpx.Client, mcp_url: str) -> None:
    batch = [wire.body("server/discover", rid=1), wire.body("server/discover", rid=2)]
    response = client.post(mcp_url, json=batch, headers=wire.headers_for(batch[0]))
    refused_batch(response, "batching was removed")


def test_empty_oversized_and_initialize_batches_are_refused(
    client: httpx.Client, mcp_url: str
) -> None:
    session, _ = initialize(client, mcp_url, "2025-03-26")
    refused_batch(post_batch(client, mcp_url, session, "2025-03-26", []), "empty")
    big = [rpc(i, "ping") for i in range(51)]  # MCP_SHIM_MAX_BATCH defaults to 50
    refused_batch(post_batch(client, mcp_url, session, "2025-03-26", big), "MCP_SHIM_MAX_BATCH")
    exactly = [rpc(i, "ping") for i in range(50)]
    response = post_batch(client, mcp_url, session, "2025-03-26", exactly)
    assert response.status_code == 200
    assert len(messages(response)) == 50
    init = rpc(0, "initialize", {"protocolVersion": "2025-03-26", "capabilities": {}})
    # 2025-03-26 basic/lifecycle: the initialize request MUST NOT be part of a batch.
    refused_batch(post_batch(client, mcp_url, None, None, [init]), "initialize")
    refused_batch(
        post_batch(client, mcp_url, session, "2025-03-26", [init, rpc(1, "ping")]), "initialize"
    )


# ---------------------------------------------------------------------------
# The deprecated HTTP+SSE transport (2024-11-05 basic/transports "HTTP with SSE")
# ---------------------------------------------------------------------------


def test_mcp1_sse_client_at_2024_11_05(gateway_url: str) -> None:
    out: Any = procs.run_legacy_client("sse_tour.py", gateway_url + "/sse")
    assert out["initialize"]["protocolVersion"] == "2024-11-05"
    check_legacy("2024-11-05", {"jsonrpc": "2.0", "id": 0, "result": out["initialize"]}, None)
    # 2024-11-05 has no tool annotations, titles or output schemas.
    assert out["tool_fields"] == ["description", "inputSchema", "name"]
    assert out["tools"] > 10
    assert out["simple"]["result"]["content"][0]["text"].startswith("This is a simple text")
    assert "structuredContent" not in out["structured"]["result"]
    assert out["sampling"]["result"]["content"][0]["text"] == "LLM response: Paris"
    assert out["roots"]["result"]["content"][0]["text"] == "Found 1 root(s)"
    assert out["logs"] == [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    assert out["prompt"]["result"]["messages"]
    assert out["read"]["result"]["contents"][0]["uri"] == "test://static-text"
    assert out["subscribe"] == {"result": {}}
    # The update came from the upstream's GET stream, relayed onto the channel.
    assert [u["params"]["uri"] for u in out["updates"]] == ["test://watched-resource"]
    assert out["ping"] == {"result": {}}


def test_sse_channel_endpoint_credentials_and_end(gateway_url: str, gateway_log: Path) -> None:
    endpoint: str | None = None
    with (
        httpx.Client(timeout=10.0) as streamer,
        streamer.stream(
            "GET",
            gateway_url + "/sse",
            headers={"accept": "text/event-stream", "authorization": "Bearer sse-owner"},
        ) as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        buffer = ""
        # One iterator for the whole stream: closing an iterator closes the response.
        chunks = stream.iter_text()
        for chunk in chunks:
            buffer += chunk
            if "\n\n" in buffer:
                event = buffer.split("\n\n", 1)[0].split("\n")
                # The first event names where to POST (2024-11-05 "HTTP with SSE").
                assert event[0] == "event: endpoint"
                endpoint = event[1].removeprefix("data: ")
                break
        assert endpoint is not None and endpoint.startswith("/messages?session_id=")
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2024-11-05", "capabilities": {}},
        }
        with httpx.Client(timeout=10.0) as poster:
            stolen = poster.post(
                gateway_url + endpoint, json=init, headers={"authorization": "Bearer thief"}
            )
            assert stolen.status_code == 404
            unknown = poster.post(
                gateway_url + "/messages?session_id=nope",
                json=init,
                headers={"authorization": "Bearer sse-owner"},
            )
            assert unknown.status_code == 404
            accepted = poster.post(
                gateway_url + endpoint, json=init, headers={"authorization": "Bearer sse-owner"}
            )
            assert accepted.status_code == 202
        for chunk in chunks:
            buffer += chunk
            if '"protocolVersion"' in buffer and buffer.endswith("\n\n"):
                break
        (answer,) = events(buffer.split("\n\n", 1)[1])
        check_legacy("2024-11-05", answer, "initialize")
    # The client went away: its session ends on both sides.
    with httpx.Client(timeout=10.0) as poster:
        for _ in range(50):
            gone = poster.post(
                gateway_url + endpoint,
                json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
                headers={"authorization": "Bearer sse-owner"},
            )
            if gone.status_code == 404:
                break
            time.sleep(0.1)
        assert gone.status_code == 404
    assert any(
        line.get("event") == "legacy_session_ended" and line.get("reason") == "sse_stream_closed"
        for line in wire.log_lines(gateway_log)
    )


# ---------------------------------------------------------------------------
# Keepalive comments on the relayed GET stream
# ---------------------------------------------------------------------------

KEEPALIVE_S = 0.3


@pytest.fixture(scope="module")
def keepalive_mcp_url(legacy_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("keepalive")
    env = {"MCP_SHIM_LISTEN_KEEPALIVE_S": str(KEEPALIVE_S)}
    with procs.gateway(legacy_url, procs.free_port(), env, log_path=logs / "gw.log") as base:
        yield base + "/mcp"


class RawStream:
    """A GET stream's raw lines, read in a thread."""

    def __init__(self, url: str, hdrs: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.status: int | None = None
        self._client = httpx.Client(timeout=httpx.Timeout(15, read=None))
        self._opened = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url, hdrs), daemon=True)
        self._thread.start()
        assert self._opened.wait(15)

    def _read(self, url: str, hdrs: dict[str, str]) -> None:
        try:
            with self._client.stream("GET", url, headers=hdrs) as response:
                self.status = response.status_code
                self._opened.set()
                for line in response.iter_lines():
                    self.lines.append(line)
        except httpx.HTTPError:
            pass
        finally:
            self._opened.set()

    def wait_for(self, check: Any, what: str, timeout: float = 10.0) -> None:
        until_sync(
            lambda: check(list(self.lines)),
            timeout_s=timeout,
            what=f"{what} on the stream (last lines: {self.lines[-20:]})",
        )

    def close(self) -> None:
        self._client.close()
        self._thread.join(5)


def test_quiet_get_stream_gets_comments_and_still_resumes(keepalive_mcp_url: str) -> None:
    """A relayed GET stream that stays quiet gets SSE comment lines every
    MCP_SHIM_LISTEN_KEEPALIVE_S (2025-11-25 streamable-http: the server may
    keep a stream open; proxies cut idle ones). A comment carries no `id:`,
    so the Last-Event-ID a client resumes with is still an event's
    ("Resumability and Redelivery": the server MAY replay the messages after
    it), and the upstream replays from there."""
    url = keepalive_mcp_url
    version = "2025-11-25"
    with httpx.Client(timeout=30.0) as client:
        session, _ = initialize(client, url, version)
        get_headers = headers(session, version, accept="text/event-stream")
        stream = RawStream(url, get_headers)
        try:
            assert stream.status == 200
            # The first comment opens the stream; then one per quiet interval.
            stream.wait_for(lambda ls: ls.count(":") >= 4, "keepalive comments")
            burst = {"name": "burst_list_changed", "arguments": {"count": 1}}
            call(client, url, session, version, "tools/call", burst, rid=1)
            stream.wait_for(lambda ls: any(line.startswith("id:") for line in ls), "event id")
            lines = list(stream.lines)
        finally:
            stream.close()
        at = next(i for i, line in enumerate(lines) if line.startswith("id:"))
        event_id = lines[at][3:].strip()
        assert json.loads(lines[at + 2][5:])["method"] == "notifications/tools/list_changed"
        # Every other line is a comment or the blank line ending an event.
        assert set(lines[:at]) <= {":", ""}

        # A change while the client is away, then the client resumes from the
        # event it saw: it gets the change, not a comment's position.
        call(client, url, session, version, "tools/call", burst, rid=2)
        resumed_headers = {**get_headers, "last-event-id": event_id}
        deadline = time.monotonic() + 10
        while True:
            # The upstream allows one GET stream: the last one may still be closing (409).
            again = RawStream(url, resumed_headers)
            if again.status == 200 or time.monotonic() > deadline:
                break
            again.close()
            time.sleep(0.2)
        try:
            assert again.status == 200
            again.wait_for(lambda ls: any(line.startswith("id:") for line in ls), "replay")
            replay = list(again.lines)
        finally:
            again.close()
        first = next(i for i, line in enumerate(replay) if line.startswith("id:"))
        assert replay[first][3:].strip() != event_id
        assert json.loads(replay[first + 2][5:])["method"] == "notifications/tools/list_changed"
        client.delete(url, headers=headers(session, version))
