"""Building blocks shared by the per-version translator modules.

Nothing here knows about a particular protocol version: the version modules
describe themselves with a :class:`Delta` (what changed relative to their
predecessor) and a :class:`Steps` record (how to move a message one version up
or down), and :mod:`translators.registry` folds the deltas in order.

Every helper in this module follows the same contract as the public API:
inputs are never mutated, and a helper that has nothing to change returns its
argument itself (the same object), so a chain of identity steps costs nothing
and unchanged sub-objects are shared between input and output (treat both as
read-only). Only the dicts on the path to a change are copied.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

JSONObject = dict[str, Any]
"""A decoded JSON object (what orjson/json give for ``{...}``)."""

# ---------------------------------------------------------------------------
# _meta keys defined by the 2026 revisions
# ---------------------------------------------------------------------------

META_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
# 2025-11-25 tasks (basic/utilities/tasks): "io.modelcontextprotocol/related-task".
META_RELATED_TASK: Final = "io.modelcontextprotocol/related-task"

# Requests a server sends to a client (legacy) / the requests carried in an
# InputRequiredResult's inputRequests (2026). Their results are client results:
# in 2026-07-28 they are InputResponses, which have no resultType.
INPUT_REQUEST_METHODS: Final = frozenset(
    {"elicitation/create", "sampling/createMessage", "roots/list"}
)

# Stand-in for a required Implementation object the caller did not supply
# (the draft requires io.modelcontextprotocol/clientInfo and
# DiscoverResult.serverInfo; neither exists in legacy messages).
UNKNOWN_IMPLEMENTATION: Final[Mapping[str, str]] = MappingProxyType(
    {"name": "unknown", "version": "unknown"}
)


def _empty_map() -> Mapping[Any, Any]:
    return MappingProxyType({})


class Era(enum.Enum):
    """Protocol family: how a version is spoken on the wire."""

    LEGACY = "legacy"  # initialize handshake, Mcp-Session-Id, server-initiated requests
    DRAFT = "draft"  # pre-release 2026 drafts: stateless, old error numbers
    MODERN = "modern"  # 2026-07-28 and later: stateless, per-request _meta, MRTR


@dataclass(frozen=True)
class ErrorSignature:
    """How a version signals a meaning it has no code of its own for: a shared
    code, on some methods, with a member of ``data`` that tells it apart (the
    2026-07-28 resource not found: -32602 on ``resources/read`` with
    ``data.uri``). Without it the meaning is lost in the shared code."""

    code: int
    methods: frozenset[str]
    data_key: str

    def matches(self, err: Mapping[str, Any], method: str | None) -> bool:
        data = err.get("data")
        return (
            method in self.methods
            and err.get("code") == self.code
            and isinstance(data, Mapping)
            and self.data_key in data
        )


@dataclass(frozen=True)
class Features:
    """What a protocol version allows, folded from the deltas of every version up to it."""

    batching: bool
    protocol_version_header: bool
    sessions: bool
    server_initiated_requests: bool
    result_type: bool
    per_request_meta: bool
    error_codes: Mapping[str, int] = field(hash=False)
    client_requests: frozenset[str]
    client_notifications: frozenset[str]
    server_requests: frozenset[str]
    server_notifications: frozenset[str]
    cacheable_methods: frozenset[str]
    mrtr_methods: frozenset[str]
    # The version's schema.json ClientCapabilities.
    client_capabilities: Shape = field(default_factory=_empty_map, hash=False)
    # Codes an earlier version defined and this one no longer does, with the
    # meaning they had ("remain reserved and will not be reused").
    retired_error_codes: Mapping[int, str] = field(default_factory=_empty_map, hash=False)
    # Inclusive (low, high) range that only the specification may allocate in
    # (2026-07-28 basic/index "Error Codes"); None where no such policy exists.
    reserved_error_range: tuple[int, int] | None = None
    # Symbolic meaning -> the meaning to use toward a version that lacks it.
    error_fallbacks: Mapping[str, str] = field(default_factory=_empty_map, hash=False)
    # Symbolic meaning -> how this version signals it without a code of its own.
    error_signatures: Mapping[str, ErrorSignature] = field(default_factory=_empty_map, hash=False)

    @property
    def notifications(self) -> frozenset[str]:
        """Every notification method of the version, either direction."""
        return self.client_notifications | self.server_notifications

    def error_meaning(self, code: int) -> str | None:
        """Symbolic meaning of ``code`` in this version (current or retired), or None."""
        for meaning, number in self.error_codes.items():
            if number == code:
                return meaning
        return self.retired_error_codes.get(code)


EMPTY_FEATURES: Final = Features(
    batching=False,
    protocol_version_header=False,
    sessions=False,
    server_initiated_requests=False,
    result_type=False,
    per_request_meta=False,
    error_codes=MappingProxyType({}),
    client_requests=frozenset(),
    client_notifications=frozenset(),
    server_requests=frozenset(),
    server_notifications=frozenset(),
    cacheable_methods=frozenset(),
    mrtr_methods=frozenset(),
)


@dataclass(frozen=True)
class Change:
    """Set delta: names a version adds and removes relative to its predecessor."""

    add: frozenset[str] = frozenset()
    remove: frozenset[str] = frozenset()

    def apply(self, current: frozenset[str]) -> frozenset[str]:
        return (current - self.remove) | self.add


def change(add: Iterable[str] = (), remove: Iterable[str] = ()) -> Change:
    return Change(frozenset(add), frozenset(remove))


NO_CHANGE: Final = Change()


@dataclass(frozen=True)
class ListMethod:
    """A paged list method: the server capability that declares it, the result
    member holding its items, the notification that says the list changed."""

    capability: str
    member: str
    changed: str


# ---------------------------------------------------------------------------
# Capability shapes
# ---------------------------------------------------------------------------

# A capabilities object's shape as a revision's schema.json defines it: each
# member a nested shape, BOOL (a boolean) or OPEN (an object whose every value
# is an object: ``experimental``, ``extensions``). An empty shape is an open
# object (``JSONObject``, ``additionalProperties: true``).
BOOL: Final = "bool"
OPEN: Final = "open"
Shape = Mapping[str, "Shape | str"]


@dataclass(frozen=True)
class ShapeChange:
    """Members a version adds (or replaces whole) and removes at the top level
    of a capabilities shape, relative to its predecessor."""

    add: Mapping[str, Shape | str] = field(default_factory=_empty_map, hash=False)
    remove: frozenset[str] = frozenset()

    def apply(self, current: Shape) -> Shape:
        merged = {k: v for k, v in current.items() if k not in self.remove}
        merged.update(self.add)
        return MappingProxyType(merged)


def reshape(
    add: Mapping[str, Shape | str] | None = None, remove: Iterable[str] = ()
) -> ShapeChange:
    return ShapeChange(MappingProxyType(dict(add or {})), frozenset(remove))


NO_RESHAPE: Final = ShapeChange()


@dataclass(frozen=True)
class Delta:
    """A protocol version described as the difference from its predecessor.

    ``None`` for a flag means "as before"; ``None`` as an error-code value
    removes that meaning from the table.
    """

    name: str
    era: Era
    aliases: tuple[str, ...] = ()
    batching: bool | None = None
    protocol_version_header: bool | None = None
    sessions: bool | None = None
    server_initiated_requests: bool | None = None
    result_type: bool | None = None
    per_request_meta: bool | None = None
    error_codes: Mapping[str, int | None] = field(default_factory=_empty_map, hash=False)
    retire_error_codes: Mapping[int, str] = field(default_factory=_empty_map, hash=False)
    reserved_error_range: tuple[int, int] | None = None
    error_fallbacks: Mapping[str, str] = field(default_factory=_empty_map, hash=False)
    # Added to (or, with None, removed from) the predecessor's signatures.
    error_signatures: Mapping[str, ErrorSignature | None] = field(
        default_factory=_empty_map, hash=False
    )
    client_requests: Change = NO_CHANGE
    client_notifications: Change = NO_CHANGE
    server_requests: Change = NO_CHANGE
    server_notifications: Change = NO_CHANGE
    cacheable_methods: Change = NO_CHANGE
    mrtr_methods: Change = NO_CHANGE
    client_capabilities: ShapeChange = NO_RESHAPE

    def apply(self, prev: Features) -> Features:
        def flag(new: bool | None, old: bool) -> bool:
            return old if new is None else new

        codes = dict(prev.error_codes)
        for meaning, number in self.error_codes.items():
            if number is None:
                codes.pop(meaning, None)
            else:
                codes[meaning] = number
        return Features(
            batching=flag(self.batching, prev.batching),
            protocol_version_header=flag(
                self.protocol_version_header, prev.protocol_version_header
            ),
            sessions=flag(self.sessions, prev.sessions),
            server_initiated_requests=flag(
                self.server_initiated_requests, prev.server_initiated_requests
            ),
            result_type=flag(self.result_type, prev.result_type),
            per_request_meta=flag(self.per_request_meta, prev.per_request_meta),
            error_codes=MappingProxyType(codes),
            client_requests=self.client_requests.apply(prev.client_requests),
            client_notifications=self.client_notifications.apply(prev.client_notifications),
            server_requests=self.server_requests.apply(prev.server_requests),
            server_notifications=self.server_notifications.apply(prev.server_notifications),
            cacheable_methods=self.cacheable_methods.apply(prev.cacheable_methods),
            mrtr_methods=self.mrtr_methods.apply(prev.mrtr_methods),
            client_capabilities=self.client_capabilities.apply(prev.client_capabilities),
            retired_error_codes=MappingProxyType(
                {
                    **{
                        c: m for c, m in prev.retired_error_codes.items() if c not in codes.values()
                    },
                    **self.retire_error_codes,
                }
            ),
            reserved_error_range=self.reserved_error_range or prev.reserved_error_range,
            error_fallbacks=MappingProxyType({**prev.error_fallbacks, **self.error_fallbacks}),
            error_signatures=MappingProxyType(
                {
                    meaning: signature
                    for meaning, signature in {
                        **prev.error_signatures,
                        **self.error_signatures,
                    }.items()
                    if signature is not None
                }
            ),
        )


# ---------------------------------------------------------------------------
# Translation context and step functions
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What a translation may need beyond the message itself.

    ``ttl_ms``/``cache_scope``: CacheableResult fields added to results of
    cacheable methods toward 2026 clients when the upstream gave none.
    ``cache_hints``: set False for the result of a retried multi round-trip
    request (one that carried ``inputResponses``/``requestState``); such
    results then get no hints added (2026-07-28 server/utilities/caching:
    they "MUST NOT be cached").
    ``server_info``: the upstream's serverInfo (legacy InitializeResult); put
    in each result's ``_meta["io.modelcontextprotocol/serverInfo"]`` toward
    2026 clients.
    ``client_capabilities``/``client_info``/``log_level``: what a legacy client
    fixed at ``initialize`` (capabilities in the *source* version's form) and
    ``logging/setLevel``; used to fill the per-request ``_meta`` when a legacy
    request is upgraded for a 2026 server.
    """

    ttl_ms: int = 60000
    cache_scope: str = "private"
    server_info: Mapping[str, Any] | None = None
    cache_hints: bool = True
    client_capabilities: Mapping[str, Any] | None = None
    client_info: Mapping[str, Any] | None = None
    log_level: str | None = None


