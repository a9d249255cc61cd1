"""JSON on the hot path: orjson, parsed once per message."""

from __future__ import annotations

import re
from typing import Any

import orjson

JSONDecodeError = orjson.JSONDecodeError


def loads(data: bytes | bytearray | str) -> Any:
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


# A string (escapes included) or one structural character: enough to follow the
# top level of a body without parsing the rest.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\],:]')
# How much of a refused body is scanned for its id: an id past this much of
# nested brackets is taken as unreadable (the scan must stay cheap to refuse).
ID_SCAN_BYTES = 64 * 1024


def is_depth_error(exc: orjson.JSONDecodeError) -> bool:
    """The parser gave up for nesting (past 1,024 levels), not for bad syntax."""
    return str(exc).startswith("depth limit exceeded")


def top_level_id(body: bytes) -> str | int | None:
    """The top-level `"id"` of a body the parser refused for its depth, so the
    refusal can echo it (2026-07-28 basic/index "Error Responses": the id is
    omitted only when it could not be read). None when absent, not a string or
    integer, or not within the first ID_SCAN_BYTES."""
    head = body[:ID_SCAN_BYTES]
    depth = 0
    key: bytes | None = None
    for match in _TOKEN.finditer(head):
        token = match.group()
        if token in (b"{", b"["):
            depth += 1
        elif token in (b"}", b"]"):
            depth -= 1
        elif token == b":" and depth == 1 and key == b'"id"':
            return _scalar_after(head, match.end())
        elif depth == 1:
            key = token if token.startswith(b'"') else None
            continue
        key = None
    return None


def _scalar_after(head: bytes, start: int) -> str | int | None:
    rest = head[start:].lstrip()
    end = re.match(rb'"(?:[^"\\]|\\.)*"|-?[0-9]+(?![.eE0-9])', rest)
    if end is None:
        return None
    try:
        value = orjson.loads(end.group())
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None
