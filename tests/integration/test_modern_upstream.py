"""Issue 10: a modern (2026-07-28) upstream. The gateway detects the era with a
`server/discover` probe, passes modern clients through, and serves legacy
clients (mcp 1.x) with a session of its own, turning `input_required` into
real server-to-client requests. Real peers only: the modern fixture on the
official mcp 2.x SDK (tests/fixtures/modern_server.py), the legacy fixture and
client on mcp 1.x, over loopback HTTP."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire

pytestmark = pytest.mark.peers

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


def modern_request(
    method: str, params: dict[str, Any] | None = None, *, id: int = 1, caps: Any = None
) -> tuple[dict[str, Any], dict[str, str]]:
    params = dict(params or {})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps if caps is not None else {},
        **params.get("_meta", {}),
    }
    body = {"jsonrpc": "2.0", "id": id, "method": method, "params": params}
    headers = {
        "content-type": "application/json",
        "accept": ACCEPT,
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
    }
    name = params.get("name") or params.get("uri")
    if name is not None:
        headers["mcp-name"] = str(name)
    return body, headers


def sse_messages(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def answer_of(response: httpx.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return sse_messages(response.text)[-1]
    parsed: dict[str, Any] = response.json()
    return parsed


def call(base: str, method: str, params: dict[str, Any] | None = None, **kw: Any) -> Any:
    extra = kw.pop("headers", {})
    body, headers = modern_request(method, params, **kw)
    return httpx.post(base + "/mcp", json=body, headers={**headers, **extra}, timeout=15)


def tool_text(message: dict[str, Any]) -> str:
    return str(message["result"]["content"][0]["text"])


# -- B: the era ------------------------------------------------------------------------


def test_era_in_start_up_line_healthz_and_readyz(
    modern_gateway_url: str, modern_gateway_log: Path
) -> None:
    started = [
        json.loads(line)
        for line in modern_gateway_log.read_text().splitlines()
        if '"gateway_started"' in line
    ]
    assert started and started[-1]["upstream_era"] == "modern"
    assert started[-1]["upstream_protocol_version"] == MODERN
    health = httpx.get(modern_gateway_url + "/healthz", timeout=5).json()
    assert health["status"] == "ok"
    assert health["upstream"]["era"] == "modern"
    assert health["upstream"]["protocol_version"] == MODERN
    assert health["upstream"]["era_source"] == "probe"
    ready = httpx.get(modern_gateway_url + "/readyz", timeout=15)
    assert ready.status_code == 200, ready.text
    assert ready.json()["upstream"]["era"] == "modern"


def test_era_setting_skips_the_probe(modern_url: str, tmp_path: Path) -> None:
    """MCP_SHIM_UPSTREAM_ERA=legacy in front of a modern server: no probe is
    sent, so the gateway treats it as legacy (and says so)."""
    env = {"MCP_SHIM_UPSTREAM_ERA": "legacy"}
    with procs.gateway(modern_url, procs.free_port(), env=env) as base:
        health = httpx.get(base + "/healthz", timeout=5).json()
    assert health["upstream"]["era"] == "legacy"
    assert health["upstream"]["era_source"] == "setting"


# -- C: modern client, modern upstream -------------------------------------------------


def test_passthrough_keeps_headers_and_meta(modern_gateway_url: str) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    response = call(
        modern_gateway_url,
        "tools/call",
        {"name": "test_headers", "arguments": {}, "_meta": {"example.com/mine": {"a": 1}}},
        headers={"authorization": "Bearer alice", "traceparent": traceparent},
    )
    assert response.status_code == 200, response.text
    seen = json.loads(tool_text(answer_of(response)))
    assert seen["authorization"] == "Bearer alice"
    assert seen["mcp-method"] == "tools/call"
    assert seen["mcp-name"] == "test_headers"
    assert seen["mcp-protocol-version"] == MODERN
    assert seen["traceparent"] == traceparent
    assert seen["_meta"]["example.com/mine"] == {"a": 1}


def test_passthrough_param_headers_checked_upstream(modern_gateway_url: str) -> None:
    ok = call(
        modern_gateway_url,
        "tools/call",
        {"name": "test_header_param", "arguments": {"region": "eu"}},
        headers={"mcp-param-region": "eu"},
    )
    assert tool_text(answer_of(ok)) == "region=eu"
    # The upstream validates Mcp-Param-* itself (2026-07-28 streamable-http
    # "Server Validation"): its 400 -32020 reaches the client as it is.
    bad = call(
        modern_gateway_url,
        "tools/call",
        {"name": "test_header_param", "arguments": {"region": "eu"}},
        headers={"mcp-param-region": "us"},
    )
    assert bad.status_code == 400
    assert answer_of(bad)["error"]["code"] == -32020


def test_passthrough_streams_progress_as_sse(modern_gateway_url: str) -> None:
    response = call(
        modern_gateway_url,
        "tools/call",
        {"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "p-1"}},
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = sse_messages(response.text)
    progress = [m for m in messages if m.get("method") == "notifications/progress"]
    assert [p["params"]["progress"] for p in progress] == [0, 50, 100]
    assert all(p["params"]["progressToken"] == "p-1" for p in progress)
    assert messages[-1]["result"]["resultType"] == "complete"


def test_passthrough_leaves_request_state_and_input_responses_untouched(
    modern_url: str, modern_gateway_url: str
) -> None:
    """The fixture's own requestState comes back as the fixture wrote it (the
    gateway's MRTR bridge would seal its own), and the retry with it and the
    inputResponses completes upstream."""
    params = {"name": "test_input_required_result_elicitation", "arguments": {}}
    body, headers = modern_request("tools/call", params, caps={"elicitation": {}})
    direct = httpx.post(modern_url, json=body, headers=headers, timeout=10).json()
    through = call(modern_gateway_url, "tools/call", params, caps={"elicitation": {}}).json()
    assert through["result"]["resultType"] == "input_required"
    assert through["result"]["requestState"] == direct["result"]["requestState"]
    assert "user_name" in through["result"]["inputRequests"]
    retry = {
        **params,
        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": through["result"]["requestState"],
    }
    done = call(modern_gateway_url, "tools/call", retry, id=2, caps={"elicitation": {}})
    assert tool_text(answer_of(done)) == "Hello, Ada!"


def test_passthrough_listen_streams_as_it_comes(modern_gateway_url: str) -> None:
    body, headers = modern_request(
        "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, id=77
    )
    with (
        httpx.Client(timeout=10) as client,
        client.stream("POST", modern_gateway_url + "/mcp", json=body, headers=headers) as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        first = next(json.loads(line[5:]) for line in lines if line.startswith("data:"))
        assert first["method"] == "notifications/subscriptions/acknowledged"
        call(modern_gateway_url, "tools/call", {"name": "test_trigger_tool_change"}, id=78)
        changed = next(json.loads(line[5:]) for line in lines if line.startswith("data:"))
    assert changed["method"] == "notifications/tools/list_changed"
    assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 77


def test_front_still_validates_before_passing_through(modern_gateway_url: str) -> None:
    body, headers = modern_request("tools/call", {"name": "test_echo", "arguments": {}})
    headers["mcp-name"] = "another"
    refused = httpx.post(modern_gateway_url + "/mcp", json=body, headers=headers, timeout=5)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == -32020


# -- D: legacy client, modern upstream -------------------------------------------------


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18"])
def test_legacy_client_through_gateway_to_modern_only_server(
    modern_gateway_url: str, version: str
) -> None:
    out: Any = procs.run_legacy_client("modern_upstream.py", modern_gateway_url + "/mcp", version)
    init = out["initialize"]
    assert init["protocolVersion"] == version
    assert init["serverInfo"]["name"] == "mcp-shim-modern-fixture"
    assert init["instructions"].startswith("The mcp-shim modern fixture")
    assert init["capabilities"]["tools"] == {"listChanged": True}
    assert out["has_session_id"]
    assert out["tools"][0] == "test_simple_text"
    # resultType, ttlMs, cacheScope and the modern _meta keys are gone.
    assert out["tools_list_fields"] == ["tools"]
    assert out["simple"] == "This is a simple text response for testing."
    assert out["error_tool"]["result"]["isError"] is True
    assert out["progress"] == [0.0, 50.0, 100.0]
    assert out["set_level"] == {"result": {}}
    assert out["logs"] == [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    # Each kind of input request answered by the client's own callback.
    assert out["sampling"] == "Sampling result: Paris"
    assert out["roots"] == 'Roots: ["file:///work/project"]'
    assert out["elicitation"] == "Hello, Ada!"
    # Three in one round, then two rounds, then a prompt and a resource.
    assert out["multiple"] == 'name=Ada; greeting=Paris; roots=["file:///work/project"]'
    assert out["multi_round"] == "name=Ada, color=green"
    assert out["prompt_with_input"]["result"]["messages"][0]["content"]["text"] == (
        "Context: tests"
    )
    assert out["resource_with_input"]["result"]["contents"][0]["text"] == "read by Ada"
    assert out["asked"] == [
        "sampling",
        "roots",
        "elicitation",
        "elicitation",
        "sampling",
        "roots",
        "elicitation",
        "elicitation",
        "elicitation",
        "elicitation",
    ]
    assert "resultType" not in out["read"]["result"]
    assert out["read"]["result"]["contents"][0]["text"].startswith("This is the content")
    assert "error" in out["missing"]
    assert out["templates"]["result"]["resourceTemplates"][0]["uriTemplate"] == (
        "test://template/{id}/data"
    )
    assert out["completion"]["result"]["completion"]["values"] == ["test1", "test2", "testValue1"]
    assert out["header_param"] == ["region=eu", "region=zürich"]
    assert out["ping"] == {"result": {}}


def test_legacy_client_decline_goes_upstream(modern_gateway_url: str) -> None:
    out: Any = procs.run_legacy_client(
        "modern_upstream.py", modern_gateway_url + "/mcp", "2025-11-25", "DECLINE"
    )
    # The fixture got the decline and answered with its default.
    assert out["elicitation"] == "Hello, unknown!"
    assert out["multi_round"] == "name=unknown, color=unknown"


def test_legacy_subscriptions_only_for_the_session_that_subscribed(
    modern_gateway_url: str,
) -> None:
    out: Any = procs.run_legacy_client(
        "modern_subscriptions.py", modern_gateway_url + "/mcp", "2025-11-25"
    )
    assert out["subscribe"] == {"result": {}}
    # Upstream listen streams are shared by credential and filter, ref-counted.
    assert out["streams_shared"] == "1"
    assert out["streams_after_subscribe"] == "2"
    assert out["streams_after_unsubscribe"] == "1"
    a = [m["method"] for m in out["seen"]["a"]]
    b = [m["method"] for m in out["seen"]["b"]]
    # Once (the touch after unsubscribing reaches nobody), and only for A.
    assert a.count("notifications/resources/updated") == 1
    assert "notifications/resources/updated" not in b
    assert "notifications/tools/list_changed" in a
    assert "notifications/tools/list_changed" in b


class LegacyRaw:
    """A legacy session spoken by hand, to see the edges the SDK client hides."""

    def __init__(
        self, base: str, capabilities: dict[str, Any], authorization: str | None = None
    ) -> None:
        self.url = base + "/mcp"
        auth = {"authorization": authorization} if authorization is not None else {}
        self.client = httpx.Client(timeout=15, headers=auth)
        init = self.client.post(
            self.url,
            json=wire.legacy_initialize("2025-11-25", capabilities),
            headers={"accept": ACCEPT},
        )
        assert init.status_code == 200, init.text
        self.headers = {
            "accept": ACCEPT,
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        self.client.post(
            self.url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=self.headers,
        )

    def post(self, message: dict[str, Any]) -> httpx.Response:
        return self.client.post(self.url, json=message, headers=self.headers)


@pytest.fixture
def raw_undeclared(modern_gateway_url: str) -> Iterator[LegacyRaw]:
    raw = LegacyRaw(modern_gateway_url, {})
    yield raw
    raw.client.close()


def test_input_request_of_an_undeclared_kind_ends_the_call(raw_undeclared: LegacyRaw) -> None:
    started = time.monotonic()
    response = raw_undeclared.post(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "test_input_required_result_elicitation", "arguments": {}},
        }
    )
    final = answer_of(response)
    assert final["id"] == 5
    assert final["error"]["code"] == -32603
    assert "elicitation" in final["error"]["message"]
    assert not any("method" in m for m in sse_messages(response.text) if "id" in m)
    assert time.monotonic() - started < 5


def test_client_error_answer_ends_the_call_without_retry(modern_gateway_url: str) -> None:
    raw = LegacyRaw(modern_gateway_url, {"elicitation": {}})
    body = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {"name": "test_input_required_result_elicitation", "arguments": {}},
    }
    with raw.client.stream("POST", raw.url, json=body, headers=raw.headers) as stream:
        lines = stream.iter_lines()
        asked = next(json.loads(line[5:]) for line in lines if line.startswith("data:"))
        assert asked["method"] == "elicitation/create"
        assert asked["params"]["message"] == "What is your name?"
        refused = raw.post(
            {"jsonrpc": "2.0", "id": asked["id"], "error": {"code": -1, "message": "no UI"}}
        )
        assert refused.status_code == 202
        final = next(json.loads(line[5:]) for line in lines if line.startswith("data:"))
    assert final["id"] == 9
    assert final["error"]["code"] == -32603
    assert final["error"]["data"]["inputKey"] == "user_name"
    raw.client.close()


# -- a dual-era upstream, and an upstream that changes era ----------------------------


def test_dual_era_upstream_serves_each_client_in_its_own_era(tmp_path: Path) -> None:
    with (
        procs.modern_server(procs.free_port(), "--dual-era") as upstream,
        procs.gateway(upstream, procs.free_port(), log_path=tmp_path / "gw.log") as base,
    ):
        modern = call(base, "tools/call", {"name": "test_echo", "arguments": {"text": "m"}})
        assert tool_text(answer_of(modern)) == "m"
        out: Any = procs.run_legacy_client("modern_upstream.py", base + "/mcp", "2025-11-25")
        health = httpx.get(base + "/healthz", timeout=5).json()
    assert health["upstream"]["era"] == "modern"
    # The upstream's own handshake served the legacy client: no translation.
    assert health["upstream"]["legacy_handshake"] is True
    assert out["initialize"]["capabilities"]["tools"] == {"listChanged": False}
    assert out["simple"] == "This is a simple text response for testing."
    assert out["sampling"] == "Sampling result: Paris"
    assert out["elicitation"] == "Hello, Ada!"
    assert out["multi_round"] == "name=Ada, color=green"


def test_upstream_era_switched_under_one_gateway(tmp_path: Path) -> None:
    """The same port, a legacy server, then a modern one, then legacy again:
    the gateway probes again when a refusal puts its assumption in doubt."""
    port = procs.free_port()
    upstream = f"http://127.0.0.1:{port}/mcp"

    with procs.gateway(upstream, procs.free_port(), log_path=tmp_path / "gw.log") as base:
        with procs.legacy_server(port):
            first = call(base, "tools/call", {"name": "echo", "arguments": {"text": "one"}})
            assert answer_of(first)["result"]["content"][0]["text"] == "one", first.text
            assert httpx.get(base + "/healthz").json()["upstream"]["era"] == "legacy"
        with procs.modern_server(port):
            time.sleep(2.1)  # the re-probe rate limit (era.REPROBE_MIN_S)
            second = call(base, "tools/call", {"name": "test_echo", "arguments": {"text": "two"}})
            assert tool_text(answer_of(second)) == "two", second.text
            assert httpx.get(base + "/healthz").json()["upstream"]["era"] == "modern"
            third = call(base, "tools/call", {"name": "test_echo", "arguments": {"text": "3"}})
            assert tool_text(answer_of(third)) == "3"
        with procs.legacy_server(port):
            time.sleep(2.1)
            back = call(base, "tools/call", {"name": "echo", "arguments": {"text": "four"}})
            assert answer_of(back)["result"]["content"][0]["text"] == "four", back.text
            assert httpx.get(base + "/healthz").json()["upstream"]["era"] == "legacy"
    changes = [
        json.loads(line)
        for line in (tmp_path / "gw.log").read_text().splitlines()
        if '"upstream_era_changed"' in line
    ]
    assert [c["era"] for c in changes] == ["modern", "legacy"]


def test_legacy_cancellation_closes_the_upstream_call(modern_gateway_url: str) -> None:
    """notifications/cancelled from a legacy client ends the upstream call: the
    gateway closes its stream, which is a modern server's cancellation
    (2026-07-28 streamable-http "Cancellation")."""
    raw = LegacyRaw(modern_gateway_url, {})

    def count() -> int:
        answer = answer_of(
            raw.post(
                {
                    "jsonrpc": "2.0",
                    "id": 30,
                    "method": "tools/call",
                    "params": {"name": "test_cancelled_count", "arguments": {}},
                }
            )
        )
        return int(answer["result"]["content"][0]["text"])

    before = count()
    body = {
        "jsonrpc": "2.0",
        "id": 21,
        "method": "tools/call",
        "params": {"name": "test_slow", "arguments": {"seconds": 10}},
    }
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 21, "reason": "user"},
    }
    posted: list[int] = []

    def cancel_soon() -> None:
        time.sleep(0.5)
        posted.append(raw.post(note).status_code)

    # The answer's headers wait for its first message: the cancel comes from elsewhere.
    canceller = threading.Thread(target=cancel_soon)
    started = time.monotonic()
    canceller.start()
    with httpx.Client(timeout=15) as other:
        answer = other.post(raw.url, json=body, headers=raw.headers)
    canceller.join()
    assert posted == [202]
    assert time.monotonic() - started < 5
    # 2025-11-25 basic/utilities/cancellation "Behavior Requirements": receivers
    # of a cancellation SHOULD "Not send a response for the cancelled request":
    # the call's stream ends with no response (no -32603 "closed the stream").
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert [m for m in sse_messages(answer.text) if m.get("id") == 21] == []
    deadline = time.monotonic() + 3
    while count() == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert count() == before + 1
    raw.client.close()


def test_2025_03_26_batch_split_into_single_modern_requests(modern_gateway_url: str) -> None:
    url = modern_gateway_url + "/mcp"
    with httpx.Client(timeout=15) as client:
        init = client.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-03-26",
                    "capabilities": {},
                    "clientInfo": {"name": "batch", "version": "1"},
                },
            },
            headers={"accept": ACCEPT},
        )
        assert init.json()["result"]["protocolVersion"] == "2025-03-26"
        headers = {"accept": "application/json", "mcp-session-id": init.headers["mcp-session-id"]}
        batch = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "test_echo", "arguments": {"text": "a"}},
            },
            {"jsonrpc": "2.0", "id": 2, "method": "prompts/list"},
            {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        ]
        answers = client.post(url, json=batch, headers=headers).json()
    by_id = {a["id"]: a for a in answers}
    assert by_id[1]["result"]["content"][0]["text"] == "a"
    assert "resultType" not in by_id[1]["result"]
    assert by_id[2]["result"]["prompts"][0]["name"] == "test_simple_prompt"
    assert "ttlMs" not in by_id[2]["result"]
    assert by_id[3] == {"jsonrpc": "2.0", "id": 3, "result": {}}


def test_2024_11_05_http_sse_client_to_modern_only_server(modern_gateway_url: str) -> None:
    """The deprecated HTTP+SSE transport (GET /sse, POST /messages) in front of a
    server that has neither sessions nor server-to-client requests: the
    fixture's InputRequiredResult reaches this client as sampling/createMessage
    and roots/list on its event stream."""
    out: Any = procs.run_legacy_client("sse_tour.py", modern_gateway_url + "/sse")
    assert out["initialize"]["protocolVersion"] == "2024-11-05"
    assert out["initialize"]["serverInfo"]["name"] == "mcp-shim-modern-fixture"
    assert out["simple"]["result"]["content"][0]["text"].startswith("This is a simple")
    assert out["sampling"]["result"]["content"][0]["text"] == "LLM response: Paris"
    assert out["roots"]["result"]["content"][0]["text"] == 'Roots: ["file:///srv/data"]'
    assert out["logs"] == [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    assert out["read"]["result"]["contents"][0]["text"].startswith("This is the content")
    assert out["ping"] == {"result": {}}


# -- lists within ttlMs, for legacy clients ---------------------------------------------

LIST_TTL_MS = 1500


@pytest.fixture(scope="module")
def ttl_gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway in front of a modern fixture whose lists say `ttlMs: 1500`."""
    logs = tmp_path_factory.mktemp("list-ttl")
    with (
        procs.modern_server(
            procs.free_port(), "--list-ttl-ms", str(LIST_TTL_MS), log_path=logs / "modern.log"
        ) as upstream,
        procs.gateway(upstream, procs.free_port(), log_path=logs / "gateway.log") as base,
    ):
        yield base