DEFAULT_CONTEXT: Final = Context()

RequestStep = Callable[[JSONObject, Context], JSONObject]
ResultStep = Callable[[JSONObject, str, Context], JSONObject]
NotificationStep = Callable[[JSONObject], "JSONObject | None"]
CapabilitiesStep = Callable[[JSONObject], JSONObject]


def keep_request(msg: JSONObject, ctx: Context) -> JSONObject:
    return msg


def keep_result(res: JSONObject, method: str, ctx: Context) -> JSONObject:
    return res


def keep_notification(msg: JSONObject) -> JSONObject | None:
    return msg


def keep_capabilities(caps: JSONObject) -> JSONObject:
    return caps


@dataclass(frozen=True)
class Steps:
    """One version's step functions to and from its predecessor.

    Every field defaults to the shared identity, so a module passes only the
    steps its version changes. ``upgrade_*`` takes a message in the
    predecessor's form and returns it in this version's form; ``downgrade_*``
    the reverse. Notification steps return None when the notification cannot
    exist on the other side.
    """

    upgrade_request: RequestStep = keep_request
    downgrade_request: RequestStep = keep_request
    upgrade_result: ResultStep = keep_result
    downgrade_result: ResultStep = keep_result
    upgrade_notification: NotificationStep = keep_notification
    downgrade_notification: NotificationStep = keep_notification
    upgrade_server_capabilities: CapabilitiesStep = keep_capabilities
    downgrade_server_capabilities: CapabilitiesStep = keep_capabilities
    upgrade_client_capabilities: CapabilitiesStep = keep_capabilities
    downgrade_client_capabilities: CapabilitiesStep = keep_capabilities


