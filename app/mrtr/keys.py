"""The keys of one call's `inputRequests` map.

2026-07-28 basic/patterns/mrtr: keys are server-assigned and MUST be unique
within the scope of the request. A legacy request carries no key, so the
gateway makes one up, stable (the same arrival order gives the same keys),
readable (named after what is asked) and unique across every round of the
call. Where the legacy request names its key itself, in
``params._meta["io.modelcontextprotocol/inputKey"]`` (the convention of this
project's fixture server, documented in docs/mrtr.md), that name is used.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

# The legacy request's _meta key naming its inputRequests key.
INPUT_KEY_META: Final = "io.modelcontextprotocol/inputKey"

_NAME_OK = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_STEMS: Final = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


def named_key(params: Any) -> str | None:
    """The key a legacy request names for itself, if it is a usable one."""
    if not isinstance(params, Mapping):
        return None
    meta = params.get("_meta")
    if not isinstance(meta, Mapping):
        return None
    name = meta.get(INPUT_KEY_META)
    return name if isinstance(name, str) and _NAME_OK.match(name) else None


def without_key_meta(params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` without the key convention in `_meta` (and without an emptied `_meta`)."""
    out = dict(params)
    meta = out.get("_meta")
    if isinstance(meta, Mapping) and INPUT_KEY_META in meta:
        rest = {k: v for k, v in meta.items() if k != INPUT_KEY_META}
        if rest:
            out["_meta"] = rest
        else:
            del out["_meta"]
    return out


def _stem(method: str, params: Any) -> str:
    if (
        method == "elicitation/create"
        and isinstance(params, Mapping)
        and params.get("mode") == "url"
    ):
        return "url_elicitation"
    return _STEMS.get(method, "input")


class KeyAssigner:
    """Hands out the keys of one call, in arrival order, across all its rounds."""

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._counts: Counter[str] = Counter()

    def assign(self, method: str, params: Any) -> str:
        named = named_key(params)
        if named is not None:
            key, n = named, 1
            while key in self._used:
                n += 1
                key = f"{named}_{n}"
        else:
            stem = _stem(method, params)
            while True:
                self._counts[stem] += 1
                key = f"{stem}_{self._counts[stem]}"
                if key not in self._used:
                    break
        self._used.add(key)
        return key
