"""The bridge's pure protocol logic: keys, capabilities, answer validation, results."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.call import ModernCall
from app.cluster.forwarding import HOP_HEADER, hop_headers, mirrored
from app.fronts.modern import checks as modern
from app.mrtr import answers, capabilities, results
from app.mrtr.keys import INPUT_KEY_META, KeyAssigner, named_key, without_key_meta
from app.rejections import INVALID_PARAMS, MISSING_CLIENT_CAPABILITY
from tests.schema import MODERN, Spec
from translators.registry import get_version

V2025 = get_version("2025-11-25")
V2026 = get_version("2026-07-28")
assert V2025 is not None and V2026 is not None

ELICIT: dict[str, Any] = {
    "message": "Name?",
    "requestedSchema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    },
}
SAMPLE: dict[str, Any] = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
    "maxTokens": 10,
}


# ---------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------


def test_keys_named_by_the_request_are_used_and_made_unique() -> None:
    keys = KeyAssigner()
    named = {**ELICIT, "_meta": {INPUT_KEY_META: "user_name"}}
    assert keys.assign("elicitation/create", named) == "user_name"
    assert keys.assign("elicitation/create", named) == "user_name_2"
    assert keys.assign("elicitation/create", named) == "user_name_3"


def test_keys_made_up_are_readable_and_stable() -> None:
    def run() -> list[str]:
        keys = KeyAssigner()
        return [
            keys.assign("elicitation/create", ELICIT),
            keys.assign("sampling/createMessage", SAMPLE),
            keys.assign("elicitation/create", ELICIT),
            keys.assign("roots/list", None),
            keys.assign("elicitation/create", {"mode": "url", "url": "https://x", "message": "m"}),
        ]

    assert run() == ["elicitation_1", "sampling_1", "elicitation_2", "roots_1", "url_elicitation_1"]
    assert run() == run()


def test_made_up_keys_never_collide_with_named_ones() -> None:
    keys = KeyAssigner()
    assert keys.assign("roots/list", {"_meta": {INPUT_KEY_META: "roots_1"}}) == "roots_1"
    assert keys.assign("roots/list", {}) == "roots_2"


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, 12, None, "a/b"])
def test_unusable_names_are_ignored(name: object) -> None:
    assert named_key({"_meta": {INPUT_KEY_META: name}}) is None


def test_key_convention_is_removed_from_what_the_client_sees() -> None:
    assert without_key_meta({"a": 1, "_meta": {INPUT_KEY_META: "k"}}) == {"a": 1}
    assert without_key_meta({"_meta": {INPUT_KEY_META: "k", "other": 2}}) == {"_meta": {"other": 2}}


# ---------------------------------------------------------------------------
# capabilities
# ---------------------------------------------------------------------------

URL_PARAMS = {"mode": "url", "url": "https://x", "message": "m"}


@pytest.mark.parametrize(
    ("method", "params", "declared", "missing"),
    [
        ("elicitation/create", ELICIT, {}, {"elicitation": {}}),
        ("elicitation/create", ELICIT, {"elicitation": {}}, None),
        ("elicitation/create", ELICIT, {"elicitation": {"form": {}}}, None),
        ("elicitation/create", ELICIT, {"elicitation": {"url": {}}}, {"elicitation": {"form": {}}}),
        ("elicitation/create", URL_PARAMS, {}, {"elicitation": {"url": {}}}),
        ("elicitation/create", URL_PARAMS, {"elicitation": {}}, {"elicitation": {"url": {}}}),
        ("elicitation/create", URL_PARAMS, {"elicitation": {"url": {}}}, None),
        ("sampling/createMessage", SAMPLE, {}, {"sampling": {}}),
        ("sampling/createMessage", SAMPLE, {"sampling": {}}, None),
        (
            "sampling/createMessage",
            {**SAMPLE, "tools": [{"name": "t", "inputSchema": {"type": "object"}}]},
            {"sampling": {}},
            {"sampling": {"tools": {}}},
        ),
        (
            "sampling/createMessage",
            {**SAMPLE, "toolChoice": {"mode": "auto"}},
            {"sampling": {"tools": {}}},
            None,
        ),
        ("roots/list", None, {"sampling": {}}, {"roots": {}}),
        ("roots/list", None, {"roots": {}}, None),
        ("ping", None, {}, None),
    ],
)
def test_missing_for(
    method: str, params: Any, declared: dict[str, Any], missing: dict[str, Any] | None
) -> None:
    assert capabilities.missing_for(method, params, declared) == missing


def test_declares_input() -> None:
    assert not capabilities.declares_input({})
    assert not capabilities.declares_input({"experimental": {}, "elicitation": None})
    assert capabilities.declares_input({"roots": {}})


def test_url_elicitations_from_32042() -> None:
    error = {
        "code": -32042,
        "message": "URL elicitation required",
        "data": {"elicitations": [{"mode": "url", "url": "https://a", "message": "m"}]},
    }
    assert capabilities.url_elicitations(error) == error["data"]["elicitations"]  # type: ignore[index]
    assert capabilities.url_elicitations({**error, "code": -32603}) is None
    assert capabilities.url_elicitations({**error, "data": {"elicitations": []}}) is None
    assert capabilities.url_elicitations({**error, "data": {"elicitations": [{"x": 1}]}}) is None
    assert capabilities.url_elicitations("nope") is None


# ---------------------------------------------------------------------------
# answers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"inputResponses": None}, "inputResponses must be an object"),
        ({"inputResponses": []}, "inputResponses must be an object"),
        ({"inputResponses": {"user_name": 12345}}, "inputResponses['user_name'] must be an object"),
        ({"inputResponses": {"k": "text"}}, "inputResponses['k']"),
        ({"requestState": ""}, "requestState must be"),
        ({"requestState": 7}, "requestState must be"),
        ({"requestState": "x" * 5000}, "requestState must be"),
    ],
)
def test_check_params_refuses_malformed_retries(params: dict[str, Any], fragment: str) -> None:
    rejection = answers.check_params(9, params)
    assert rejection is not None
    assert rejection.code == INVALID_PARAMS and rejection.id == 9 and rejection.http_status == 400
    assert fragment in rejection.message


def test_check_params_accepts_well_formed_ones() -> None:
    assert answers.check_params(1, {}) is None
    assert answers.check_params(1, {"inputResponses": {}, "requestState": "abc"}) is None
    assert answers.check_params(1, {"inputResponses": {"a": {}, "b": {"x": 1}}}) is None


PROFILE = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Profile",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 2, "maxLength": 5},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "score": {"type": "number"},
                "ok": {"type": "boolean"},
                "color": {"type": "string", "enum": ["red", "blue"]},
                "hex": {"type": "string", "oneOf": [{"const": "#f00"}, {"const": "#00f"}]},
                "tags": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 2,
                    "items": {"type": "string", "enum": ["a", "b", "c"]},
                },
                "email": {"type": "string", "format": "email"},
                "day": {"type": "string", "format": "date"},
                "when": {"type": "string", "format": "date-time"},
                "site": {"type": "string", "format": "uri"},
            },
            "required": ["name", "age"],
        },
    },
}
GOOD_PROFILE = {
    "name": "Al",
    "age": 42,
    "score": 1.5,
    "ok": False,
    "color": "red",
    "hex": "#00f",
    "tags": ["a", "c"],
    "email": "al@example.com",
    "day": "2026-07-28",
    "when": "2026-07-28T10:00:00Z",
    "site": "https://example.com/x",
}


def test_a_fitting_elicitation_answer_passes() -> None:
    assert answers.check_answer(PROFILE, {"action": "accept", "content": GOOD_PROFILE}) is None
    # Decline and cancel carry no content to check; unknown extra fields are ignored.
    assert answers.check_answer(PROFILE, {"action": "decline"}) is None
    assert answers.check_answer(PROFILE, {"action": "cancel", "content": "junk"}) is None
    extra = {"action": "accept", "content": {**GOOD_PROFILE, "unknown": 1}}
    assert answers.check_answer(PROFILE, extra) is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"name": None}, "content.name is required"),
        ({"name": 5}, "content.name must be a string"),
        ({"name": "A"}, "at least 2 characters"),
        ({"name": "Albert"}, "at most 5 characters"),
        ({"age": 1.5}, "content.age must be an integer"),
        ({"age": True}, "content.age must be an integer"),
        ({"age": -1}, "at least 0"),
        ({"score": "1"}, "content.score must be a number"),
        ({"ok": "yes"}, "content.ok must be a boolean"),
        ({"color": "green"}, "content.color is not one of the allowed values"),
        ({"hex": "#0f0"}, "content.hex is not one of the allowed values"),
        ({"tags": []}, "at least 1 items"),
        ({"tags": ["a", "b", "c"]}, "at most 2 items"),
        ({"tags": ["z"]}, "outside the allowed values"),
        ({"tags": "a"}, "must be an array of strings"),
        ({"email": "nope"}, "must be an email address"),
        ({"day": "28/07/2026"}, "must be a date"),
        ({"when": "yesterday"}, "must be a date-time"),
        ({"site": "no scheme"}, "must be a URI"),
    ],
)
def test_an_elicitation_answer_that_does_not_fit(change: dict[str, Any], reason: str) -> None:
    content = {**GOOD_PROFILE, **change}
    content = {k: v for k, v in content.items() if v is not None}
    found = answers.check_answer(PROFILE, {"action": "accept", "content": content})
    assert found is not None and reason in found


def test_elicitation_action_and_content_shape() -> None:
    assert answers.check_answer(PROFILE, {"action": "maybe"}) is not None
    assert answers.check_answer(PROFILE, {}) is not None
    assert "content must be an object" in str(
        answers.check_answer(PROFILE, {"action": "accept", "content": [1]})
    )
    url = {"method": "elicitation/create", "params": URL_PARAMS}
    assert answers.check_answer(url, {"action": "accept"}) is None


SAMPLING = {"method": "sampling/createMessage", "params": SAMPLE}


@pytest.mark.parametrize(
    ("answer", "fits"),
    [
        ({"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"}, True),
        ({"role": "assistant", "content": [{"type": "text", "text": "x"}], "model": "m"}, True),
        ({"role": "assistant", "model": "m"}, False),
        ({"role": "assistant", "content": [], "model": "m"}, False),
        ({"role": "assistant", "content": {"text": "x"}, "model": "m"}, False),
        ({"role": "robot", "content": {"type": "text", "text": "x"}, "model": "m"}, False),
        ({"role": "assistant", "content": {"type": "text", "text": "x"}}, False),
    ],
)
def test_sampling_answers(answer: dict[str, Any], fits: bool) -> None:
    assert (answers.check_answer(SAMPLING, answer) is None) is fits


@pytest.mark.parametrize(
    ("answer", "fits"),
    [
        ({"roots": []}, True),
        ({"roots": [{"uri": "file:///a", "name": "A"}, {"uri": "file:///b"}]}, True),
        ({}, False),
        ({"roots": [{"uri": "https://a"}]}, False),
        ({"roots": [{"name": "A"}]}, False),
        ({"roots": [{"uri": "file:///a", "name": 3}]}, False),
    ],
)
def test_roots_answers(answer: dict[str, Any], fits: bool) -> None:
    request = {"method": "roots/list"}
    assert (answers.check_answer(request, answer) is None) is fits


# ---------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------


def test_input_request_is_translated_and_unframed(spec: Spec) -> None:
    assert V2025 is not None and V2026 is not None
    legacy = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "elicitation/create",
        "params": {**URL_PARAMS, "elicitationId": "e1", "_meta": {INPUT_KEY_META: "k"}},
    }
    request = results.input_request(legacy, V2025, V2026)
    assert request == {"method": "elicitation/create", "params": URL_PARAMS}
    spec.validate(MODERN, "ElicitRequest", request)
    roots = results.input_request({"jsonrpc": "2.0", "id": 8, "method": "roots/list"}, V2025, V2026)
    assert roots == {"method": "roots/list"}
    spec.validate(MODERN, "ListRootsRequest", roots)


def test_input_required_result_is_schema_valid(spec: Spec) -> None:
    result = results.input_required(
        {"k": {"method": "roots/list"}}, "state", {"name": "s", "version": "1"}
    )
    spec.validate(MODERN, "InputRequiredResult", result)
    assert result["resultType"] == "input_required" and result["requestState"] == "state"
    assert "ttlMs" not in result


def test_missing_capability_rejection(spec: Spec) -> None:
    rejection = results.missing_capability(401, {"elicitation": {"url": {}}, "roots": {}})
    assert rejection.code == MISSING_CLIENT_CAPABILITY and rejection.http_status == 400
    assert "elicitation.url" in rejection.message and "roots" in rejection.message
    spec.validate(MODERN, "MissingRequiredClientCapabilityError", rejection.to_message())


def test_replies_to_the_upstream() -> None:
    elicit = {"jsonrpc": "2.0", "id": 3, "method": "elicitation/create", "params": ELICIT}
    sample = {"jsonrpc": "2.0", "id": "s", "method": "sampling/createMessage", "params": SAMPLE}
    assert results.abandon_reply(elicit, timed_out=True) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"action": "cancel"},
    }
    timed_out = results.abandon_reply(sample, timed_out=True)
    assert timed_out["id"] == "s" and timed_out["error"]["code"] == -32001
    assert results.abandon_reply(sample, timed_out=False)["error"]["code"] == -32603
    refused = results.refusal_reply(sample, {"sampling": {}})
    assert refused["error"]["code"] == -32601 and "sampling" in refused["error"]["message"]


def test_results_reached_through_retries_say_do_not_cache() -> None:
    read = {"resultType": "complete", "contents": [], "ttlMs": 60000, "cacheScope": "public"}
    assert results.do_not_cache(read, "resources/read") == {
        **read,
        "ttlMs": 0,
        "cacheScope": "private",
    }
    call = {"resultType": "complete", "content": []}
    assert results.do_not_cache(call, "tools/call") == call


def test_with_progress_token() -> None:
    bare = {"method": "tools/call", "params": {"name": "t"}}
    assert results.with_progress_token(bare)["params"]["_meta"]["progressToken"] == 0
    asked = {"method": "tools/call", "params": {"name": "t", "_meta": {"progressToken": "p"}}}
    assert results.with_progress_token(asked) == asked
    assert bare == {"method": "tools/call", "params": {"name": "t"}}  # not mutated


# ---------------------------------------------------------------------------
# forwarding: the retry as the other replica receives it
# ---------------------------------------------------------------------------


def test_hop_headers_re_derive_what_the_client_sent() -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {
            "name": "größe",
            "arguments": {"region": "eu"},
            "requestState": "s",
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": mirrored("größe"),
        "mcp-param-region": "eu",
    }
    call = modern.parse(orjson.dumps(body), headers)
    assert isinstance(call, ModernCall)
    sent = hop_headers(call, "Bearer t")
    assert sent[HOP_HEADER] == "1" and sent["authorization"] == "Bearer t"
    # What the receiving replica's front accepts as it would the client's own request.
    again = modern.parse(orjson.dumps(body), sent)
    assert isinstance(again, ModernCall) and again.param_headers == {"region": "eu"}
    assert mirrored("plain") == "plain"
    assert mirrored(" padded") != " padded"


NAME_QUESTION = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "What is your name?",
        "requestedSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
}


def test_sole_fit_picks_the_only_answer_that_fits() -> None:
    supplied = {
        "user_name": {"action": "accept", "content": {"name": "Alice"}},
        "unknown_extra_key": {"action": "accept", "content": {"foo": "bar"}},
        "another_unexpected": {"action": "accept", "content": {"baz": 123}},
    }
    assert answers.sole_fit(NAME_QUESTION, supplied) == "user_name"


def test_sole_fit_refuses_to_guess() -> None:
    two = {
        "a": {"action": "accept", "content": {"name": "Alice"}},
        "b": {"action": "accept", "content": {"name": "Bob"}},
    }
    assert answers.sole_fit(NAME_QUESTION, two) is None
    assert (
        answers.sole_fit(NAME_QUESTION, {"w": {"action": "accept", "content": {"data": "x"}}})
        is None
    )
    assert answers.sole_fit(NAME_QUESTION, {"d": {"action": "decline"}}) is None
    assert answers.sole_fit(NAME_QUESTION, {"n": 12345}) is None