# ---------------------------------------------------------------------------
# Copy-on-write helpers
# ---------------------------------------------------------------------------


def without(obj: JSONObject, keys: Collection[str]) -> JSONObject:
    """``obj`` without ``keys``; ``obj`` itself when none of them is present."""
    for key in keys:  # a loop, not any() over a generator: called many times per message
        if key in obj:
            return {k: v for k, v in obj.items() if k not in keys}
    return obj


def with_defaults(obj: JSONObject, defaults: Mapping[str, Any]) -> JSONObject:
    """``obj`` with ``defaults`` filled in where absent; ``obj`` itself if nothing is missing."""
    missing = {k: v for k, v in defaults.items() if k not in obj}
    if not missing:
        return obj
    return {**obj, **missing}


def params_of(msg: JSONObject) -> JSONObject | None:
    params = msg.get("params")
    return params if isinstance(params, dict) else None


def with_params(msg: JSONObject, params: JSONObject | None) -> JSONObject:
    """``msg`` with its params replaced (removed when ``params`` is None or empty)."""
    old = msg.get("params")
    if params is old:
        return msg
    if not params:
        if "params" not in msg:
            return msg
        return {k: v for k, v in msg.items() if k != "params"}
    return {**msg, "params": params}


def meta_without(obj: JSONObject, keys: Collection[str]) -> JSONObject:
    """``obj`` with ``keys`` removed from its ``_meta``; ``_meta`` dropped if it ends up empty."""
    meta = obj.get("_meta")
    if not isinstance(meta, dict):
        return obj
    new_meta = without(meta, keys)
    if new_meta is meta:
        return obj
    if not new_meta:
        return without(obj, ("_meta",))
    return {**obj, "_meta": new_meta}


