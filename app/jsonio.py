"""JSON on the hot path: orjson, parsed once per message."""

from __future__ import annotations

from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def dumps_sorted(obj: Any) -> bytes:
    """Canonical form for keys and digests: key order must not matter."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
