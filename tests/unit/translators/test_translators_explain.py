"""What `mcp-shim probe` says the gateway translates, as the translators derive
it from the versions' features: golden tables, whole lists."""

from __future__ import annotations

from typing import Any

import pytest

from translators import explain, v2024_11_05
from translators.registry import Version, get_version


def v(name: str) -> Version:
    version = get_version(name)
    assert version is not None, name
    return version


SESSIONS = (
    "sessions",
    "initialize and the session are held by the gateway: sessions pooled per client "
    "capabilities, protocol version and credentials; each request's _meta picks its session",
)
DISCOVER = ("discover", "server/discover synthesised from initialize")
RESULT_TYPE = ("resultType", "resultType added to every result")
CACHE = (
    "cache",
    "ttlMs/cacheScope added to prompts/list, resources/list, resources/read, "
    "resources/templates/list, server/discover, tools/list",
)
RENUMBERED = ("errorCodes", "error codes renumbered: -32002 -> -32602 (resource not found)")
INPUT_RESULTS = "become input_required results of prompts/get, resources/read, tools/call"
NO_LISTEN = (
    "listen",
    "subscriptions/listen served from the session's notifications (the server declares none)",
)
FULL_CAPS: dict[str, Any] = {
    "logging": {},
    "tools": {"listChanged": True},
    "prompts": {"listChanged": False},
    "resources": {"subscribe": True, "listChanged": True},
}

# (upstream version, its capabilities, every item in order)
ROWS: list[tuple[str, dict[str, Any], list[tuple[str, str]]]] = [
    (
        "2024-11-05",
        {},
        [
            SESSIONS,
            DISCOVER,
            NO_LISTEN,
            RESULT_TYPE,
            CACHE,
            RENUMBERED,
            (
                "inputRequired",
                f"server requests (roots/list, sampling/createMessage) {INPUT_RESULTS}",
            ),
            ("serverRequests", "answered by the gateway itself: ping"),
            (
                "unavailable",
                "requests of 2024-11-05 that 2026-07-28 clients cannot send: ping, "
                "resources/subscribe, resources/unsubscribe",
            ),
            (
                "messages",
                "messages translated step by step: 2024-11-05 -> 2025-03-26 -> 2025-06-18 -> "
                "2025-11-25 -> DRAFT-2026-v1 -> 2026-07-28",
            ),
        ],
    ),
    (
        "2025-11-25",
        FULL_CAPS,
        [
            SESSIONS,
            DISCOVER,
            (
                "listen",
                "subscriptions/listen served from the session's notifications "
                "(tools.listChanged, resources.listChanged, resources.subscribe)",
            ),
            RESULT_TYPE,
            CACHE,
            RENUMBERED,
            (
                "inputRequired",
                "server requests (elicitation/create, roots/list, sampling/createMessage) "
                + INPUT_RESULTS,
            ),
            (
                "serverRequests",
                "answered by the gateway itself: ping, tasks/cancel, tasks/get, tasks/list, "
                "tasks/result",
            ),
            (
                "logLevel",
                "the per-request logLevel replaces logging/setLevel: log notifications are "
                "filtered by the gateway for each call",
            ),
            (
                "unavailable",
                "requests of 2025-11-25 that 2026-07-28 clients cannot send: ping, "
                "resources/subscribe, resources/unsubscribe, tasks/cancel, tasks/get, "
                "tasks/list, tasks/result",
            ),
            (
                "droppedNotifications",
                "notifications dropped: notifications/elicitation/complete, "
                "notifications/tasks/status",
            ),
            (
                "messages",
                "messages translated step by step: 2025-11-25 -> DRAFT-2026-v1 -> 2026-07-28",
            ),
        ],
    ),
    ("2026-07-28", FULL_CAPS, [("messages", "messages translated step by step: 2026-07-28")]),
]


@pytest.mark.parametrize(
    ("upstream", "capabilities", "expected"), ROWS, ids=[f"{r[0]}-{len(r[1])}" for r in ROWS]
)
def test_translations(
    upstream: str, capabilities: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    items = explain.translations(v(upstream), capabilities)
    assert [(item["id"], item["description"]) for item in items] == expected


def test_pass_through() -> None:
    assert explain.pass_through() == [
        {
            "id": "passThrough",
            "description": "2026-07-28 requests passed through unchanged (body, _meta, "
            "requestState, inputResponses) and answers streamed back as they come: "
            "nothing translated",
        }
    ]


LISTENABLE: list[tuple[dict[str, Any], list[str]]] = [
    ({}, []),
    (FULL_CAPS, ["tools.listChanged", "resources.listChanged", "resources.subscribe"]),
    (
        {"prompts": {"listChanged": True}, "resources": {"subscribe": True}},
        [
            "prompts.listChanged",
            "resources.subscribe",
        ],
    ),
    ({"tools": {"listChanged": "true"}, "resources": True}, []),
]


@pytest.mark.parametrize(("capabilities", "expected"), LISTENABLE)
def test_listenable(capabilities: dict[str, Any], expected: list[str]) -> None:
    assert explain.listenable(capabilities) == expected


@pytest.mark.parametrize(
    ("meaning", "version", "expected"),
    [
        ("RESOURCE_NOT_FOUND", "2024-11-05", -32002),
        ("RESOURCE_NOT_FOUND", "2026-07-28", -32602),
        ("HEADER_MISMATCH", "2026-07-28", -32020),
        ("HEADER_MISMATCH", "2025-11-25", -32600),
        ("NO_SUCH_MEANING", "2026-07-28", None),
    ],
)
def test_error_number(meaning: str, version: str, expected: int | None) -> None:
    assert explain.error_number(meaning, v(version)) == expected


def test_list_methods() -> None:
    assert {m: (x.capability, x.member, x.changed) for m, x in v2024_11_05.LISTS.items()} == {
        "tools/list": ("tools", "tools", "notifications/tools/list_changed"),
        "prompts/list": ("prompts", "prompts", "notifications/prompts/list_changed"),
        "resources/list": ("resources", "resources", "notifications/resources/list_changed"),
        "resources/templates/list": (
            "resources",
            "resourceTemplates",
            "notifications/resources/list_changed",
        ),
    }
