"""The `subscriptions/listen` notification filter: parsing, what the upstream can
honour, and which upstream notification a filter wants.

Pure: no I/O, no asyncio. Spec: 2026-07-28 basic/patterns/subscriptions
("Notification Filter", "Acknowledgment"); schema `SubscriptionFilter`.

A legacy server announces changes with `notifications/{tools,prompts,resources}
/list_changed` (capability `<kind>.listChanged`) and, for URIs a session sent
`resources/subscribe` for, `notifications/resources/updated` (capability
`resources.subscribe`). A filter field the upstream's capabilities do not
cover is left out of the acknowledgment rather than faked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from app.rejections import INVALID_PARAMS, Rejection
from translators import v2026_draft

TOOLS_LIST_CHANGED: Final = "notifications/tools/list_changed"
PROMPTS_LIST_CHANGED: Final = "notifications/prompts/list_changed"
RESOURCES_LIST_CHANGED: Final = "notifications/resources/list_changed"
RESOURCE_UPDATED: Final = "notifications/resources/updated"

# The upstream notifications a listen stream can carry; anything else on the
# legacy GET stream (logging, progress, ...) never reaches a listener.
CHANGE_METHODS: Final = frozenset(
    {TOOLS_LIST_CHANGED, PROMPTS_LIST_CHANGED, RESOURCES_LIST_CHANGED, RESOURCE_UPDATED}
)

# Wire names of SubscriptionFilter's boolean fields (tools, prompts, resources,
# in Filter's order), each with the capability flag it needs upstream.
_FLAGS: Final = tuple(v2026_draft.SUBSCRIPTION_FLAGS.items())
URIS_FIELD: Final = v2026_draft.SUBSCRIPTION_URIS
# The tasks extension's field (SEP-2663): notifications/tasks for these task ids.
TASK_IDS_FIELD: Final = "taskIds"


def _served() -> dict[str, tuple[str, ...]]:
    served: dict[str, tuple[str, ...]] = {}
    for capability, key in v2026_draft.SUBSCRIPTION_CAPABILITY_FLAGS:
        served[capability] = (*served.get(capability, ()), key)
    return served


# Per capability, the flags a listen stream is served from.
_SERVED: Final = _served()

# One listen request may name at most this many URIs: each costs an upstream
# resources/subscribe and per-notification matching work.
MAX_URIS: Final = 1000
MAX_URI_LENGTH: Final = 4096


@dataclass(frozen=True, slots=True)
class Filter:
    """A SubscriptionFilter. `uris` keeps the client's order, without duplicates."""

    tools: bool = False
    prompts: bool = False
    resources: bool = False
    uris: tuple[str, ...] = ()
    # Task ids (the tasks extension); which of them are honoured is app/tasks' call.
    task_ids: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.tools or self.prompts or self.resources or self.uris or self.task_ids)

    def with_uris(self, uris: Iterable[str]) -> Filter:
        return replace(self, uris=tuple(uris))

    def to_wire(self) -> dict[str, Any]:
        """The filter as JSON, fields not subscribed omitted (never `false`)."""
        wire: dict[str, Any] = {}
        for (name, _), on in zip(_FLAGS, (self.tools, self.prompts, self.resources), strict=True):
            if on:
                wire[name] = True
        if self.uris:
            wire[URIS_FIELD] = list(self.uris)
        if self.task_ids:
            wire[TASK_IDS_FIELD] = list(self.task_ids)
        return wire


def _invalid(message: str) -> Rejection:
    return Rejection(INVALID_PARAMS, f"Invalid params: {message}")