class _Stream:
    """A legacy session's GET stream, read in a thread."""

    def __init__(self, raw: LegacyRaw) -> None:
        self.messages: list[dict[str, Any]] = []
        self._client = httpx.Client(timeout=httpx.Timeout(15, read=None))
        self._open = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(raw,), daemon=True)
        self._thread.start()
        assert self._open.wait(10)

    def _read(self, raw: LegacyRaw) -> None:
        headers = {**raw.client.headers, **raw.headers, "accept": "text/event-stream"}
        with contextlib.suppress(httpx.HTTPError):
            with self._client.stream("GET", raw.url, headers=headers) as response:
                assert response.status_code == 200, response.status_code
                self._open.set()
                for line in response.iter_lines():
                    if line.startswith("data:") and line[5:].strip():
                        self.messages.append(json.loads(line[5:]))

    def close(self) -> None:
        self._client.close()


def test_legacy_lists_served_within_ttl_and_changes_announced(ttl_gateway_url: str) -> None:
    """2026-07-28 server/utilities/caching "Time-to-Live (TTL) Field": "If
    `ttlMs` is positive, the client SHOULD consider the result fresh for that
    many milliseconds after receiving the response". A legacy client has no
    such field, so the gateway holds the list for it, per credential ("Caches
    MUST NOT be shared across authorization contexts" for private lists; the
    gateway shares none). After expiry the next list re-fetches; a different
    list is told to the credential's other legacy sessions with
    notifications/prompts/list_changed, a legacy client's only signal."""
    alice = LegacyRaw(ttl_gateway_url, {}, authorization="Bearer alice")
    alice_too = LegacyRaw(ttl_gateway_url, {}, authorization="Bearer alice")
    bob = LegacyRaw(ttl_gateway_url, {}, authorization="Bearer bob")

    def listed() -> int:
        reply = answer_of(alice.post(_call_msg(90, "test_list_count")))
        counts: dict[str, int] = json.loads(tool_text(reply))
        return counts.get("prompts/list", 0)

    def prompts(raw: LegacyRaw, rid: int) -> list[str]:
        reply = answer_of(raw.post({"jsonrpc": "2.0", "id": rid, "method": "prompts/list"}))
        assert "ttlMs" not in reply["result"] and "cacheScope" not in reply["result"]
        return [p["name"] for p in reply["result"]["prompts"]]

    stream = _Stream(alice_too)
    try:
        before = listed()
        first = prompts(alice, 1)
        assert prompts(alice, 2) == first
        assert prompts(alice_too, 3) == first
        assert listed() == before + 1  # one upstream prompts/list for alice's three
        prompts(bob, 4)
        assert listed() == before + 2  # another credential: its own entry

        added = tool_text(answer_of(alice.post(_call_msg(91, "test_grow_prompts"))))
        assert added not in prompts(alice, 5)  # still fresh: the cached list
        time.sleep(LIST_TTL_MS / 1000 + 0.3)
        assert added in prompts(alice, 6)  # stale: fetched again
        assert listed() == before + 3
        deadline = time.monotonic() + 5
        changed = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
        while changed not in stream.messages and time.monotonic() < deadline:
            time.sleep(0.05)
        assert changed in stream.messages

        # "When a relevant notification is received while a cached response is
        # still fresh, the notification invalidates the cached response"
        # ("Interaction with Notifications"): heard on the upstream listen stream
        # that alice_too's GET stream holds open.
        assert prompts(alice, 7) == prompts(alice, 8)
        assert listed() == before + 3
        alice.post(_call_msg(92, "test_trigger_prompt_change"))
        deadline = time.monotonic() + 5
        while len([m for m in stream.messages if m == changed]) < 2:
            assert time.monotonic() < deadline, stream.messages
            time.sleep(0.05)
        prompts(alice, 9)
        assert listed() == before + 4
    finally:
        stream.close()
        for raw in (alice, alice_too, bob):
            raw.client.close()


def _call_msg(rid: int, name: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}},
    }