def meta_with(obj: JSONObject, key: str, value: Any) -> JSONObject:
    """``obj`` with ``_meta[key] = value`` (only when ``_meta`` lacks ``key``)."""
    meta = obj.get("_meta")
    if isinstance(meta, dict):
        if key in meta:
            return obj
        return {**obj, "_meta": {**meta, key: value}}
    return {**obj, "_meta": {key: value}}


def map_list(obj: JSONObject, key: str, fn: Callable[[Any], Any]) -> JSONObject:
    """Apply ``fn`` to each item of the list ``obj[key]``; items mapped to None are dropped.

    Returns ``obj`` itself when every item came back unchanged.
    """
    items = obj.get(key)
    if not isinstance(items, list):
        return obj
    changed = False
    out: list[Any] = []
    for item in items:
        new = fn(item)
        if new is not item:
            changed = True
        if new is not None:
            out.append(new)
    if not changed:
        return obj
    return {**obj, key: out}


def map_dict_items(fn: Callable[[JSONObject], JSONObject]) -> Callable[[Any], Any]:
    """Lift ``fn`` to list items that may not be objects (non-objects pass unchanged)."""

    def apply(item: Any) -> Any:
        return fn(item) if isinstance(item, dict) else item

    return apply


def drop_keys_in_list(obj: JSONObject, key: str, keys: Collection[str]) -> JSONObject:
    """Remove ``keys`` from every object in the list ``obj[key]``."""
    return map_list(obj, key, map_dict_items(lambda item: without(item, keys)))


