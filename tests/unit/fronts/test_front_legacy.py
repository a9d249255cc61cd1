"""The legacy front's pure rules (app/fronts/legacy/checks.py): era per request, version
negotiation, message shape, batches."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.fronts.legacy import checks as legacy
from app.rejections import Rejection

MARKER = "io.modelcontextprotocol/protocolVersion"


def raw(message: Any) -> bytes:
    return json.dumps(message).encode()


def modern(method: str = "tools/list") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {"_meta": {MARKER: "2026-07-28"}},
    }


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}},
}


def test_modern_request_is_not_claimed() -> None:
    assert legacy.claims(raw(modern()), {}) is None
    # Even with a session header: the body says modern (dual-era selection).
    assert legacy.claims(raw(modern()), {"mcp-session-id": "s"}) is None
    # A modern `initialize` is the modern front's to refuse (-32601).
    assert legacy.claims(raw(modern("initialize")), {}) is None


def test_request_without_meta_or_session_goes_to_the_modern_400() -> None:
    assert legacy.claims(raw({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}), {}) is None
    assert legacy.claims(b"not json", {}) is None
    assert legacy.claims(raw([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]), {}) is None


def test_initialize_and_session_requests_are_legacy() -> None:
    claim = legacy.claims(raw(INIT), {})
    assert claim is not None and claim.body == INIT and claim.session_id is None
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    claim = legacy.claims(raw(ping), {"mcp-session-id": "abc"})
    assert claim is not None and claim.session_id == "abc"


def test_marker_inside_arguments_does_not_make_a_legacy_request_modern() -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": MARKER}},
    }
    assert legacy.claims(raw(call), {"mcp-session-id": "abc"}) is not None


def test_parse_error_with_a_session_is_the_legacy_fronts() -> None:
    claim = legacy.claims(b"{oops", {"mcp-session-id": "abc"})
    assert claim is not None and claim.parse_error


def test_batches() -> None:
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}]
    claim = legacy.claims(raw(batch), {"mcp-session-id": "s"})
    assert claim is not None and claim.body == batch
    assert legacy.claims(raw([INIT]), {}) is not None  # refused there: initialize in a batch
    assert legacy.claims(raw([modern()]), {"mcp-session-id": "s"}) is None


@pytest.mark.parametrize(
    ("offered", "answered"),
    [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),  # not an initialize-era version
        ("DRAFT-2026-v1", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
        (None, "2025-11-25"),
    ],
)
def test_negotiate(offered: object, answered: str) -> None:
    assert legacy.negotiate(offered).name == answered


@pytest.mark.parametrize(
    "message",
    [
        [],
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},
        {"jsonrpc": "2.0", "id": True, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": ""},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": []},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}},
        {"jsonrpc": "2.0", "result": {}},
    ],
)
def test_malformed_messages_are_invalid_requests(message: Any) -> None:
    checked = legacy.check_message(message)
    assert isinstance(checked, Rejection) and checked.code == -32600
    assert checked.http_status == 400


def test_message_kinds() -> None:
    assert isinstance(
        legacy.check_message({"jsonrpc": "2.0", "id": "x", "method": "ping"}),
        legacy.LegacyRequest,
    )
    assert isinstance(
        legacy.check_message({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        legacy.LegacyNotification,
    )
    assert isinstance(
        legacy.check_message({"jsonrpc": "2.0", "id": 4, "result": {}}), legacy.LegacyResponse
    )


def test_initialize_params() -> None:
    request = legacy.check_message(INIT)
    assert isinstance(request, legacy.LegacyRequest)
    init = legacy.check_initialize(request)
    assert isinstance(init, legacy.Initialize) and init.version.name == "2025-06-18"
    bad = legacy.check_message({**INIT, "params": {"capabilities": {}}})
    assert isinstance(bad, legacy.LegacyRequest)
    refused = legacy.check_initialize(bad)
    assert isinstance(refused, Rejection) and refused.code == -32602


def test_version_header() -> None:
    v = legacy.negotiate("2025-06-18")
    assert legacy.check_version_header(None, v) is None
    assert legacy.check_version_header("2025-06-18", v) is None
    for value in ("2025-11-25", "2026-07-28", "x"):
        refused = legacy.check_version_header(value, v)
        assert refused is not None and refused.http_status == 400


def test_batch_rules() -> None:
    old, new = legacy.negotiate("2025-03-26"), legacy.negotiate("2025-06-18")
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert legacy.check_batch([ping], old, 50) is None
    assert legacy.check_batch([ping] * 50, old, 50) is None
    refusals = [
        legacy.check_batch([], old, 50),
        legacy.check_batch([ping] * 51, old, 50),
        legacy.check_batch([INIT], old, 50),
        legacy.check_batch([ping], new, 50),
        legacy.check_batch([ping], None, 50),
    ]
    for refusal in refusals:
        assert refusal is not None and refusal.code == -32600 and refusal.http_status == 400
    assert refusals[3] is not None and "2025-06-18 removed batching" in refusals[3].message


# ---------------------------------------------------------------------------
# Issue 7's checks on the legacy front
# ---------------------------------------------------------------------------


def _initialize(version: str, capabilities: Any) -> legacy.Initialize | Rejection:
    message = {**INIT, "params": {"protocolVersion": version, "capabilities": capabilities}}
    request = legacy.check_message(message)
    assert isinstance(request, legacy.LegacyRequest)
    return legacy.check_initialize(request)


@pytest.mark.parametrize(
    ("version", "capabilities", "field"),
    [
        ("2025-11-25", {"roots": "x"}, ".roots"),
        ("2024-11-05", {"sampling": 1}, ".sampling"),
        ("2025-06-18", {"elicitation": []}, ".elicitation"),
        ("2025-11-25", {"sampling": {"tools": 1}}, ".sampling.tools"),
        ("2025-11-25", {"tasks": {"requests": "all"}}, ".tasks.requests"),
        ("2025-03-26", {"experimental": {"x": 1}}, ".experimental['x']"),
    ],
)
def test_malformed_capabilities_name_the_field(version: str, capabilities: Any, field: str) -> None:
    refused = _initialize(version, capabilities)
    assert isinstance(refused, Rejection) and refused.code == -32602 and refused.id == 1
    assert f'"capabilities"{field} must be an object' in refused.message


def test_capabilities_a_revision_does_not_define_are_left_open() -> None:
    # 2025-03-26 has no elicitation, 2025-06-18 no sampling.tools: the set is open.
    assert isinstance(_initialize("2025-03-26", {"elicitation": 1}), legacy.Initialize)
    assert isinstance(_initialize("2025-06-18", {"sampling": {"tools": 1}}), legacy.Initialize)


def test_depth_and_header_values_before_anything_else() -> None:
    deep: Any = 1
    for _ in range(70):
        deep = {"a": deep}
    message = {"jsonrpc": "2.0", "id": "d", "method": "ping", "params": deep}
    claim = legacy.claims(raw(message), {"mcp-session-id": "s"})
    assert claim is not None
    refused = legacy.check_received(claim, {}, 64)
    assert isinstance(refused, Rejection) and (refused.code, refused.id) == (-32600, "d")
    assert legacy.check_received(claim, {}, 80) is None
    shallow = legacy.claims(raw({**message, "params": {}}), {"mcp-session-id": "s"})
    assert shallow is not None
    bad = legacy.check_received(shallow, {"authorization": "Bearer \xe9"}, 64)
    assert isinstance(bad, Rejection) and (bad.code, bad.id) == (-32600, "d")
    assert "\xe9" not in bad.message
    # -32020 is a 2026-07-28 code: a legacy client gets -32600 for Mcp-* values too.
    other = legacy.check_header_values({"mcp-session-id": "\x01"})
    assert isinstance(other, Rejection) and other.code == -32600


def test_an_error_always_carries_an_id() -> None:
    unread = legacy.error_message(legacy.parse_error())
    assert unread["id"] == legacy.UNREAD_ID and unread["error"]["code"] == -32700
    read = legacy.error_message(Rejection(-32600, "x", 7))
    assert read["id"] == 7


def test_batch_members_apply_every_rule_in_one_place() -> None:
    """The rules `POST /mcp` and `POST /messages` share (issue 19, defect 4)."""
    versions = ("2024-11-05", "2025-03-26", "2025-06-18")
    v2024, v2025, removed = (legacy.negotiate(v) for v in versions)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    note = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
    for version in (v2024, v2025):
        members = legacy.batch_members([ping, {**ping, "id": "1"}, note], version, 50)
        # 1 and "1" are two ids (JSON-RPC 2.0: a String or a Number).
        assert isinstance(members, list)
        assert [getattr(m, "id", None) for m in members] == [1, "1", None]
    twice = legacy.batch_members([ping, note, ping], v2025, 50)
    assert isinstance(twice, Rejection) and twice.code == -32600 and twice.http_status == 400
    assert "share the id 1" in twice.message
    twice_text = legacy.batch_members([{**ping, "id": "a"}] * 2, v2025, 50)
    assert isinstance(twice_text, Rejection) and "share the id 'a'" in twice_text.message
    refusals = {
        "MCP_SHIM_MAX_BATCH": legacy.batch_members([ping] * 51, v2024, 50),
        "initialize": legacy.batch_members([INIT, ping], v2025, 50),
        "empty": legacy.batch_members([], v2024, 50),
        "2025-06-18 removed batching": legacy.batch_members([ping], removed, 50),
        '"jsonrpc" must be "2.0"': legacy.batch_members([ping, {"id": 2}], v2024, 50),
    }
    for words, refusal in refusals.items():
        assert isinstance(refusal, Rejection) and refusal.code == -32600, words
        assert refusal.http_status == 400 and words in refusal.message, refusal
