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


# orjson parses up to 1,024 levels but serialises only about 254: a message
# nested deeper than this default is refused at the front (MCP_SHIM_MAX_JSON_DEPTH),
# well below what every path that re-serialises it (digests, translation,
# forwarding, the answer) can handle, envelope included.
DEFAULT_MAX_DEPTH = 64
# What the setting may be raised to: orjson's serialiser stops near 254 levels,
# and the gateway wraps a message in a few levels of its own.
MAX_DEPTH_CEILING = 200


def deeper_than(body: bytes, obj: Any, limit: int) -> bool:
    """Whether `obj` (parsed from `body`) nests containers more than `limit` deep.

    Cheap on the hot path: a body with at most `limit` opening brackets cannot
    be deeper (bytes.count runs in C); only other bodies are walked, iteratively
    (no recursion limit), stopping at the first container past the limit.
    """
    if body.count(b"{") + body.count(b"[") <= limit:
        return False
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))
    return False