def parse(params: Mapping[str, Any]) -> Filter | Rejection:
    """`params.notifications` of a subscriptions/listen request (required by the schema)."""
    raw = params.get("notifications")
    if not isinstance(raw, dict):
        return _invalid(
            "subscriptions/listen needs params.notifications, a SubscriptionFilter object "
            "(toolsListChanged, promptsListChanged, resourcesListChanged, resourceSubscriptions)"
        )
    flags: list[bool] = []
    for name, _ in _FLAGS:
        value = raw.get(name, False)
        if not isinstance(value, bool):
            return _invalid(f"notifications.{name} must be a boolean")
        flags.append(value)
    uris_raw = raw.get(URIS_FIELD, [])
    if not isinstance(uris_raw, list) or not all(isinstance(u, str) for u in uris_raw):
        return _invalid(f"notifications.{URIS_FIELD} must be an array of URI strings")
    uris = tuple(dict.fromkeys(uris_raw))
    task_ids = _strings(raw.get(TASK_IDS_FIELD, []))
    if task_ids is None:
        return _invalid(
            f"notifications.{TASK_IDS_FIELD} must be an array of at most {MAX_URIS} task ids "
            f"of at most {MAX_URI_LENGTH} characters"
        )
    if len(uris) > MAX_URIS:
        return _invalid(f"notifications.{URIS_FIELD} names more than {MAX_URIS} URIs")
    if any(not u or len(u) > MAX_URI_LENGTH for u in uris):
        return _invalid(
            f"notifications.{URIS_FIELD} entries must be non-empty and at most "
            f"{MAX_URI_LENGTH} characters"
        )
    return Filter(
        tools=flags[0], prompts=flags[1], resources=flags[2], uris=uris, task_ids=task_ids
    )


def _strings(raw: Any) -> tuple[str, ...] | None:
    """A bounded array of non-empty strings, without duplicates; None if it is not one."""
    if not isinstance(raw, list) or not all(isinstance(u, str) and u for u in raw):
        return None
    out = tuple(dict.fromkeys(raw))
    if len(out) > MAX_URIS or any(len(u) > MAX_URI_LENGTH for u in out):
        return None
    return out


def _flag(capabilities: Mapping[str, Any], capability: str, key: str) -> bool:
    section = capabilities.get(capability)
    return isinstance(section, dict) and section.get(key) is True


def honourable(requested: Filter, upstream_capabilities: Mapping[str, Any]) -> Filter:
    """The part of `requested` the upstream can produce, judged by the capabilities it
    declared at initialize. URIs are kept here; whether each one's upstream
    `resources/subscribe` succeeds is decided later (the hub's refcount)."""
    caps = upstream_capabilities
    tools, prompts, resources = (
        on and _flag(caps, *needed)
        for on, (_, needed) in zip(
            (requested.tools, requested.prompts, requested.resources), _FLAGS, strict=True
        )
    )
    uris_served = _flag(caps, *v2026_draft.SUBSCRIPTION_URIS_FLAG)
    # Task ids are none here: which of them are served is app/tasks' call (listen.py).
    return Filter(tools, prompts, resources, requested.uris if uris_served else ())


def advertised(capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """Server capabilities for `server/discover`: `listChanged` and `resources.subscribe`
    only where they are `true` upstream, i.e. exactly what `subscriptions/listen`
    can deliver through this gateway. Everything else is kept as it is."""
    out = dict(capabilities)
    for capability, keys in _SERVED.items():
        section = out.get(capability)
        if not isinstance(section, dict):
            continue
        dropped = [k for k in keys if k in section and section[k] is not True]
        if dropped:
            out[capability] = {k: v for k, v in section.items() if k not in dropped}
    return out


def covers(uris: Iterable[str], uri: str) -> bool:
    """Whether an update for `uri` belongs to a subscription on `uris`: the same URI,
    or a sub-resource of one (schema ResourceUpdatedNotificationParams: the URI
    "might be a sub-resource of the one that the client actually subscribed to")."""
    for subscribed in uris:
        if uri == subscribed:
            return True
        if uri.startswith(subscribed) and (
            subscribed.endswith("/") or uri[len(subscribed)] in "/?#"
        ):
            return True
    return False


def wants(honoured: Filter, notification: Mapping[str, Any]) -> bool:
    """Whether a listener with the acknowledged filter `honoured` receives `notification`."""
    method = notification.get("method")
    if method == TOOLS_LIST_CHANGED:
        return honoured.tools
    if method == PROMPTS_LIST_CHANGED:
        return honoured.prompts
    if method == RESOURCES_LIST_CHANGED:
        return honoured.resources
    if method == RESOURCE_UPDATED and honoured.uris:
        params = notification.get("params")
        uri = params.get("uri") if isinstance(params, dict) else None
        return isinstance(uri, str) and covers(honoured.uris, uri)
    return False
