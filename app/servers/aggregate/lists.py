"""Merged lists: every member's items in one list, renamed for the aggregate,
paged with the gateway's own cursor.

A first page (no cursor) reads each member's whole list (its own pages
followed, a bounded number), all members at once and each within the list
bound (`MCP_SHIM_AGGREGATE_LIST_TIMEOUT_S`); a member that is down, hung or
refusing is left out of that answer, never holding up the others. The merged
list is in the servers file's order, each member's items in its own order,
and is answered `PAGE_ITEMS` at a time: the cursor (app/servers/aggregate/
sealed.py) names the list and the offset of the next page, so any replica
can serve it; the next page reads the lists again and continues at that
offset. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.servers.aggregate import names
from app.servers.aggregate.uris import Owners

# Items of one aggregate page: a whole list of a few servers' tools fits, so
# most clients never page.
PAGE_ITEMS: Final = 1000
# Pages of one member's list followed for one merged list, and items kept of
# it: bounds on what a member can make the gateway hold.
MAX_MEMBER_PAGES: Final = 50
MAX_MEMBER_ITEMS: Final = 10000


@dataclass(frozen=True, slots=True)
class Kind:
    """One list method: its result's array and the field that names an item."""

    method: str
    array: str
    key: str
    by_uri: bool  # renamed by URI ownership (resources) rather than by prefix


KINDS: Final[Mapping[str, Kind]] = {
    "tools/list": Kind("tools/list", "tools", "name", by_uri=False),
    "prompts/list": Kind("prompts/list", "prompts", "name", by_uri=False),
    "resources/list": Kind("resources/list", "resources", "uri", by_uri=True),
    "resources/templates/list": Kind(
        "resources/templates/list", "resourceTemplates", "uriTemplate", by_uri=True
    ),
}
# A list's `listChanged` notification (2026-07-28 subscriptions/listen).
CHANGED: Final[Mapping[str, str]] = {
    "tools/list": "notifications/tools/list_changed",
    "prompts/list": "notifications/prompts/list_changed",
    "resources/list": "notifications/resources/list_changed",
    "resources/templates/list": "notifications/resources/list_changed",
}


def page_items(result: Any, kind: Kind) -> tuple[list[dict[str, Any]], str | None] | None:
    """A member's page: its items that name themselves, and its next cursor;
    None: not a list result of `kind`."""
    if not isinstance(result, dict):
        return None
    items = result.get(kind.array)
    if not isinstance(items, list):
        return None
    kept = [i for i in items if isinstance(i, dict) and isinstance(i.get(kind.key), str)]
    cursor = result.get("nextCursor")
    return kept, cursor if isinstance(cursor, str) and cursor else None


def keys(items: Sequence[Mapping[str, Any]], kind: Kind) -> list[str]:
    return [str(i[kind.key]) for i in items]


def rename(
    item: Mapping[str, Any], kind: Kind, member: str, separator: str, owners: Owners
) -> dict[str, Any]:
    """One member's item as the aggregate lists it (a copy; the input is kept)."""
    out = dict(item)
    own = str(item[kind.key])
    if kind.by_uri:
        out[kind.key] = owners.outward(member, own)
    else:
        out[kind.key] = names.prefixed(member, own, separator)
    return out


def merge(
    kind: Kind,
    fetched: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    separator: str,
    owners: Owners,
) -> list[dict[str, Any]]:
    """The members' items (in `fetched`'s order: the servers file's) renamed."""
    return [
        rename(item, kind, member, separator, owners) for member, items in fetched for item in items
    ]


def page(
    items: Sequence[dict[str, Any]], offset: int, size: int = PAGE_ITEMS
) -> tuple[list[dict[str, Any]], int | None]:
    """The page at `offset`, and the next page's offset (None: the last)."""
    end = offset + size
    return list(items[offset:end]), end if end < len(items) else None
