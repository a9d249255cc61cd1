"""The aggregate's protocol logic on golden messages, both directions
(app/servers/aggregate/: sealed, lists, capabilities, answers, routing)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from app.cluster.sealing import Sealer
from app.rejections import INVALID_PARAMS, METHOD_NOT_FOUND, Rejection
from app.servers.aggregate import answers, capabilities, lists, routing, sealed, uris

SEALER = Sealer([os.urandom(32)])
OWNERS = uris.owners(
    ["a", "b"],
    {"a": ["file:///x"], "b": ["file:///x", "file:///b"]},
    {"b": ["db://{id}"]},
)
TABLE = routing.Table(members=("a", "b"), separator="__", owners=OWNERS, sealer=SEALER)


def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


# sealed.py


def test_wrapped_values_open_only_for_their_purpose() -> None:
    token = sealed.wrap(SEALER, sealed.STATE, "a", "inner-state")
    assert token is not None and "inner-state" not in token
    assert sealed.unwrap(SEALER, sealed.STATE, token) == ("a", "inner-state")
    assert sealed.unwrap(SEALER, sealed.TASK, token) is None
    assert sealed.unwrap(SEALER, sealed.STATE, token[:-2] + "AA") is None
    assert sealed.unwrap(Sealer([os.urandom(32)]), sealed.STATE, token) is None
    assert sealed.unwrap(SEALER, sealed.STATE, 12) is None
    assert sealed.wrap(SEALER, sealed.STATE, "a", "x" * (sealed.MAX_WRAPPED_CHARS + 1)) is None


def test_cursor_names_its_list() -> None:
    cursor = sealed.seal_cursor(SEALER, "tools/list", 1000)
    assert sealed.open_cursor(SEALER, "tools/list", cursor) == 1000
    assert sealed.open_cursor(SEALER, "prompts/list", cursor) is None
    assert sealed.open_cursor(SEALER, "tools/list", "garbage") is None
    state = sealed.wrap(SEALER, sealed.STATE, "a", "s")
    assert sealed.open_cursor(SEALER, "tools/list", state) is None


# lists.py


def test_tools_merged_in_file_order_and_prefixed() -> None:
    kind = lists.KINDS["tools/list"]
    page_a = lists.page_items({"tools": [{"name": "echo"}, {"nameless": 1}, "x"]}, kind)
    page_b = lists.page_items({"tools": [{"name": "echo", "title": "E"}], "nextCursor": "c2"}, kind)
    assert page_a == ([{"name": "echo"}], None)
    assert page_b == ([{"name": "echo", "title": "E"}], "c2")
    merged = lists.merge(kind, [("a", page_a[0]), ("b", page_b[0])], "__", OWNERS)
    assert merged == [{"name": "a__echo"}, {"name": "b__echo", "title": "E"}]
    assert page_a[0] == [{"name": "echo"}]  # inputs kept
    assert lists.page_items({"tools": "no"}, kind) is None
    assert lists.page_items({"tools": [], "nextCursor": ""}, kind) == ([], None)


def test_resources_merged_by_ownership() -> None:
    kind = lists.KINDS["resources/list"]
    fetched = [("a", [{"uri": "file:///x"}]), ("b", [{"uri": "file:///x"}, {"uri": "file:///b"}])]
    assert [r["uri"] for r in lists.merge(kind, fetched, "__", OWNERS)] == [
        "file:///x",
        "mcp-shim:b/file:///x",
        "file:///b",
    ]
    templates = lists.merge(
        lists.KINDS["resources/templates/list"],
        [("b", [{"uriTemplate": "db://{id}"}])],
        "__",
        OWNERS,
    )
    assert templates == [{"uriTemplate": "db://{id}"}]


def test_pages() -> None:
    items = [{"name": str(i)} for i in range(5)]
    assert lists.page(items, 0, 2) == (items[:2], 2)
    assert lists.page(items, 4, 2) == (items[4:], None)
    assert lists.page(items, 9, 2) == ([], None)
    assert lists.page(items, 0) == (items, None)


# capabilities.py


def test_capabilities_union() -> None:
    discovered = [
        ("a", {"capabilities": {"tools": {"listChanged": False}}, "instructions": "Use a."}),
        ("b", {"capabilities": {"tools": {"listChanged": True}, "resources": {"subscribe": True}}}),
        ("c", {"capabilities": "bad", "instructions": "  "}),
    ]
    result = capabilities.discover_result(
        discovered, ["2026-07-28"], {"name": "agg", "version": "1"}, "__"
    )
    assert result == {
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {"listChanged": True}, "resources": {"subscribe": True}},
        "serverInfo": {"name": "agg", "version": "1"},
        "instructions": "## a (tools and prompts named `a__...`)\n\nUse a.",
    }
    assert "instructions" not in capabilities.discover_result([], [], {}, "__")


# answers.py

SCOPE_B = answers.Scope(SEALER, "b", OWNERS)


def test_input_required_state_wrapped_and_routed_back() -> None:
    body = {
        "resultType": "input_required",
        "inputRequests": {"q": {}},
        "requestState": "member-state",
    }
    shown = answers.result(SCOPE_B, "tools/call", body)
    assert shown["inputRequests"] == {"q": {}}
    assert shown["requestState"] != "member-state"
    retry = call(
        "tools/call",
        {"name": "b__ask", "requestState": shown["requestState"], "inputResponses": {}},
    )
    routed = routing.route(TABLE, retry)
    assert isinstance(routed, routing.Routed)
    assert routed.member == "b"
    assert routed.message["params"] == {
        "name": "ask",
        "requestState": "member-state",
        "inputResponses": {},
    }
    assert retry["params"]["name"] == "b__ask"  # input kept
    # The same state with another member's tool: refused, never sent anywhere.
    stolen = routing.route(
        TABLE, call("tools/call", {"name": "a__ask", "requestState": shown["requestState"]})
    )
    assert isinstance(stolen, Rejection) and stolen.code == INVALID_PARAMS


def test_task_ids_wrapped_and_routed_back() -> None:
    shown = answers.result(
        SCOPE_B, "tools/call", {"resultType": "task", "taskId": "t-1", "status": "working"}
    )
    assert shown["status"] == "working" and shown["taskId"] != "t-1"
    routed = routing.route(TABLE, call("tasks/get", {"taskId": shown["taskId"]}))
    assert isinstance(routed, routing.Routed)
    assert (routed.member, routed.message["params"]["taskId"]) == ("b", "t-1")
    note = answers.notification(
        SCOPE_B, {"method": "notifications/tasks", "params": {"taskId": "t-1"}}
    )
    assert note is not None
    assert sealed.unwrap(SEALER, sealed.TASK, note["params"]["taskId"]) == ("b", "t-1")
    bad = routing.route(TABLE, call("tasks/cancel", {"taskId": "t-1"}))
    assert isinstance(bad, Rejection) and bad.code == INVALID_PARAMS


def test_result_uris_shown_by_ownership() -> None:
    body = {
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "resource_link", "uri": "file:///x", "name": "x"},
            {"type": "resource", "resource": {"uri": "file:///x", "text": "t"}},
        ]
    }
    shown = answers.result(SCOPE_B, "tools/call", body)
    assert shown["content"][0] is body["content"][0]
    assert shown["content"][1]["uri"] == "mcp-shim:b/file:///x"
    assert shown["content"][2]["resource"]["uri"] == "mcp-shim:b/file:///x"
    assert body["content"][1]["uri"] == "file:///x"
    read = answers.result(
        SCOPE_B, "resources/read", {"contents": [{"uri": "file:///x", "text": "t"}]}
    )
    assert read["contents"][0]["uri"] == "mcp-shim:b/file:///x"
    prompt = answers.result(
        SCOPE_B,
        "prompts/get",
        {"messages": [{"role": "user", "content": {"type": "resource_link", "uri": "file:///x"}}]},
    )
    assert prompt["messages"][0]["content"]["uri"] == "mcp-shim:b/file:///x"
    plain = {"content": [{"type": "text", "text": "hi"}]}
    assert answers.result(SCOPE_B, "tools/call", plain) is plain


def test_notifications_renamed() -> None:
    updated = answers.notification(
        SCOPE_B, {"method": "notifications/resources/updated", "params": {"uri": "file:///x"}}
    )
    assert updated == {
        "method": "notifications/resources/updated",
        "params": {"uri": "mcp-shim:b/file:///x"},
    }
    log = answers.notification(
        SCOPE_B, {"method": "notifications/message", "params": {"level": "info", "data": 1}}
    )
    assert log is not None and log["params"]["logger"] == "b"
    log2 = answers.notification(
        SCOPE_B, {"method": "notifications/message", "params": {"logger": "db"}}
    )
    assert log2 is not None and log2["params"]["logger"] == "b/db"
    changed = {"method": "notifications/tools/list_changed"}
    assert answers.notification(SCOPE_B, changed) is changed
    assert answers.notification(SCOPE_B, {"method": answers.ACKNOWLEDGED, "params": {}}) is None
    meta = {
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {answers.SUBSCRIPTION_ID: 3}},
    }
    assert answers.for_listen(meta, "L")["params"]["_meta"] == {answers.SUBSCRIPTION_ID: "L"}
    assert answers.for_listen(changed, "L") == {
        **changed,
        "params": {"_meta": {answers.SUBSCRIPTION_ID: "L"}},
    }


def test_too_long_to_seal() -> None:
    with pytest.raises(answers.TooLong):
        answers.result(
            SCOPE_B, "tools/call", {"resultType": "input_required", "requestState": "x" * 20000}
        )


# routing.py


@pytest.mark.parametrize(
    ("message", "member", "params"),
    [
        (
            call("tools/call", {"name": "a__echo", "arguments": {"x": 1}}),
            "a",
            {"name": "echo", "arguments": {"x": 1}},
        ),
        (call("prompts/get", {"name": "b__greet"}), "b", {"name": "greet"}),
        (call("resources/read", {"uri": "file:///x"}), "a", {"uri": "file:///x"}),
        (call("resources/read", {"uri": "mcp-shim:b/file:///x"}), "b", {"uri": "file:///x"}),
        (call("resources/read", {"uri": "db://9"}), "b", {"uri": "db://9"}),
        (
            call(
                "completion/complete",
                {"ref": {"type": "ref/prompt", "name": "a__p"}, "argument": {}},
            ),
            "a",
            {"ref": {"type": "ref/prompt", "name": "p"}, "argument": {}},
        ),
        (
            call("completion/complete", {"ref": {"type": "ref/resource", "uri": "db://{id}"}}),
            "b",
            {"ref": {"type": "ref/resource", "uri": "db://{id}"}},
        ),
    ],
)
def test_routed(message: dict[str, Any], member: str, params: dict[str, Any]) -> None:
    routed = routing.route(TABLE, message)
    assert isinstance(routed, routing.Routed)
    assert routed.member == member
    assert routed.message == {**message, "params": params}


@pytest.mark.parametrize(
    ("message", "code", "says"),
    [
        (
            call("tools/call", {"name": "echo"}),
            INVALID_PARAMS,
            "Unknown tool: 'echo'; the aggregate's names are SERVER__NAME",
        ),
        (call("tools/call", {"name": "zz__echo"}), INVALID_PARAMS, "SERVER one of a, b"),
        (call("resources/read", {"uri": "file:///none"}), INVALID_PARAMS, "Resource not found"),
        (call("completion/complete", {}), INVALID_PARAMS, "needs a ref"),
        (call("sampling/whatever", {}), METHOD_NOT_FOUND, "/servers/NAME/mcp"),
        ({"jsonrpc": "2.0", "id": 1}, METHOD_NOT_FOUND, "without a method"),
    ],
)
def test_refused(message: dict[str, Any], code: int, says: str) -> None:
    refused = routing.route(TABLE, message)
    assert isinstance(refused, Rejection)
    assert refused.code == code and says in refused.message and refused.id == message.get("id")


@pytest.mark.parametrize("method", sorted(routing.LOCAL))
def test_local_methods(method: str) -> None:
    assert routing.route(TABLE, call(method, {})) == method


def test_listen_filter_split() -> None:
    filters, unknown = routing.member_filters(
        TABLE,
        {
            "toolsListChanged": True,
            "resourceSubscriptions": ["file:///x", "mcp-shim:b/file:///x", "q://z", 5],
        },
    )
    assert filters == {
        "a": {"toolsListChanged": True, "resourceSubscriptions": ["file:///x"]},
        "b": {"toolsListChanged": True, "resourceSubscriptions": ["file:///x"]},
    }
    assert unknown == ["q://z", "5"]


def test_the_task_id_a_request_named_is_answered_as_sent() -> None:
    outer = sealed.wrap(SEALER, sealed.TASK, "b", "t-1")
    assert outer is not None
    scope = answers.Scope(SEALER, "b", OWNERS, task=("t-1", outer))
    shown = answers.result(scope, "tasks/get", {"taskId": "t-1", "status": "completed"})
    assert shown["taskId"] == outer
    other = answers.result(scope, "tasks/get", {"taskId": "t-2", "status": "completed"})
    assert sealed.unwrap(SEALER, sealed.TASK, other["taskId"]) == ("b", "t-2")
