"""JSON on the hot path: orjson, parsed once per message."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import orjson

from app import splice

JSONDecodeError = orjson.JSONDecodeError


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    return orjson.loads(data)


def dumps(obj: Any) -> bytes:
    # A large answer's strings still in its bytes (app/splice.py) are written
    # out whole here; the answer writer sends them as pieces (splice.dumps_chunks).
    return splice.dumps(obj)


def dumps_parsed(obj: Any) -> bytes:
    """A message parsed from a client's bytes by `loads` (no answer's strings
    spliced in), serialised again: orjson alone."""
    return orjson.dumps(obj)


def dumps_sorted(obj: Any) -> bytes:
    """Canonical form for keys and digests: key order must not matter."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


# orjson parses up to 1,024 levels but serialises only about 254: a message
# nested deeper than this default is refused at the front (MCP_SHIM_MAX_JSON_DEPTH),
# well below what every path that re-serialises it (digests, translation,
# forwarding, the answer) can handle, envelope included. What the setting may
# be raised to: app/config.py `MAX_JSON_DEPTH_CEILING`.
DEFAULT_MAX_DEPTH = 64


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


# One token of a body the parser refused for its depth: a string (escapes left
# to the parser), a number, a literal, or a structural character; whitespace before.
_DEEP_TOKEN = re.compile(
    rb'[ \t\n\r]*(?:("(?:[^"\\]|\\.)*")|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)'
    rb"|(true|false|null)|([{}\[\],:]))"
)
_END = re.compile(rb"[ \t\n\r]*")
# How much of a body past the parser's depth is read for its syntax and id: the
# walk is in Python, so it stays cheap; a longer body is refused as too deep,
# its id unread (the spec lets an error omit an id that could not be read).
ID_SCAN_BYTES = 64 * 1024


def is_depth_error(exc: orjson.JSONDecodeError) -> bool:
    """The parser gave up for nesting (past 1,024 levels), not for bad syntax."""
    return str(exc).startswith("depth limit exceeded")


class DeepBody(NamedTuple):
    """A body the parser refused for its depth, read without a depth limit."""

    json_text: bool  # False: not JSON text after all (a parse error, no id)
    id: str | int | None  # the top-level id, if a string or an integer


def read_deep(body: bytes) -> DeepBody:
    """Whether a body the parser refused for its depth is JSON text, and its
    top-level `"id"` (2026-07-28 basic/index "Error Responses": the id is omitted
    only when it could not be read). An iterative walk of the grammar; the
    scalars are checked by the parser itself (UTF-8, escapes, finite numbers),
    in one flat array. Over ID_SCAN_BYTES: taken as JSON text, its id unread."""
    if len(body) > ID_SCAN_BYTES:
        return DeepBody(True, None)
    walk = _walk_grammar(body)
    if walk is None:
        return DeepBody(False, None)
    scalars, rid = walk
    try:
        orjson.loads(b"[" + b",".join(scalars) + b"]")
    except orjson.JSONDecodeError:
        return DeepBody(False, None)
    if rid is None:
        return DeepBody(True, None)
    value = orjson.loads(rid)
    ok = isinstance(value, str | int) and not isinstance(value, bool)
    return DeepBody(True, value if ok else None)


# What the walk expects next.
_VALUE, _VALUE_OR_CLOSE, _KEY, _KEY_OR_CLOSE, _COLON, _AFTER = range(6)


def _walk_grammar(body: bytes) -> tuple[list[bytes], bytes | None] | None:
    """The strings and numbers of a body whose structure is JSON's, and the
    (last, as the parser keeps) top-level id's raw value; None: not JSON."""
    stack = bytearray()  # the open containers, b"{" or b"["
    scalars: list[bytes] = []
    rid: bytes | None = None
    id_next = False  # the value about to come is the top-level "id"'s
    expect, pos = _VALUE, 0
    while (match := _DEEP_TOKEN.match(body, pos)) is not None:
        pos = match.end()
        string, number, literal, mark = match.groups()
        scalar = string or number or literal
        if expect in (_KEY, _KEY_OR_CLOSE) and string is not None:
            scalars.append(string)
            id_next = len(stack) == 1 and string == b'"id"'
            expect = _COLON
        elif expect == _COLON and mark == b":":
            expect = _VALUE
        elif expect in (_VALUE, _VALUE_OR_CLOSE) and scalar is not None:
            if string or number:
                scalars.append(scalar)
            rid = scalar if id_next else rid
            id_next, expect = False, _AFTER
        elif expect in (_VALUE, _VALUE_OR_CLOSE) and mark in (b"{", b"["):
            rid = None if id_next else rid
            id_next = False
            stack += mark
            expect = _KEY_OR_CLOSE if mark == b"{" else _VALUE_OR_CLOSE
        elif mark in (b"}", b"]") and (expect in (_AFTER, _KEY_OR_CLOSE, _VALUE_OR_CLOSE)):
            if not stack.endswith(b"{" if mark == b"}" else b"["):
                return None
            del stack[-1]
            expect = _AFTER
        elif expect == _AFTER and mark == b"," and stack:
            expect = _KEY if stack.endswith(b"{") else _VALUE
        else:
            return None
    if stack or expect != _AFTER or _END.fullmatch(body, pos) is None:
        return None
    return scalars, rid
