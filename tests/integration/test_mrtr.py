"""The multi round-trip bridge (issue 3) over real HTTP: modern client, gateway, legacy fixture.

The fixture's tools ask their client for input the legacy way (elicitation,
sampling, roots, several at once, in rounds, URL mode, -32042); through the
gateway a 2026-07-28 client sees `input_required` and retries. Three kinds of
evidence:

- the official mcp 2.x client (tests/modern_client/mrtr_tools.py) drives
  every scenario with its own MRTR loop;
- raw requests break one thing at a time: every refusal of `requestState`
  (tampered, truncated, other caller, other method, other arguments, a stale
  round, replayed after completion), answers that do not fit, partial
  answers, first calls carrying `inputResponses`, missing capabilities;
- the fixture's ledger (tool calls by `marker`, cancellations, what became
  of each server-initiated request) shows what reached the upstream: never
  a second run of a call.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import wire
from tests.integration.recording_proxy import RecordingProxy
from tests.procs import run_modern_client
from tests.schema import (
    MODERN,
    SPEC,
    check_legacy_sent,
    check_modern_answer,
    check_modern_error,
)
from tests.waiting import until_sync

pytestmark = pytest.mark.peers


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30.0) as client:
        yield client


def marker() -> str:
    return "mrtr-" + uuid.uuid4().hex[:12]


# ---------------------------------------------------------------------------
# The mcp 2.x client's own MRTR loop through the gateway
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client_run(gateway_url: str, legacy_url: str) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:10]
    document = run_modern_client("mrtr_tools.py", gateway_url + "/mcp", run_id)
    assert isinstance(document, dict)
    assert document["protocolVersion"] == MODERN and document["adoptedVia"] == "discover"
    return {"run_id": run_id, "doc": document, "stats": mw.stats(legacy_url)}


def completed(run: dict[str, Any], scenario: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    outcome = run["doc"][scenario]
    assert "result" in outcome, f"{scenario}: the client got {outcome}"
    result: dict[str, Any] = outcome["result"]
    assert result["resultType"] == "complete"
    return result, outcome["asked"]


def test_client_elicitation_keyed_and_unkeyed(client_run: dict[str, Any]) -> None:
    result, asked = completed(client_run, "elicit_keyed")
    # The fixture names its key in _meta["io.modelcontextprotocol/inputKey"].
    assert asked == [{"key": "github_login", "method": "elicitation/create", "mode": "form"}]
    assert result["structuredContent"] == {
        "github_login": {"action": "accept", "content": {"login": "Alice-login"}}
    }
    result, asked = completed(client_run, "elicit_unkeyed")
    # No key named: the gateway's own, readable one.
    assert asked == [{"key": "elicitation_1", "method": "elicitation/create", "mode": "form"}]
    assert result["structuredContent"]["name"]["content"] == {"name": "Alice-name"}
    result, _ = completed(client_run, "profile")
    assert result["structuredContent"]["profile"]["content"] == {
        "name": "Alice-name",
        "age": 30,
        "color": "red",
        "newsletter": True,
    }


def test_client_sampling_and_roots_on_both_streams(client_run: dict[str, Any]) -> None:
    result, asked = completed(client_run, "sampling")
    assert asked == [{"key": "sampling_1", "method": "sampling/createMessage"}]
    assert result["structuredContent"]["sample"] == {
        "text": "Paris is the capital of France.",
        "model": "test-model",
    }
    for scenario in ("roots_call_stream", "roots_get_stream"):
        # roots_get_stream: the Python SDK's session.list_roots() goes out on the
        # session's GET stream, which the call's lane listens to.
        result, asked = completed(client_run, scenario)
        assert asked == [{"key": "roots_1", "method": "roots/list"}], scenario
        assert result["structuredContent"]["roots"] == {"roots": ["file:///work/project"]}


def test_client_several_questions_in_one_round(client_run: dict[str, Any]) -> None:
    result, asked = completed(client_run, "all_at_once")
    assert sorted(a["key"] for a in asked) == [
        "elicitation_1",
        "elicitation_2",
        "roots_1",
        "sampling_1",
        "sampling_2",
    ]
    assert set(result["structuredContent"]) == {
        "question_1",
        "question_2",
        "sample_1",
        "sample_2",
        "roots_1",
    }
    _, asked = completed(client_run, "all_at_once_keyed")
    assert sorted(a["key"] for a in asked) == ["question_1", "roots_1", "sample_1"]
    result, asked = completed(client_run, "conformance_multiple")
    assert sorted(a["key"] for a in asked) == ["client_roots", "greeting", "user_name"]
    assert "Roots: 1" in result["content"][0]["text"]


def test_client_several_rounds(client_run: dict[str, Any]) -> None:
    result, asked = completed(client_run, "rounds")
    # One question per round; keys stay unique across the call's rounds.
    assert [a["key"] for a in asked] == ["elicitation_1", "elicitation_2", "elicitation_3"]
    assert list(result["structuredContent"]) == ["round_1", "round_2", "round_3"]


def test_client_url_elicitation_and_url_required_error(client_run: dict[str, Any]) -> None:
    result, asked = completed(client_run, "url_consent")
    assert asked == [{"key": "url_elicitation_1", "method": "elicitation/create", "mode": "url"}]
    # The client's callback opened the URL before accepting; the tool saw it.
    assert result["structuredContent"]["consent"]["visited"] is True
    result, asked = completed(client_run, "url_required")
    # -32042 from the upstream became a URL-mode input request under the key the
    # error's elicitation names; after the visit the call ran again and connected.
    assert asked == [{"key": "connect_account", "method": "elicitation/create", "mode": "url"}]
    assert result["structuredContent"]["connected"] is True


def test_client_prompt_and_resource_that_ask(client_run: dict[str, Any]) -> None:
    result, asked = completed(client_run, "prompt")
    assert asked == [{"key": "elicitation_1", "method": "elicitation/create", "mode": "form"}]
    assert result["messages"][0]["content"]["text"] == "Write a short essay about Alice-topic."
    SPEC.validate(MODERN, "GetPromptResult", result)
    result, asked = completed(client_run, "resource")
    assert asked == [{"key": "read_consent", "method": "elicitation/create", "mode": "form"}]
    assert result["contents"][0]["text"].startswith("Consent granted")
    # Reached through a retry: schema-valid caching fields that say "do not cache".
    assert (result["ttlMs"], result["cacheScope"]) == (0, "private")
    SPEC.validate(MODERN, "ReadResourceResult", result)


def test_client_each_call_reached_the_upstream_once(client_run: dict[str, Any]) -> None:
    markers = client_run["stats"]["markers"]
    run_id = client_run["run_id"]
    tool_scenarios = [
        name
        for name, outcome in client_run["doc"].items()
        if isinstance(outcome, dict) and "asked" in outcome and name not in ("prompt", "resource")
    ]
    assert len(tool_scenarios) == 12
    for scenario in tool_scenarios:
        expected = 2 if scenario == "url_required" else 1
        # url_required: the upstream refused the first run with -32042 before
        # doing anything; after the URL visit the call is sent again, as a
        # legacy client would (docs/mrtr.md). Everything else ran exactly once.
        assert markers.get(f"{run_id}-{scenario}") == expected, scenario


# ---------------------------------------------------------------------------
# The shape of input_required
# ---------------------------------------------------------------------------


def test_input_required_is_schema_valid_and_gathers_one_round(
    http: httpx.Client, gateway_url: str, legacy_url: str
) -> None:
    mark = marker()
    args = {"elicitations": 2, "samplings": 1, "roots": 1, "keyed": True, "marker": mark}
    first = mw.tool_call(http, gateway_url, "ask_all_at_once", args)
    mw.check_input_required(first)
    assert first.content_type == "application/json"
    # Four requests sent concurrently by the upstream: one inputRequests map.
    assert sorted(first.requests) == ["question_1", "question_2", "roots_1", "sample_1"]
    # The key convention is between the fixture and the gateway, not the client's business.
    for request in first.requests.values():
        assert "io.modelcontextprotocol/inputKey" not in json.dumps(request)
    assert first.result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"]
    done = mw.tool_call(
        http,
        gateway_url,
        "ask_all_at_once",
        args,
        input_responses=mw.answers_for(first.requests),
        state=first.state,
    )
    check_modern_answer(SPEC, "tools/call", done.final)
    assert mw.marker_count(legacy_url, mark) == 1


def test_input_required_never_on_other_methods(http: httpx.Client, gateway_url: str) -> None:
    for method in ("tools/list", "prompts/list", "resources/list"):
        answer = mw.send(http, gateway_url, mw.message_for(method, {}))
        assert answer.result["resultType"] == "complete", method


# ---------------------------------------------------------------------------
# requestState is attacker input
# ---------------------------------------------------------------------------

ALICE = "Bearer alice-token"
MALLORY = "Bearer mallory-token"


def _park_login(http: httpx.Client, base: str, mark: str) -> mw.Answer:
    first = mw.tool_call(http, base, "ask_github_login", {"marker": mark}, authorization=ALICE)
    mw.check_input_required(first)
    assert list(first.requests) == ["github_login"]
    return first


def _login_answer() -> dict[str, Any]:
    return {"github_login": {"action": "accept", "content": {"login": "octocat"}}}


REFUSALS = {
    "tampered": lambda s: s + "-TAMPERED",
    "flipped": lambda s: s[:40] + ("A" if s[40] != "A" else "B") + s[41:],
    "truncated": lambda s: s[:-6],
    "not_ours": lambda s: "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8",
    "junk": lambda s: "not a state at all!",
}


@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_forged_state_is_refused_and_the_exchange_survives(
    http: httpx.Client, gateway_url: str, legacy_url: str, kind: str
) -> None:
    mark = marker()
    first = _park_login(http, gateway_url, mark)
    rid = mw.new_id()
    forged = mw.tool_call(
        http,
        gateway_url,
        "ask_github_login",
        {"marker": mark},
        authorization=ALICE,
        rid=rid,
        input_responses=_login_answer(),
        state=REFUSALS[kind](first.state),
    )
    assert forged.status == 400, forged.final
    assert forged.final["id"] == rid
    assert forged.error["code"] == -32602
    assert "requestState" in forged.error["message"]
    check_modern_error(SPEC, forged.final)
    # The real retry still works: a refusal neither consumes nor disturbs the exchange.
    done = mw.tool_call(
        http,
        gateway_url,
        "ask_github_login",
        {"marker": mark},
        authorization=ALICE,
        input_responses=_login_answer(),
        state=first.state,
    )
    assert done.result["structuredContent"]["github_login"]["content"] == {"login": "octocat"}
    assert mw.marker_count(legacy_url, mark) == 1


def test_state_bound_to_caller_method_and_arguments(
    http: httpx.Client, gateway_url: str, legacy_url: str
) -> None:
    mark = marker()
    first = _park_login(http, gateway_url, mark)
    attempts = {
        "other caller": dict(
            name="ask_github_login", arguments={"marker": mark}, authorization=MALLORY
        ),
        "no credentials": dict(
            name="ask_github_login", arguments={"marker": mark}, authorization=None
        ),
        "other arguments": dict(
            name="ask_github_login", arguments={"marker": mark + "-x"}, authorization=ALICE
        ),
        "other tool": dict(name="ask_name", arguments={"marker": mark}, authorization=ALICE),
    }
    for what, attempt in attempts.items():
        answer = mw.tool_call(
            http,
            gateway_url,
            attempt["name"],
            attempt["arguments"],
            authorization=attempt["authorization"],
            input_responses=_login_answer(),
            state=first.state,
        )
        assert answer.status == 400, (what, answer.final)
        assert answer.error["code"] == -32602, what
        assert answer.error["message"] == (
            "Invalid params: requestState does not belong to this request"
        ), what
    # Another method: the same state on prompts/get.
    other_method = mw.send(
        http,
        gateway_url,
        mw.message_for(
            "prompts/get",
            {"name": "ask_topic_prompt", "arguments": {}},
            input_responses=_login_answer(),
            state=first.state,
        ),
        authorization=ALICE,
    )
    assert other_method.status == 400 and other_method.error["code"] == -32602
    assert "does not belong" in other_method.error["message"]
    done = mw.tool_call(
        http,
        gateway_url,
        "ask_github_login",
        {"marker": mark},
        authorization=ALICE,
        input_responses=_login_answer(),
        state=first.state,
    )
    assert done.result["resultType"] == "complete"
    assert mw.marker_count(legacy_url, mark) == 1


def test_state_replayed_after_completion_or_from_an_old_round_is_refused(
    http: httpx.Client, gateway_url: str, legacy_url: str
) -> None:
    mark = marker()
    args = {"rounds": 2, "keyed": True, "marker": mark}
    first = mw.tool_call(http, gateway_url, "ask_in_rounds", args)
    assert list(first.requests) == ["round_1"]
    second = mw.tool_call(
        http,
        gateway_url,
        "ask_in_rounds",
        args,
        input_responses=mw.answers_for(first.requests),
        state=first.state,
    )
    assert list(second.requests) == ["round_2"]
    assert second.state != first.state  # a fresh state every round
    stale = mw.tool_call(
        http,
        gateway_url,
        "ask_in_rounds",
        args,
        input_responses=mw.answers_for(first.requests),
        state=first.state,
    )
    assert stale.status == 400 and stale.error["code"] == -32602
    assert "no longer valid" in stale.error["message"]
    done = mw.tool_call(
        http,
        gateway_url,
        "ask_in_rounds",
        args,
        input_responses=mw.answers_for(second.requests),
        state=second.state,
    )
    assert done.result["resultType"] == "complete"
    replay = mw.tool_call(
        http,
        gateway_url,
        "ask_in_rounds",
        args,
        input_responses=mw.answers_for(second.requests),
        state=second.state,
    )
    assert replay.status == 400 and replay.error["code"] == -32602
    assert "no longer valid" in replay.error["message"]
    assert mw.marker_count(legacy_url, mark) == 1


# ---------------------------------------------------------------------------
# Answers: partial, wrong, on a first call
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({"action": "accept", "content": {"name": "Al", "age": "old"}}, "content.age"),
        ({"action": "accept", "content": {"age": 30}}, "content.name is required"),
        ({"action": "accept", "content": {"name": "Al", "age": 30, "color": "pink"}}, "color"),
        ({"action": "accept", "content": {"name": "Al", "age": 200}}, "at most 150"),
        ({"action": "maybe"}, "action"),
    ],
)
def test_answer_that_does_not_fit_is_refused_naming_the_key(
    http: httpx.Client, gateway_url: str, legacy_url: str, answer: dict[str, Any], reason: str
) -> None:
    mark = marker()
    first = mw.tool_call(http, gateway_url, "ask_profile", {"marker": mark})
    assert list(first.requests) == ["profile"]
    refused = mw.tool_call(
        http,
        gateway_url,
        "ask_profile",
        {"marker": mark},
        input_responses={"profile": answer},
        state=first.state,
    )
    assert refused.status == 400, refused.final
    assert refused.error["code"] == -32602
    assert "inputResponses['profile']" in refused.error["message"]
    assert reason in refused.error["message"]
    assert refused.error["data"] == {"inputKey": "profile"}
    # The parked exchange stays usable with the very same state.
    good = {"action": "accept", "content": {"name": "Al", "age": 42, "color": "blue"}}
    done = mw.tool_call(
        http,
        gateway_url,
        "ask_profile",
        {"marker": mark},
        input_responses={"profile": good},
        state=first.state,
    )
    assert done.result["structuredContent"]["profile"]["content"] == good["content"]
    assert mw.marker_count(legacy_url, mark) == 1


def test_partial_answers_get_a_new_input_required_for_the_rest(
    http: httpx.Client, gateway_url: str, legacy_url: str
) -> None:
    mark = marker()
    args = {"elicitations": 1, "samplings": 1, "roots": 1, "keyed": True, "marker": mark}
    first = mw.tool_call(http, gateway_url, "ask_all_at_once", args)
    assert sorted(first.requests) == ["question_1", "roots_1", "sample_1"]
    answers = mw.answers_for(first.requests)
    # A sampling result without content is refused, naming its key, before anything is fed.
    bad = mw.tool_call(
        http,
        gateway_url,
        "ask_all_at_once",
        args,
        input_responses={**answers, "sample_1": {"role": "assistant", "model": "m"}},
        state=first.state,
    )
    assert bad.status == 400 and "inputResponses['sample_1']" in bad.error["message"]
    second = mw.tool_call(
        http,
        gateway_url,
        "ask_all_at_once",
        args,
        input_responses={"question_1": answers["question_1"], "unrelated": {"x": 1}},
        state=first.state,
    )
    mw.check_input_required(second)
    assert sorted(second.requests) == ["roots_1", "sample_1"]
    assert second.requests["sample_1"] == first.requests["sample_1"]
    assert second.state != first.state
    done = mw.tool_call(
        http,
        gateway_url,
        "ask_all_at_once",
        args,
        input_responses={k: answers[k] for k in ("roots_1", "sample_1")},
        state=second.state,
    )
    content = done.result["structuredContent"]
    assert content["question_1"]["content"] == {"name": "Alice-name"}
    assert content["sample_1"]["text"] == "Paris"
    assert content["roots_1"] == {"roots": ["file:///work/project"]}
    assert mw.marker_count(legacy_url, mark) == 1


def test_first_call_with_matching_input_responses_completes_at_once(
    http: httpx.Client, gateway_url: str, legacy_url: str
) -> None:
    mark = marker()
    answer = mw.tool_call(
        http,
        gateway_url,
        "test_input_required_result_elicitation",
        {"marker": mark},
        input_responses={
            "user_name": {"action": "accept", "content": {"name": "Bob"}},
            "unknown_extra_key": {"ignored": True},
        },
    )
    assert answer.result["resultType"] == "complete"
    assert answer.result["content"][0]["text"] == "Hello, Bob!"
    # A result reached with inputResponses is not to be cached either (tools/call
    # results carry no caching fields at all).
    assert "ttlMs" not in answer.result
    assert mw.marker_count(legacy_url, mark) == 1


def test_first_call_with_other_keys_is_asked(http: httpx.Client, gateway_url: str) -> None:
    answer = mw.tool_call(
        http,
        gateway_url,
        "test_input_required_result_elicitation",
        {"marker": marker()},
        input_responses={"wrong_key": {"action": "accept", "content": {"data": "x"}}},
    )
    mw.check_input_required(answer)
    assert list(answer.requests) == ["user_name"]


@pytest.mark.parametrize("responses", [{"user_name": 12345}, None, [1, 2], "text"])
def test_malformed_input_responses_never_reach_the_upstream(
    http: httpx.Client, gateway_url: str, legacy_url: str, responses: Any
) -> None:
    mark = marker()
    rid = mw.new_id()
    answer = mw.tool_call(
        http,
        gateway_url,
        "test_input_required_result_elicitation",
        {"marker": mark},
        rid=rid,
        input_responses=responses,
    )
    assert answer.status == 400 and answer.error["code"] == -32602
    assert answer.final["id"] == rid
    assert "inputResponses" in answer.error["message"]
    assert mw.marker_count(legacy_url, mark) == 0


# ---------------------------------------------------------------------------
# Capabilities the caller did not declare
# ---------------------------------------------------------------------------


def _ledger_outcomes(legacy_url: str, what: str, since: int) -> list[str]:
    asks = mw.stats(legacy_url)["asks"][since:]
    return [a["outcome"] for a in asks if a["what"] == what]


@pytest.mark.parametrize(
    ("tool", "caps", "required"),
    [
        # caps {}: the plain forwarding path (no lane)
        ("test_missing_capability", {}, {"sampling": {}}),
        ("connect_account", {}, {"elicitation": {"url": {}}}),
        # some input capability, not the one needed: the bridge's path
        ("ask_sampling", {"elicitation": {}}, {"sampling": {}}),
        ("ask_url_consent", {"elicitation": {}, "sampling": {}}, {"elicitation": {"url": {}}}),
        ("ask_roots", {"sampling": {}}, {"roots": {}}),
    ],
)
def test_missing_capability_is_32021_and_the_tool_does_not_complete(
    http: httpx.Client,
    gateway_url: str,
    legacy_url: str,
    tool: str,
    caps: dict[str, Any],
    required: dict[str, Any],
) -> None:
    since = len(mw.stats(legacy_url)["asks"])
    rid = mw.new_id()
    answer = mw.tool_call(http, gateway_url, tool, {"marker": marker()}, caps=caps, rid=rid)
    assert answer.status == 400, answer.final
    assert answer.final["id"] == rid
    assert answer.error["code"] == -32021
    assert answer.error["data"] == {"requiredCapabilities": required}
    SPEC.validate(MODERN, "MissingRequiredClientCapabilityError", answer.final)
    if tool != "connect_account":
        # The upstream's request was never left waiting, and the call did not
        # complete on it: cancelled first, then refused (or cancelled with it).
        outcomes = until_sync(
            lambda: [
                o
                for o in _ledger_outcomes(legacy_url, f"tools/call {tool}", since)
                if o != "pending"
            ],
            what="the fixture to record the refused request",
        )
        assert all(o == "cancelled" or o.startswith("error -32601") for o in outcomes), outcomes


def test_undeclared_kinds_are_never_asked(http: httpx.Client, gateway_url: str) -> None:
    answer = mw.tool_call(
        http, gateway_url, "test_input_required_result_capabilities", {}, caps={"sampling": {}}
    )
    mw.check_input_required(answer)
    assert [r["method"] for r in answer.requests.values()] == ["sampling/createMessage"]


# ---------------------------------------------------------------------------
# Closing the answer of a retry cancels the upstream call
# ---------------------------------------------------------------------------


def test_closing_a_retry_stream_cancels_the_upstream_call(
    http: httpx.Client, gateway_url: str, legacy_url: str
) -> None:
    args = {"ms": 5000, "steps": 50, "marker": marker()}
    first = mw.tool_call(http, gateway_url, "ask_then_work", args)
    assert list(first.requests) == ["go_ahead"]
    before = mw.stats(legacy_url)["toolCancellations"].get("ask_then_work", 0)
    retry = mw.message_for(
        "tools/call",
        {"name": "ask_then_work", "arguments": args},
        input_responses={"go_ahead": {"action": "accept", "content": {"go": True}}},
        state=first.state,
        meta={"progressToken": "work-1"},
    )
    with http.stream(
        "POST",
        gateway_url + "/mcp",
        content=json.dumps(retry).encode(),
        headers=wire.headers_for(retry),
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data:"):
                note = json.loads(line[5:])
                assert note["method"] == "notifications/progress"
                assert note["params"]["progressToken"] == "work-1"
                break
    # The client went away mid-retry: the gateway cancels the upstream call.
    until_sync(
        lambda: mw.stats(legacy_url)["toolCancellations"].get("ask_then_work", 0) > before,
        what="notifications/cancelled to reach the fixture",
    )


# ---------------------------------------------------------------------------
# On the wire toward the upstream: one tools/call, valid responses
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(legacy_url: str, logs_dir: Path) -> Iterator[tuple[RecordingProxy, str]]:
    with (
        RecordingProxy(legacy_url) as back,
        procs.gateway(
            back.url, procs.free_port(), log_path=logs_dir / "mrtr-recorded-gateway.log"
        ) as gateway,
    ):
        yield back, gateway


def test_upstream_sees_one_call_and_schema_valid_answers(
    http: httpx.Client, recorded: tuple[RecordingProxy, str]
) -> None:
    back, gateway = recorded
    mark = marker()
    start = back.mark()
    args = {"marker": mark}
    first = mw.tool_call(http, gateway, "test_input_required_result_multiple_inputs", args)
    assert sorted(first.requests) == ["client_roots", "greeting", "user_name"]
    done = mw.tool_call(
        http,
        gateway,
        "test_input_required_result_multiple_inputs",
        args,
        input_responses=mw.answers_for(first.requests),
        state=first.state,
    )
    assert done.result["resultType"] == "complete"
    records = back.since(start)
    calls = [
        r for r in records if r.method == "tools/call" and r.body["params"]["arguments"] == args
    ]
    assert len(calls) == 1, "the call must reach the upstream exactly once"
    version = calls[0].headers["mcp-protocol-version"]
    asked = {m["id"]: m["method"] for m in calls[0].messages if "method" in m and "id" in m}
    assert sorted(asked.values()) == ["elicitation/create", "roots/list", "sampling/createMessage"]
    replies = [
        r.body
        for r in records
        if isinstance(r.body, dict) and "method" not in r.body and r.body.get("id") in asked
    ]
    assert len(replies) == 3
    definition = {
        "elicitation/create": "ElicitResult",
        "sampling/createMessage": "CreateMessageResult",
        "roots/list": "ListRootsResult",
    }
    for reply in replies:
        check_legacy_sent(SPEC, version, reply)
        SPEC.validate(version, definition[asked[reply["id"]]], reply["result"])
