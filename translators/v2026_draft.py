"""The pre-release 2026 draft ("DRAFT-2026-v1"), as a delta from 2025-11-25.

This is the stateless protocol as the drafts shipped it before the error-code
allocation policy renumbered its codes. Sources: the conformance suite's
vendored ``schema/draft/schema.ts`` at spec commit 33c3724 (conformance
b1bb729, ``LATEST_PROTOCOL_VERSION = "DRAFT-2026-v1"``) and its history.

Wire identifiers. ``IDENTIFIERS`` lists every protocolVersion string that
denotes this draft:

* ``"DRAFT-2026-v1"``: the draft schema's ``LATEST_PROTOCOL_VERSION`` until
  2026-06-08; the conformance suite sent it as ``DRAFT_PROTOCOL_VERSION`` and,
  after switching to the dated name (commit a9ae4d6), still accepted it on
  input as ``LEGACY_DRAFT_PROTOCOL_VERSION`` "so SDKs that haven't bumped
  their constant yet still pass".

Deliberately not included: ``"draft"`` (a CLI alias of the suite, which its
own tests reject as a wire value: "should reject stale or non-canonical draft
version"), ``"DRAFT-2025-v1"``..``"DRAFT-2025-v3"`` (pre-release names of
2025-11-25, a stateful revision; the suite rejects ``DRAFT-2025-v1`` as
stale), and ``"2026-07-28"``, which the draft used from 2026-06-08 to
2026-06-18 still with the old error numbers but which is indistinguishable
from, and therefore means, the final revision.

Changes from 2025-11-25:

* No ``initialize`` handshake and no sessions; every request carries
  ``_meta`` ``io.modelcontextprotocol/protocolVersion``, ``.../clientInfo``
  (required in this draft), ``.../clientCapabilities`` and optionally
  ``.../logLevel``. ``server/discover`` and ``subscriptions/listen`` added;
  ``ping``, ``logging/setLevel``, ``resources/subscribe``/``unsubscribe``,
  ``notifications/initialized`` and ``notifications/roots/list_changed``
  removed; tasks leave the core protocol (``tasks/*``, ``task`` params,
  ``Tool.execution``, the ``tasks`` capabilities).
* Server-initiated requests are replaced by multi round-trip requests:
  ``elicitation/create``, ``sampling/createMessage`` and ``roots/list`` only
  travel inside an ``InputRequiredResult`` of ``tools/call``, ``prompts/get``
  or ``resources/read``; retries carry ``inputResponses``/``requestState``.
* ``resultType`` on every result; ``ttlMs``/``cacheScope`` (CacheableResult)
  on the list methods and ``resources/read``. ``DiscoverResult.serverInfo`` is
  a top-level field (moved to ``_meta`` in 2026-07-28).
* ``extensions`` in client and server capabilities; ``roots.listChanged`` gone.
* Errors: HeaderMismatch ``-32001``, MissingRequiredClientCapability
  ``-32003``, UnsupportedProtocolVersion ``-32004``; resource not found is
  ``-32602`` (SEP-2164; "clients SHOULD also accept -32002"); URL elicitation
  required (``-32042``) is gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from translators import legacy_tasks
from translators._base import (
    INPUT_REQUEST_METHODS,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_RELATED_TASK,
    OPEN,
    UNKNOWN_IMPLEMENTATION,
    Context,
    Delta,
    Era,
    ErrorSignature,
    JSONObject,
    Steps,
    add_cache_hints,
    as_json_object,
    change,
    drop_capability,
    drop_sub_capability,
    map_dict_items,
    map_list,
    meta_without,
    params_of,
    reshape,
    with_params,
    without,
)

NAME: Final = "DRAFT-2026-v1"
IDENTIFIERS: Final = (NAME,)

_TASK_METHODS: Final = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})

# SubscriptionFilter's boolean fields (subscriptions/listen), each with the
# server capability flag (`<capability>.<flag>`) a legacy server announces
# that kind of change under; `resourceSubscriptions` needs `resources.subscribe`.
SUBSCRIPTION_FLAGS: Final[Mapping[str, tuple[str, str]]] = MappingProxyType(
    {
        "toolsListChanged": ("tools", "listChanged"),
        "promptsListChanged": ("prompts", "listChanged"),
        "resourcesListChanged": ("resources", "listChanged"),
    }
)
SUBSCRIPTION_URIS: Final = "resourceSubscriptions"
SUBSCRIPTION_URIS_FLAG: Final = ("resources", "subscribe")
# Every capability flag a listen stream can be served from.
SUBSCRIPTION_CAPABILITY_FLAGS: Final = (*SUBSCRIPTION_FLAGS.values(), SUBSCRIPTION_URIS_FLAG)

DELTA: Final = Delta(
    name=NAME,
    era=Era.DRAFT,
    aliases=IDENTIFIERS[1:],
    batching=False,
    protocol_version_header=True,
    sessions=False,
    server_initiated_requests=False,
    result_type=True,
    per_request_meta=True,
    error_codes={
        "HEADER_MISMATCH": -32001,
        "MISSING_REQUIRED_CLIENT_CAPABILITY": -32003,
        "UNSUPPORTED_PROTOCOL_VERSION": -32004,
        "RESOURCE_NOT_FOUND": None,
        "URL_ELICITATION_REQUIRED": None,
    },
    # SEP-2164: resource not found became -32602; -32002 is still understood.
    retire_error_codes={-32002: "RESOURCE_NOT_FOUND"},
    # SEP-2164 (2026-07-28 server/resources "Error Handling"): a resources/read
    # of a URI the server does not have is -32602 with the URI in `data.uri`;
    # that is how resource not found is told from any other invalid params,
    # so a legacy client gets its -32002 back.
    error_signatures={
        "RESOURCE_NOT_FOUND": ErrorSignature(
            code=-32602, methods=frozenset({"resources/read"}), data_key="uri"
        )
    },
    # What each meaning becomes toward a version that lacks it (documented
    # choices; the data member always travels unchanged):
    error_fallbacks={
        # 2026-07-28 changelog: "Change resource not found error code from
        # -32002 to -32602 (Invalid Params)".
        "RESOURCE_NOT_FOUND": "INVALID_PARAMS",
        # A request whose headers contradict its body is an invalid request
        # (HTTP 400 in every revision).
        "HEADER_MISMATCH": "INVALID_REQUEST",
        # 2025-11-25 client/elicitation "Error Handling": a request that needs
        # a mode the client did not declare is -32602 (Invalid params).
        "MISSING_REQUIRED_CLIENT_CAPABILITY": "INVALID_PARAMS",
        # 2025-11-25 basic/lifecycle "Error Handling": "Unsupported protocol
        # version" is -32602 with data {supported, requested}, the same data
        # shape as UnsupportedProtocolVersionError.
        "UNSUPPORTED_PROTOCOL_VERSION": "INVALID_PARAMS",
    },
    client_requests=change(
        add={"server/discover", "subscriptions/listen"},
        remove={
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
            *_TASK_METHODS,
        },
    ),
    client_notifications=change(
        remove={
            "notifications/initialized",
            "notifications/roots/list_changed",
            "notifications/tasks/status",
        }
    ),
    server_requests=change(remove={"ping", *_TASK_METHODS}),
    # `extensions` added, `tasks` and `roots.listChanged` gone.
    client_capabilities=reshape(add={"roots": {}, "extensions": OPEN}, remove={"tasks"}),
    server_notifications=change(
        add={"notifications/subscriptions/acknowledged"},
        remove={"notifications/tasks/status"},
    ),
    cacheable_methods=change(
        add={
            "tools/list",
            "prompts/list",
            "resources/list",
            "resources/templates/list",
            "resources/read",
        }
    ),
    mrtr_methods=change(add={"tools/call", "prompts/get", "resources/read"}),
)

# The per-request _meta fields of the stateless protocol. Legacy servers know
# none of them.
_PER_REQUEST_META: Final = (
    META_PROTOCOL_VERSION,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
)
# MRTR retry fields (basic/patterns/mrtr, InputResponseRequestParams).
_MRTR_PARAMS: Final = ("inputResponses", "requestState")
# Results of these carry CacheableResult fields from this version on.
_NEW_CACHEABLE: Final = DELTA.cacheable_methods.add


def upgrade_request(msg: JSONObject, ctx: Context) -> JSONObject:
    method = msg.get("method")
    params = params_of(msg)
    if method in INPUT_REQUEST_METHODS:
        # A legacy server's own request becoming an InputRequest: tasks are gone.
        if params is None:
            return msg
        return with_params(msg, meta_without(without(params, ("task",)), (META_RELATED_TASK,)))
    # A client request. 2026 basic/patterns/mrtr: "Every request MUST include
    # the required `_meta` fields"; the draft also required clientInfo.
    params = without(params or {}, ("task",))
    old_meta = params.get("_meta")
    meta: JSONObject = dict(old_meta) if isinstance(old_meta, dict) else {}
    meta.pop(META_RELATED_TASK, None)
    meta[META_PROTOCOL_VERSION] = NAME
    if META_CLIENT_CAPABILITIES not in meta:
        # ctx.client_capabilities arrive in the predecessor's form (the chain
        # upgrades them step by step); this step upgrades them once more.
        caps = ctx.client_capabilities
        meta[META_CLIENT_CAPABILITIES] = (
            upgrade_client_capabilities(as_json_object(caps)) if caps is not None else {}
        )
    if META_CLIENT_INFO not in meta:
        meta[META_CLIENT_INFO] = as_json_object(ctx.client_info or UNKNOWN_IMPLEMENTATION)
    if ctx.log_level is not None and META_LOG_LEVEL not in meta:
        meta[META_LOG_LEVEL] = ctx.log_level
    return {**msg, "params": {**params, "_meta": meta}}


def downgrade_request(msg: JSONObject, ctx: Context) -> JSONObject:
    if msg.get("method") in INPUT_REQUEST_METHODS:
        # An InputRequest becoming a legacy server request: nothing to remove.
        # (A URL-mode elicitation needs an elicitationId in 2025-11-25, which
        # only the caller can mint.)
        return msg
    params = params_of(msg)
    if params is None:
        return msg
    params = meta_without(without(params, _MRTR_PARAMS), _PER_REQUEST_META)
    return with_params(msg, params)


def upgrade_result(res: JSONObject, method: str, ctx: Context) -> JSONObject:
    if method in INPUT_REQUEST_METHODS:
        return res  # InputResponses have no resultType
    res = meta_without(res, (META_RELATED_TASK,))
    # basic/index "Result Responses": "The `result` MUST include a
    # `resultType` field"; an absent one from an earlier server means
    # "complete".
    if "resultType" not in res:
        res = {**res, "resultType": "complete"}
    res = add_cache_hints(res, method, _NEW_CACHEABLE, ctx)
    if method == "tools/list":
        res = map_list(res, "tools", map_dict_items(lambda tool: without(tool, ("execution",))))
    return res


def _legacy_tool(tool: JSONObject) -> JSONObject:
    # The draft loosened outputSchema to any JSON Schema; 2025-11-25 requires
    # an object schema (`type: "object"`). One it cannot express is dropped.
    schema = tool.get("outputSchema")
    if schema is None or (isinstance(schema, dict) and schema.get("type") == "object"):
        return tool
    return without(tool, ("outputSchema",))


def downgrade_result(res: JSONObject, method: str, ctx: Context) -> JSONObject:
    if method in INPUT_REQUEST_METHODS:
        return res
    res = without(res, ("resultType", "ttlMs", "cacheScope"))
    if method == "tools/call" and "structuredContent" in res:
        # Any JSON value in the draft, an object in 2025-11-25. Tools SHOULD
        # also return the serialized JSON as text content, which stays.
        if not isinstance(res["structuredContent"], dict):
            res = without(res, ("structuredContent",))
    elif method == "tools/list":
        res = map_list(res, "tools", map_dict_items(_legacy_tool))
    return res


def upgrade_client_capabilities(caps: JSONObject) -> JSONObject:
    # roots/list_changed no longer exists, so neither does roots.listChanged.
    return drop_sub_capability(drop_capability(caps, "tasks"), "roots", ("listChanged",))


def downgrade_client_capabilities(caps: JSONObject) -> JSONObject:
    return drop_capability(caps, "extensions")


def upgrade_server_capabilities(caps: JSONObject) -> JSONObject:
    return drop_capability(caps, "tasks")


def downgrade_server_capabilities(caps: JSONObject) -> JSONObject:
    # The tasks extension becomes 2025-11-25's `tasks` (the gateway bridges it:
    # app/upstream/modern/tasks.py); the other extensions have no legacy form.
    return drop_capability(legacy_tasks.server_capabilities_down(caps), "extensions")


STEPS: Final = Steps(
    upgrade_request=upgrade_request,
    downgrade_request=downgrade_request,
    upgrade_result=upgrade_result,
    downgrade_result=downgrade_result,
    upgrade_client_capabilities=upgrade_client_capabilities,
    downgrade_client_capabilities=downgrade_client_capabilities,
    upgrade_server_capabilities=upgrade_server_capabilities,
    downgrade_server_capabilities=downgrade_server_capabilities,
)
