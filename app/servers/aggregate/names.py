"""Tool and prompt names in the aggregate: `SERVER<sep>name`.

A member's tool `echo` is listed as `files__echo` (separator
`MCP_SHIM_AGGREGATE_SEPARATOR`, `__` by default) and a call of `files__echo`
goes to member `files` as `echo`. The split is at the first separator, so a
member's own names may hold the separator and a member's name may not. The
same prefixed name is what a 2026-07-28 client mirrors in `Mcp-Name`. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

# 2025-11-25 server/tools "Tool Names": 1 to 128 characters of this set. The
# gateway checks members' names and the separator against it, so that every
# prefixed name of a conforming tool is a conforming name too, when short enough.
NAME_CHARS: Final = re.compile(r"^[A-Za-z0-9_.-]+$")
MAX_NAME_CHARS: Final = 128


def prefixed(member: str, name: str, separator: str) -> str:
    return f"{member}{separator}{name}"


def split(
    name: object, members: Mapping[str, object] | frozenset[str], separator: str
) -> tuple[str, str] | None:
    """(member, the member's own name) of an aggregate name, or None: no
    separator, or no member by that prefix."""
    if not isinstance(name, str):
        return None
    member, sep, rest = name.partition(separator)
    if not sep or not rest or member not in members:
        return None
    return member, rest


def separator_problem(separator: str) -> str | None:
    """What is wrong with a separator, said so a person can fix it; None: fine."""
    if not separator:
        return "the aggregate separator is empty; use e.g. `__`"
    if not NAME_CHARS.match(separator):
        return (
            f"the aggregate separator {separator!r} has characters a tool name may not "
            "hold; use letters, digits, `_`, `-` or `.` (e.g. `__`)"
        )
    return None


def member_problems(members: Iterable[str], separator: str) -> list[str]:
    """Each member name that cannot prefix names: it holds the separator (a split
    would be ambiguous) or characters a tool name may not hold."""
    problems: list[str] = []
    for member in members:
        if separator and separator in member:
            problems.append(
                f"server {member!r} holds the aggregate separator {separator!r}: rename it, "
                "choose another separator, or leave it out of the aggregate "
                '("mcpShim": {"aggregate": false})'
            )
        elif not NAME_CHARS.match(member):
            problems.append(
                f"server {member!r} has characters a tool name may not hold; use letters, "
                'digits, `_`, `-` or `.`, or leave it out of the aggregate ("mcpShim": '
                '{"aggregate": false})'
            )
    return problems


def too_long(name: str) -> bool:
    """A prefixed name over the spec's length: still listed (the limit is a
    SHOULD), and counted in the aggregator's `aggregate_names_too_long` line."""
    return len(name) > MAX_NAME_CHARS