def drop_content_types(res: JSONObject, method: str, types: Collection[str]) -> JSONObject:
    """Drop content blocks whose ``type`` the destination does not know.

    Content blocks appear in ``tools/call`` results (``content``) and in
    ``prompts/get`` results (``messages[].content``, one block per message:
    a message whose block is dropped is dropped with it).
    """

    def block(item: Any) -> Any:
        if isinstance(item, dict) and item.get("type") in types:
            return None
        return item

    if method == "tools/call":
        return map_list(res, "content", block)
    if method == "prompts/get":

        def message(item: Any) -> Any:
            if isinstance(item, dict) and block(item.get("content")) is None:
                return None
            return item

        return map_list(res, "messages", message)
    return res


# Where each list method keeps its items.
LIST_ITEMS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "tools/list": "tools",
        "prompts/list": "prompts",
        "resources/list": "resources",
        "resources/templates/list": "resourceTemplates",
    }
)


def drop_item_fields(
    res: JSONObject, method: str, fields: Mapping[str, Collection[str]]
) -> JSONObject:
    """For a list result, remove ``fields[method]`` from every listed item."""
    keys = fields.get(method)
    if not keys:
        return res
    return drop_keys_in_list(res, LIST_ITEMS[method], keys)


def drop_capability(caps: JSONObject, name: str) -> JSONObject:
    return without(caps, (name,))


def drop_sub_capability(caps: JSONObject, name: str, sub: Collection[str]) -> JSONObject:
    """Remove sub-fields ``sub`` of capability ``name`` (the capability itself stays)."""
    value = caps.get(name)
    if not isinstance(value, dict):
        return caps
    new = without(value, sub)
    if new is value:
        return caps
    return {**caps, name: new}


def as_json_object(value: Mapping[str, Any]) -> JSONObject:
    """A dict for a Mapping (shared, not copied, when it already is one)."""
    return value if isinstance(value, dict) else dict(value)


def add_cache_hints(
    res: JSONObject, method: str, methods: Collection[str], ctx: Context
) -> JSONObject:
    """Fill CacheableResult ``ttlMs``/``cacheScope`` from ``ctx`` where absent.

    2026-07-28 server/utilities/caching "Cacheable Results": servers MUST
    include caching hints on results with ``resultType: "complete"`` of the
    cacheable methods; ``input_required`` results "carry no caching hints".
    """
    if method not in methods or not ctx.cache_hints:
        return res
    if res.get("resultType", "complete") != "complete":
        return res
    return with_defaults(res, {"ttlMs": ctx.ttl_ms, "cacheScope": ctx.cache_scope})


# ---------------------------------------------------------------------------
# Reading capabilities by a shape
# ---------------------------------------------------------------------------


def object_members(shape: Shape) -> dict[str, tuple[str, ...] | None]:
    """Which top-level members of ``shape`` are objects, each with the names of
    its own members that are objects in turn (None: every value is)."""
    out: dict[str, tuple[str, ...] | None] = {}
    for name, member in shape.items():
        if member == OPEN:
            out[name] = None
        elif isinstance(member, Mapping):
            out[name] = tuple(k for k, v in member.items() if isinstance(v, Mapping))
    return out


def reduce_to_shape(value: Mapping[str, Any], shape: Shape) -> dict[str, Any]:
    """``value`` cut to the members ``shape`` defines: every open object emptied,
    a BOOL member kept only when true (absent means false), OPEN members
    (``experimental``, ``extensions``) dropped."""
    out: dict[str, Any] = {}
    for name, member in shape.items():
        if name not in value:
            continue
        got = value[name]
        if member == BOOL:
            if got is True:
                out[name] = True
        elif isinstance(member, Mapping) and isinstance(got, Mapping):
            out[name] = reduce_to_shape(got, member)
    return out
