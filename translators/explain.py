"""What the gateway does between a client of one version and an upstream of
another, in words: `mcp-shim probe`'s "what the gateway translates" list.

Derived from the two versions' features, so a new revision's delta changes the
list without touching the probe. Each item is an ``{"id", "description"}``.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from translators import v2026_draft
from translators.registry import LATEST_MODERN, Version, error_fallback, known_versions

Item = dict[str, str]


def error_number(meaning: str, version: Version) -> int | None:
    """The code `version` uses for `meaning`, following the registry's fallbacks."""
    seen: set[str] = set()
    current: str | None = meaning
    while current is not None and current not in seen:
        number = version.features.error_codes.get(current)
        if number is not None:
            return number
        seen.add(current)
        current = error_fallback(current)
    return None


def listenable(capabilities: Mapping[str, Any]) -> list[str]:
    """The server capability flags (`tools.listChanged`, ...) a subscriptions/listen
    stream can be served from: those the upstream declares `true`."""
    found = []
    for capability, key in v2026_draft.SUBSCRIPTION_CAPABILITY_FLAGS:
        section = capabilities.get(capability)
        if isinstance(section, Mapping) and section.get(key) is True:
            found.append(f"{capability}.{key}")
    return found


def chain(start: Version, end: Version) -> list[Version]:
    """The versions a message passes through from `start` to `end`, both included."""
    return [v for v in known_versions() if start.index <= v.index <= end.index]


def translations(
    upstream: Version, capabilities: Mapping[str, Any], modern: Version = LATEST_MODERN
) -> list[Item]:
    """What the gateway does between a client of `modern` and an upstream of
    `upstream` that declared `capabilities`."""
    up, to = upstream.features, modern.features
    out: list[Item] = []

    def add(ident: str, description: str) -> None:
        out.append({"id": ident, "description": description})

    if up.sessions and not to.sessions:
        add(
            "sessions",
            "initialize and the session are held by the gateway: sessions pooled per "
            "client capabilities, protocol version and credentials; each request's _meta "
            "picks its session",
        )
    new_requests = to.client_requests - up.client_requests
    if "server/discover" in new_requests:
        add("discover", "server/discover synthesised from initialize")
    if "subscriptions/listen" in new_requests:
        flags = listenable(capabilities)
        add(
            "listen",
            "subscriptions/listen served from the session's notifications"
            + (f" ({', '.join(flags)})" if flags else " (the server declares none)"),
        )
    if to.result_type and not up.result_type:
        add("resultType", "resultType added to every result")
    cacheable = sorted(to.cacheable_methods - up.cacheable_methods)
    if cacheable:
        add("cache", f"ttlMs/cacheScope added to {', '.join(cacheable)}")
    renumbered = []
    for meaning, number in sorted(up.error_codes.items()):
        modern_number = error_number(meaning, modern)
        if modern_number is not None and modern_number != number:
            renumbered.append(f"{number} -> {modern_number} ({meaning.lower().replace('_', ' ')})")
    if renumbered:
        add("errorCodes", "error codes renumbered: " + ", ".join(renumbered))
    if up.server_initiated_requests and not to.server_initiated_requests:
        asked = sorted(up.server_requests & to.server_requests)
        if asked:
            add(
                "inputRequired",
                f"server requests ({', '.join(asked)}) become input_required results of "
                f"{', '.join(sorted(to.mrtr_methods))}",
            )
        answered = sorted(up.server_requests - to.server_requests)
        if answered:
            add("serverRequests", f"answered by the gateway itself: {', '.join(answered)}")
    gone = up.client_requests - to.client_requests - {"initialize"}
    if "logging/setLevel" in gone and "logging" in capabilities:
        add(
            "logLevel",
            "the per-request logLevel replaces logging/setLevel: log notifications are "
            "filtered by the gateway for each call",
        )
    unavailable = sorted(gone - {"logging/setLevel"})
    if unavailable:
        add(
            "unavailable",
            f"requests of {upstream.name} that {modern.name} clients cannot send: "
            f"{', '.join(unavailable)}",
        )
    dropped = sorted(up.server_notifications - to.server_notifications)
    if dropped:
        add("droppedNotifications", f"notifications dropped: {', '.join(dropped)}")
    add(
        "messages",
        "messages translated step by step: " + " -> ".join(v.name for v in chain(upstream, modern)),
    )
    return out


def pass_through(modern: Version = LATEST_MODERN) -> list[Item]:
    """What the gateway does for a modern client in front of a modern upstream:
    nothing to translate."""
    return [
        {
            "id": "passThrough",
            "description": f"{modern.name} requests passed through unchanged (body, _meta, "
            "requestState, inputResponses) and answers streamed back as they come: "
            "nothing translated",
        }
    ]
