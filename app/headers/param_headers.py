"""`Mcp-Param-*` checks against a tool's `x-mcp-header` annotations.

2026-07-28 streamable-http "Server Behavior for Custom Headers": a server that
processes the body MUST check that every annotated argument present in the
body arrives in its header with the same value, and reject with -32020.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.headers.header_values import BadHeaderValue, values_match
from app.quoting import quoted
from app.rejections import HEADER_MISMATCH, Rejection

_MISSING = object()

HeaderPaths = tuple[tuple[str, tuple[str, ...]], ...]


def annotated_paths(input_schema: Any) -> HeaderPaths:
    """(lower-cased header name, property path) of each `x-mcp-header` under `properties`."""
    found: list[tuple[str, tuple[str, ...]]] = []

    def walk(schema: Any, path: tuple[str, ...]) -> None:
        if not isinstance(schema, dict):
            return
        props = schema.get("properties")
        if not isinstance(props, dict):
            return
        for key, sub in props.items():
            if not isinstance(sub, dict):
                continue
            name = sub.get("x-mcp-header")
            if isinstance(name, str) and name:
                found.append((name.lower(), (*path, key)))
            walk(sub, (*path, key))

    walk(input_schema, ())
    return tuple(found)


def _value_at(arguments: Any, path: tuple[str, ...]) -> Any:
    current = arguments
    for key in path:
        if not isinstance(current, dict) or key not in current:
            return _MISSING
        current = current[key]
    return current


def check(paths: HeaderPaths, arguments: Any, headers: Mapping[str, str]) -> Rejection | None:
    for name, path in paths:
        value = _value_at(arguments, path)
        raw = headers.get(name)
        if value is _MISSING or value is None:
            # "Parameter value is null / not in arguments: server MUST NOT expect the header".
            continue
        if raw is None:
            return Rejection(
                HEADER_MISMATCH,
                f"Header mismatch: Mcp-Param-{name} header is missing for argument "
                f"{quoted('.'.join(path))}",
            )
        try:
            same = values_match(raw, value)
        except BadHeaderValue as exc:
            return Rejection(HEADER_MISMATCH, f"Header mismatch: Mcp-Param-{name}: {exc}")
        if not same:
            return Rejection(
                HEADER_MISMATCH,
                f"Header mismatch: Mcp-Param-{name} header does not match argument "
                f"{quoted('.'.join(path))}",
            )
    return None
