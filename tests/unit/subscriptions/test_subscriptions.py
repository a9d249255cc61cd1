"""The pure parts of subscriptions/listen: filter, honoured subset, frames, refcount, mailbox."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.rejections import INVALID_PARAMS, Rejection
from app.subscriptions import filters, frames
from app.subscriptions.filters import Filter
from app.subscriptions.mailbox import End, Mailbox
from app.subscriptions.refcount import UriRefcount
from tests.schema import MODERN, SPEC, check_modern_answer, check_modern_error
from tests.waiting import until

SUB_ID = "io.modelcontextprotocol/subscriptionId"
ALL_CAPS: dict[str, Any] = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
}

# ---------------------------------------------------------------------------
# parse
# ---------------------------------------------------------------------------


def test_parse_the_spec_example() -> None:
    parsed = filters.parse(
        {
            "notifications": {
                "toolsListChanged": True,
                "resourceSubscriptions": ["file:///project/config.json"],
            }
        }
    )
    assert parsed == Filter(tools=True, uris=("file:///project/config.json",))


def test_parse_every_field_and_dedupes_uris_in_order() -> None:
    parsed = filters.parse(
        {
            "notifications": {
                "toolsListChanged": True,
                "promptsListChanged": True,
                "resourcesListChanged": True,
                "resourceSubscriptions": ["b://1", "a://2", "b://1"],
            }
        }
    )
    assert parsed == Filter(True, True, True, ("b://1", "a://2"))


def test_parse_omitted_and_false_fields_are_not_subscribed() -> None:
    parsed = filters.parse({"notifications": {"toolsListChanged": False, "unknownField": 1}})
    assert parsed == Filter()
    assert isinstance(parsed, Filter) and parsed.empty


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"notifications": None},
        {"notifications": []},
        {"notifications": {"toolsListChanged": "yes"}},
        {"notifications": {"promptsListChanged": 1}},
        {"notifications": {"resourceSubscriptions": "file:///a"}},
        {"notifications": {"resourceSubscriptions": [1]}},
        {"notifications": {"resourceSubscriptions": [""]}},
        {"notifications": {"resourceSubscriptions": ["x" * 5000]}},
        {"notifications": {"resourceSubscriptions": [f"u://{i}" for i in range(1001)]}},
    ],
)
def test_parse_rejects_malformed_filters_as_invalid_params(params: dict[str, Any]) -> None:
    parsed = filters.parse(params)
    assert isinstance(parsed, Rejection)
    assert parsed.code == INVALID_PARAMS
    assert parsed.http_status == 400
    assert parsed.message.startswith("Invalid params: ")


# ---------------------------------------------------------------------------
# what the upstream can honour
# ---------------------------------------------------------------------------

EVERYTHING = Filter(True, True, True, ("file:///a",))


def test_honourable_keeps_everything_an_upstream_declares() -> None:
    assert filters.honourable(EVERYTHING, ALL_CAPS) == EVERYTHING


@pytest.mark.parametrize(
    ("caps", "expected"),
    [
        ({}, Filter()),
        ({"tools": {}}, Filter()),
        ({"tools": {"listChanged": True}}, Filter(tools=True)),
        ({"tools": {"listChanged": False}, "prompts": {"listChanged": True}}, Filter(prompts=True)),
        ({"resources": {"subscribe": True}}, Filter(uris=("file:///a",))),
        ({"resources": {"listChanged": True}}, Filter(resources=True)),
        ({"resources": {"listChanged": "true", "subscribe": 1}}, Filter()),
        ({"tools": True, "prompts": None}, Filter()),
    ],
)
def test_honourable_cuts_what_the_upstream_cannot_produce(
    caps: dict[str, Any], expected: Filter
) -> None:
    assert filters.honourable(EVERYTHING, caps) == expected


def test_honourable_never_adds_what_was_not_asked() -> None:
    assert filters.honourable(Filter(prompts=True), ALL_CAPS) == Filter(prompts=True)


def test_advertised_keeps_only_true_flags() -> None:
    caps = {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": False},
        "resources": {"subscribe": False, "listChanged": True},
        "logging": {},
        "completions": {},
    }
    assert filters.advertised(caps) == {
        "tools": {"listChanged": True},
        "prompts": {},
        "resources": {"listChanged": True},
        "logging": {},
        "completions": {},
    }
    assert filters.advertised(ALL_CAPS) == ALL_CAPS
    assert caps["prompts"] == {"listChanged": False}  # input untouched


# ---------------------------------------------------------------------------
# which notification a filter wants
# ---------------------------------------------------------------------------


def note(method: str, **params: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params:
        message["params"] = params
    return message


@pytest.mark.parametrize(
    ("honoured", "message", "wanted"),
    [
        (Filter(tools=True), note(filters.TOOLS_LIST_CHANGED), True),
        (Filter(tools=True), note(filters.PROMPTS_LIST_CHANGED), False),
        (Filter(prompts=True), note(filters.TOOLS_LIST_CHANGED), False),
        (Filter(prompts=True), note(filters.PROMPTS_LIST_CHANGED), True),
        (Filter(resources=True), note(filters.RESOURCES_LIST_CHANGED), True),
        (Filter(resources=True), note(filters.RESOURCE_UPDATED, uri="file:///a"), False),
        (Filter(uris=("file:///a",)), note(filters.RESOURCE_UPDATED, uri="file:///a"), True),
        (Filter(uris=("file:///a",)), note(filters.RESOURCE_UPDATED, uri="file:///b"), False),
        (Filter(uris=("file:///a",)), note(filters.RESOURCE_UPDATED), False),
        (Filter(uris=("file:///a",)), note(filters.RESOURCES_LIST_CHANGED), False),
        (Filter(True, True, True, ("x",)), note("notifications/message", level="info"), False),
        (Filter(True, True, True, ("x",)), note("notifications/progress"), False),
    ],
)
def test_wants(honoured: Filter, message: dict[str, Any], wanted: bool) -> None:
    assert filters.wants(honoured, message) is wanted


@pytest.mark.parametrize(
    ("uri", "covered"),
    [
        ("file:///dir", True),
        ("file:///dir/child.txt", True),
        ("file:///dir?x=1", True),
        ("file:///dir#frag", True),
        ("file:///directory", False),
        ("file:///di", False),
        ("https://host/base/", True),
        ("https://host/base/deeper", True),
    ],
)
def test_sub_resources_of_a_subscribed_uri_are_covered(uri: str, covered: bool) -> None:
    assert filters.covers(("file:///dir", "https://host/base/"), uri) is covered


# ---------------------------------------------------------------------------
# frames, validated against the 2026-07-28 schema
# ---------------------------------------------------------------------------


def test_ack_carries_the_honoured_subset_and_the_subscription_id() -> None:
    ack = frames.ack(1, Filter(tools=True, uris=("file:///project/config.json",)))
    assert ack == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "_meta": {SUB_ID: 1},
            "notifications": {
                "toolsListChanged": True,
                "resourceSubscriptions": ["file:///project/config.json"],
            },
        },
    }
    SPEC.validate(MODERN, "SubscriptionsAcknowledgedNotification", ack)


def test_ack_of_nothing_is_an_empty_filter() -> None:
    ack = frames.ack("s-1", Filter())
    assert ack["params"] == {"_meta": {SUB_ID: "s-1"}, "notifications": {}}
    SPEC.validate(MODERN, "SubscriptionsAcknowledgedNotification", ack)


def test_tag_adds_the_subscription_id_without_touching_the_input() -> None:
    shared = note(filters.RESOURCE_UPDATED, uri="file:///a", _meta={"other": 1})
    tagged = frames.tag(shared, 7)
    assert tagged == {
        "jsonrpc": "2.0",
        "method": filters.RESOURCE_UPDATED,
        "params": {"uri": "file:///a", "_meta": {"other": 1, SUB_ID: 7}},
    }
    assert shared["params"]["_meta"] == {"other": 1}
    SPEC.validate(MODERN, "ResourceUpdatedNotification", tagged)
    bare = frames.tag(note(filters.TOOLS_LIST_CHANGED), "abc")
    assert bare["params"] == {"_meta": {SUB_ID: "abc"}}
    SPEC.validate(MODERN, "ToolListChangedNotification", bare)


def test_closing_result_is_the_graceful_end_of_the_spec() -> None:
    closing = frames.closing_result(1)
    assert closing == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"resultType": "complete", "_meta": {SUB_ID: 1}},
    }
    check_modern_answer(SPEC, "subscriptions/listen", closing)
    SPEC.validate(MODERN, "SubscriptionsListenResultResponse", closing)


def test_overflow_error_names_the_reason_and_the_bound() -> None:
    error = frames.overflow_error("L", 8)
    assert error["id"] == "L"
    assert error["error"]["code"] == -32603
    assert "8 notifications behind" in error["error"]["message"]
    assert error["error"]["data"] == {
        "reason": "listener_queue_overflow",
        "queueBound": 8,
        SUB_ID: "L",
    }
    check_modern_error(SPEC, error)
    check_modern_error(SPEC, frames.upstream_lost_error(3, "gone"))


# ---------------------------------------------------------------------------
# refcount
# ---------------------------------------------------------------------------


def test_refcount_subscribes_first_and_unsubscribes_last() -> None:
    counts = UriRefcount()
    assert counts.add(["a", "b"]) == ["a", "b"]
    assert counts.add(["a"]) == []
    assert counts.add(["b", "c", "c"]) == ["c"]
    assert counts.count("a") == 2 and counts.count("b") == 2 and counts.count("c") == 1
    assert counts.remove(["a"]) == []
    assert counts.remove(["a", "b"]) == ["a"]
    assert counts.remove(["b", "c"]) == ["b", "c"]
    assert len(counts) == 0 and counts.uris() == []


def test_refcount_ignores_what_it_never_counted() -> None:
    counts = UriRefcount()
    counts.add(["a"])
    assert counts.remove(["zzz"]) == []
    assert counts.remove(["a"]) == ["a"]
    assert counts.remove(["a"]) == []
    assert counts.count("a") == 0


def test_refcount_lists_wanted_uris_in_first_wanted_order() -> None:
    counts = UriRefcount()
    counts.add(["x", "y"])
    counts.add(["z", "x"])
    assert counts.uris() == ["x", "y", "z"]


# ---------------------------------------------------------------------------
# mailbox
# ---------------------------------------------------------------------------


async def test_mailbox_delivers_in_order_then_times_out() -> None:
    box = Mailbox(4)
    assert box.offer({"n": 1}) and box.offer({"n": 2})
    assert await box.get(0.01) == {"n": 1}
    assert await box.get(0.01) == {"n": 2}
    assert await box.get(0.01) is None  # quiet: time for a keep-alive


async def test_mailbox_wakes_a_waiting_reader() -> None:
    box = Mailbox(4)
    reader = asyncio.create_task(box.get(5))
    # Waiting: asyncio.Event keeps its waiters' futures in `_waiters`.
    await until(lambda: box._wake._waiters, what="the reader waiting")  # type: ignore[attr-defined]
    box.offer({"n": 1})
    assert await asyncio.wait_for(reader, 1) == {"n": 1}


async def test_mailbox_overflow_drops_the_queue_and_ends() -> None:
    box = Mailbox(2)
    assert box.offer({"n": 1}) and box.offer({"n": 2})
    assert box.offer({"n": 3}) is False
    assert box.end is End.OVERFLOW
    assert len(box) == 0
    assert box.offer({"n": 4}) is False  # stays closed
    assert await box.get(0.01) is End.OVERFLOW


async def test_mailbox_shutdown_delivers_what_is_queued_first() -> None:
    box = Mailbox(4)
    box.offer({"n": 1})
    box.close(End.SHUTDOWN)
    box.close(End.OVERFLOW)  # the first reason wins
    assert box.offer({"n": 2}) is True  # accepted and ignored: the stream is ending
    assert await box.get(0.01) == {"n": 1}
    assert await box.get(0.01) is End.SHUTDOWN


def test_mailbox_needs_room() -> None:
    with pytest.raises(ValueError):
        Mailbox(0)
