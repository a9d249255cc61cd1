"""Each revision's ClientCapabilities shape, as the translators fold it from the
deltas, and the two readings of it the gateway uses: which members must be
objects (the fronts' checks) and the canonical form (the upstream pool's key)."""

from __future__ import annotations

from typing import Any

import pytest

from translators.capabilities import canonical_client_capabilities, client_capability_objects
from translators.registry import Version, get_version


def v(name: str) -> Version:
    version = get_version(name)
    assert version is not None, name
    return version


_UP_TO_2025_03_26: dict[str, tuple[str, ...] | None] = {
    "experimental": None,
    "roots": (),
    "sampling": (),
}
_STATELESS: dict[str, tuple[str, ...] | None] = {
    "elicitation": ("form", "url"),
    "roots": (),
    "sampling": ("context", "tools"),
    "experimental": None,
    "extensions": None,
}

# Written from each revision's schema.json ClientCapabilities.
OBJECTS: list[tuple[str, dict[str, tuple[str, ...] | None]]] = [
    ("2024-11-05", _UP_TO_2025_03_26),
    ("2025-03-26", _UP_TO_2025_03_26),
    ("2025-06-18", {**_UP_TO_2025_03_26, "elicitation": ()}),
    (
        "2025-11-25",
        {
            "experimental": None,
            "roots": (),
            "sampling": ("context", "tools"),
            "elicitation": ("form", "url"),
            "tasks": ("cancel", "list", "requests"),
        },
    ),
    ("DRAFT-2026-v1", _STATELESS),
    ("2026-07-28", _STATELESS),
]


@pytest.mark.parametrize(("name", "expected"), OBJECTS, ids=[row[0] for row in OBJECTS])
def test_client_capability_objects(name: str, expected: dict[str, Any]) -> None:
    assert dict(client_capability_objects(v(name))) == expected


_FULL: dict[str, Any] = {
    "experimental": {"x": {}},
    "extensions": {"io.example/ext": {}},
    "roots": {"listChanged": True, "other": 1},
    "sampling": {"context": {"a": 1}, "tools": {}, "other": {}},
    "elicitation": {"form": {"a": 1}, "url": {}},
    "tasks": {
        "cancel": {},
        "list": {"a": 1},
        "requests": {"sampling": {"createMessage": {"a": 1}}, "other": {}},
        "other": {},
    },
    "unknown": {},
}

# (version, capabilities, canonical form)
CANONICAL: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("2024-11-05", _FULL, {"roots": {"listChanged": True}, "sampling": {}}),
    ("2025-03-26", _FULL, {"roots": {"listChanged": True}, "sampling": {}}),
    ("2025-06-18", _FULL, {"roots": {"listChanged": True}, "sampling": {}, "elicitation": {}}),
    (
        "2025-11-25",
        _FULL,
        {
            "roots": {"listChanged": True},
            "sampling": {"context": {}, "tools": {}},
            "elicitation": {"form": {}, "url": {}},
            "tasks": {"cancel": {}, "list": {}, "requests": {"sampling": {"createMessage": {}}}},
        },
    ),
    # A false or non-boolean flag is absent; a member that is no object is dropped.
    ("2025-11-25", {"roots": {"listChanged": False}, "sampling": True}, {"roots": {}}),
    ("2025-11-25", {"roots": {"listChanged": "yes"}}, {"roots": {}}),
    ("2025-11-25", {}, {}),
    # A version after the legacy era reads as the newest legacy one.
    ("2026-07-28", {"tasks": {"list": {}}, "extensions": {}}, {"tasks": {"list": {}}}),
]


@pytest.mark.parametrize(
    ("name", "capabilities", "expected"),
    CANONICAL,
    ids=[f"{row[0]}-{i}" for i, row in enumerate(CANONICAL)],
)
def test_canonical_client_capabilities(
    name: str, capabilities: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert canonical_client_capabilities(capabilities, v(name)) == expected
