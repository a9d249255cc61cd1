"""MCP 2026-07-28, as a delta from the pre-release 2026 draft.

Changes (changelog.mdx, basic/index "Error Codes", schema.json):

* Error code allocation policy: -32000..-32019 stays implementation-defined,
  -32020..-32099 is reserved for the specification, which renumbers the
  draft's codes: HeaderMismatch -32001 -> -32020, MissingRequiredClientCapability
  -32003 -> -32021, UnsupportedProtocolVersion -32004 -> -32022. -32002
  (resource not found) and -32042 (URL elicitation required) "remain reserved
  and will not be reused"; implementations "MUST NOT emit these codes".
* ``notifications/elicitation/complete`` and ``elicitationId`` removed
  (changelog minor change 11).
* ``notifications/progress`` is no longer a client notification (clients
  answer no server requests any more); ``notifications/cancelled`` requires
  ``requestId``.
* Server identity moves from ``DiscoverResult.serverInfo`` to
  ``_meta["io.modelcontextprotocol/serverInfo"]`` on every result ("Servers
  SHOULD include ... in every result's `_meta`", basic/index "_meta");
  ``clientInfo`` becomes optional on requests.
* ``server/discover`` results become cacheable (server/utilities/caching
  "Cacheable Results" lists it; DiscoverResult requires ``ttlMs`` and
  ``cacheScope``).
* Notifications on a ``subscriptions/listen`` stream carry
  ``_meta["io.modelcontextprotocol/subscriptionId"]``.
"""

from __future__ import annotations

from typing import Final

from translators import v2026_draft as _predecessor
from translators._base import (
    INPUT_REQUEST_METHODS,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
    UNKNOWN_IMPLEMENTATION,
    Context,
    Delta,
    Era,
    JSONObject,
    Steps,
    add_cache_hints,
    as_json_object,
    change,
    meta_with,
    meta_without,
    params_of,
    with_params,
    without,
)

NAME: Final = "2026-07-28"

DELTA: Final = Delta(
    name=NAME,
    era=Era.MODERN,
    error_codes={
        "HEADER_MISMATCH": -32020,
        "MISSING_REQUIRED_CLIENT_CAPABILITY": -32021,
        "UNSUPPORTED_PROTOCOL_VERSION": -32022,
    },
    retire_error_codes={-32002: "RESOURCE_NOT_FOUND", -32042: "URL_ELICITATION_REQUIRED"},
    # basic/index "Error Codes": "Implementations MUST NOT emit any code from
    # this sub-range that is not defined by this specification".
    reserved_error_range=(-32099, -32020),
    client_notifications=change(remove={"notifications/progress"}),
    server_notifications=change(remove={"notifications/elicitation/complete"}),
    cacheable_methods=change(add={"server/discover"}),
)

_NEW_CACHEABLE: Final = DELTA.cacheable_methods.add


def _set_protocol_version(params: JSONObject, name: str) -> JSONObject:
    meta = params.get("_meta")
    if not isinstance(meta, dict) or meta.get(META_PROTOCOL_VERSION) == name:
        return params
    return {**params, "_meta": {**meta, META_PROTOCOL_VERSION: name}}


def upgrade_request(msg: JSONObject, ctx: Context) -> JSONObject:
    params = params_of(msg)
    if params is None:
        return msg
    if msg.get("method") in INPUT_REQUEST_METHODS:
        if msg.get("method") == "elicitation/create":
            return with_params(msg, without(params, ("elicitationId",)))
        return msg
    params = _set_protocol_version(params, NAME)
    meta = params.get("_meta")
    if isinstance(meta, dict) and meta.get(META_CLIENT_INFO) == UNKNOWN_IMPLEMENTATION:
        # The stand-in the draft step filled in for a required clientInfo the
        # legacy client never sent; optional here, so it goes.
        params = meta_without(params, (META_CLIENT_INFO,))
    return with_params(msg, params)


def downgrade_request(msg: JSONObject, ctx: Context) -> JSONObject:
    params = params_of(msg)
    if params is None or msg.get("method") in INPUT_REQUEST_METHODS:
        return msg
    params = _set_protocol_version(params, _predecessor.NAME)
    meta = params.get("_meta")
    if isinstance(meta, dict) and META_CLIENT_INFO not in meta:
        # Required by the draft, optional here.
        info = as_json_object(ctx.client_info or UNKNOWN_IMPLEMENTATION)
        params = {**params, "_meta": {**meta, META_CLIENT_INFO: info}}
    return with_params(msg, params)


def upgrade_result(res: JSONObject, method: str, ctx: Context) -> JSONObject:
    if method in INPUT_REQUEST_METHODS:
        return res
    if method == "server/discover" and "serverInfo" in res:
        info = res["serverInfo"]
        res = without(res, ("serverInfo",))
        if isinstance(info, dict):
            res = meta_with(res, META_SERVER_INFO, info)
    res = add_cache_hints(res, method, _NEW_CACHEABLE, ctx)
    if ctx.server_info is not None:
        res = meta_with(res, META_SERVER_INFO, as_json_object(ctx.server_info))
    return res


def downgrade_result(res: JSONObject, method: str, ctx: Context) -> JSONObject:
    if method in INPUT_REQUEST_METHODS:
        return res
    meta = res.get("_meta")
    info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
    res = meta_without(res, (META_SERVER_INFO,))
    if method == "server/discover":
        res = without(res, ("ttlMs", "cacheScope"))
        if "serverInfo" not in res:
            if not isinstance(info, dict):
                info = as_json_object(ctx.server_info or UNKNOWN_IMPLEMENTATION)
            res = {**res, "serverInfo": info}
    return res


def upgrade_notification(msg: JSONObject) -> JSONObject | None:
    if msg.get("method") == "notifications/cancelled":
        params = params_of(msg)
        if params is None or "requestId" not in params:
            # CancelledNotificationParams.requestId is required here; a
            # cancellation that names no request cannot be expressed.
            return None
    return msg


def downgrade_notification(msg: JSONObject) -> JSONObject | None:
    params = params_of(msg)
    if params is None:
        return msg
    return with_params(msg, meta_without(params, (META_SUBSCRIPTION_ID,)))


STEPS: Final = Steps(
    upgrade_request=upgrade_request,
    downgrade_request=downgrade_request,
    upgrade_result=upgrade_result,
    downgrade_result=downgrade_result,
    upgrade_notification=upgrade_notification,
    downgrade_notification=downgrade_notification,
)
