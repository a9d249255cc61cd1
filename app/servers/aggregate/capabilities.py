"""The aggregate's `server/discover` result: the union of its members'.

A capability any member has, the aggregate has: objects are merged member by
member, a flag is true when any member's is (`listChanged`, `subscribe`), and
any other value is the first member's in the servers file's order. The
instructions are each member's, under its name and the prefix its tools and
prompts carry. Members that did not answer are left out, and come back in
when they do: the aggregator asks again. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def union(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """Two capabilities objects merged (new objects; the inputs are kept)."""
    out: dict[str, Any] = dict(first)
    for key, value in second.items():
        mine = out.get(key)
        if key not in out:
            out[key] = value
        elif isinstance(mine, Mapping) and isinstance(value, Mapping):
            out[key] = union(mine, value)
        elif isinstance(mine, bool) and isinstance(value, bool):
            out[key] = mine or value
    return out


def capabilities(discovered: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The union of the members' `capabilities` (in the servers file's order)."""
    out: dict[str, Any] = {}
    for _member, result in discovered:
        caps = result.get("capabilities")
        if isinstance(caps, Mapping):
            out = union(out, caps)
    return out


def instructions(discovered: Sequence[tuple[str, Mapping[str, Any]]], separator: str) -> str | None:
    """Each member's instructions under a heading naming it and its prefix."""
    parts = [
        f"## {member} (tools and prompts named `{member}{separator}...`)\n\n{text}"
        for member, result in discovered
        if isinstance(text := result.get("instructions"), str) and text.strip()
    ]
    return "\n\n".join(parts) if parts else None


def discover_result(
    discovered: Sequence[tuple[str, Mapping[str, Any]]],
    versions: Sequence[str],
    server_info: Mapping[str, Any],
    separator: str,
) -> dict[str, Any]:
    """The aggregate's DiscoverResult (2026-07-28 server/discover)."""
    result: dict[str, Any] = {
        "supportedVersions": list(versions),
        "capabilities": capabilities(discovered),
        "serverInfo": dict(server_info),
    }
    text = instructions(discovered, separator)
    if text is not None:
        result["instructions"] = text
    return result
