"""Client capabilities as a legacy upstream's revision defines them, canonical.

The pool keys sessions by the capabilities sent at `initialize`. Keyed by
whatever a client declared, one anonymous client could open a session per
made-up capability and fill the pool. Reduced to the members the upstream's
revision defines (its schema.json `ClientCapabilities`), with every open
object emptied and `experimental` dropped (the gateway implements no
experimental capability on a client's behalf), the key space is small and
finite: what the upstream sees is exactly what can change its behaviour.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from translators.registry import Version

# A shape: the members kept, each a nested shape; an empty shape is an open
# object (`JSONObject`, `additionalProperties: true`), canonically `{}`.
# BOOL marks a boolean member, kept only when true (absent means false).
BOOL: Final = "bool"
Shape = Mapping[str, "Shape | str"]

_ROOTS: Final[Shape] = {"listChanged": BOOL}
_SHAPES: Final[dict[str, Shape]] = {
    "2024-11-05": {"roots": _ROOTS, "sampling": {}},
    "2025-03-26": {"roots": _ROOTS, "sampling": {}},
    "2025-06-18": {"roots": _ROOTS, "sampling": {}, "elicitation": {}},
    "2025-11-25": {
        "roots": _ROOTS,
        "sampling": {"context": {}, "tools": {}},
        "elicitation": {"form": {}, "url": {}},
        "tasks": {
            "cancel": {},
            "list": {},
            "requests": {
                "elicitation": {"create": {}},
                "sampling": {"createMessage": {}},
            },
        },
    },
}
_NEWEST: Final = "2025-11-25"


def _reduce(value: Mapping[str, Any], shape: Shape) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, member in shape.items():
        if name not in value:
            continue
        got = value[name]
        if member == BOOL:
            if got is True:
                out[name] = True
        elif isinstance(member, Mapping) and isinstance(got, Mapping):
            out[name] = _reduce(got, member)
    return out


def canonical(capabilities: Mapping[str, Any], version: Version) -> dict[str, Any]:
    """`capabilities` (already in `version`'s form) cut to what `version` defines."""
    return _reduce(capabilities, _SHAPES.get(version.name, _SHAPES[_NEWEST]))
