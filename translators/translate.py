"""Translate MCP messages between any two known protocol versions.

Requests, results, notifications and capabilities travel along the chain of
version modules one step at a time, like database migrations: from
2025-06-18 to 2026-07-28 is 2025-06-18 -> 2025-11-25 -> DRAFT-2026-v1 ->
2026-07-28, each step done by the newer module's ``upgrade_*`` (or, going
down, ``downgrade_*``) function. Errors are not chained: a code is decoded
with the source version's table into a symbolic meaning and encoded with the
destination's table (see :func:`error`).

Contract of every function here: pure, inputs never mutated, the output shares
unchanged sub-objects with the input (and is the input itself when nothing
changes), so treat both as read-only. Whether a method may be sent at all in
the destination version is the caller's question
(``dst.features.client_requests`` and friends); these functions translate
what they are given.

Error shape chosen for codes that cannot reach the destination (an
unassigned code in 2026-07-28's reserved -32020..-32099 range, a retired code,
or one that would collide with a code the destination defines otherwise)::

    {"code": -32603, "message": <original message>,
     "data": {"originalError": {"code": <int>, "message": <str>, "data": <any, if present>}}}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final

from translators._base import (
    DEFAULT_CONTEXT,
    META_CLIENT_CAPABILITIES,
    CapabilitiesStep,
    Context,
    JSONObject,
    Steps,
    as_json_object,
    params_of,
    with_params,
)
from translators.registry import Version, error_fallback, known_versions, steps_of

__all__ = [
    "ORIGINAL_ERROR_KEY",
    "Context",
    "client_capabilities",
    "error",
    "notification",
    "request",
    "result",
    "server_capabilities",
]

ORIGINAL_ERROR_KEY: Final = "originalError"

_VERSIONS: Final = known_versions()
_STEPS: Final[tuple[Steps, ...]] = tuple(steps_of(v) for v in _VERSIONS)


def _up(src: Version, dst: Version) -> range:
    """Indices of the modules whose upgrade steps lead from ``src`` to ``dst``."""
    return range(src.index + 1, dst.index + 1)


def _down(src: Version, dst: Version) -> range:
    """Indices of the modules whose downgrade steps lead from ``src`` to ``dst``."""
    return range(src.index, dst.index, -1)


# Per module index i: do version i and its predecessor both carry the client's
# capabilities in request _meta (so a step must translate them there)?
_BOTH_STATELESS: Final = tuple(
    i > 0 and _VERSIONS[i - 1].features.per_request_meta and v.features.per_request_meta
    for i, v in enumerate(_VERSIONS)
)


def _map_meta_capabilities(msg: JSONObject, fn: CapabilitiesStep) -> JSONObject:
    params = params_of(msg)
    meta = params.get("_meta") if params is not None else None
    caps = meta.get(META_CLIENT_CAPABILITIES) if isinstance(meta, dict) else None
    if params is None or not isinstance(meta, dict) or not isinstance(caps, dict):
        return msg
    new = fn(caps)
    if new is caps:
        return msg
    return with_params(msg, {**params, "_meta": {**meta, META_CLIENT_CAPABILITIES: new}})


def _map_field(obj: JSONObject, key: str, fn: CapabilitiesStep) -> JSONObject:
    value = obj.get(key)
    if not isinstance(value, dict):
        return obj
    new = fn(value)
    return obj if new is value else {**obj, key: new}


def _map_initialize_capabilities(msg: JSONObject, fn: CapabilitiesStep) -> JSONObject:
    params = params_of(msg)
    if params is None:
        return msg
    return with_params(msg, _map_field(params, "capabilities", fn))


# ---------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------


def request(
    msg: JSONObject, src: Version, dst: Version, ctx: Context = DEFAULT_CONTEXT
) -> JSONObject:
    """Translate a whole JSON-RPC request object from ``src`` to ``dst``.

    ``ctx.client_capabilities`` (if given) are in ``src``'s form; they are
    carried along the chain and fill ``_meta`` where a legacy request becomes
    a stateless one.
    """
    if src.index == dst.index:
        return msg
    is_initialize = msg.get("method") == "initialize"
    if src.index < dst.index:
        caps = ctx.client_capabilities
        for i in _up(src, dst):
            steps = _STEPS[i]
            step_ctx = (
                ctx if caps is ctx.client_capabilities else replace(ctx, client_capabilities=caps)
            )
            msg = steps.upgrade_request(msg, step_ctx)
            if _BOTH_STATELESS[i]:
                msg = _map_meta_capabilities(msg, steps.upgrade_client_capabilities)
            elif is_initialize:
                msg = _map_initialize_capabilities(msg, steps.upgrade_client_capabilities)
            if caps is not None:
                caps = steps.upgrade_client_capabilities(as_json_object(caps))
    else:
        for i in _down(src, dst):
            steps = _STEPS[i]
            msg = steps.downgrade_request(msg, ctx)
            if _BOTH_STATELESS[i]:
                msg = _map_meta_capabilities(msg, steps.downgrade_client_capabilities)
            elif is_initialize:
                msg = _map_initialize_capabilities(msg, steps.downgrade_client_capabilities)
    return msg


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------

# Results that embed the server's capabilities.
_CAPABILITY_RESULTS: Final = frozenset({"initialize", "server/discover"})


def result(
    res: JSONObject, method: str, src: Version, dst: Version, ctx: Context = DEFAULT_CONTEXT
) -> JSONObject:
    """Translate the ``result`` member of a response to a ``method`` request."""
    if src.index == dst.index:
        return res
    embeds_caps = method in _CAPABILITY_RESULTS
    if src.index < dst.index:
        for i in _up(src, dst):
            steps = _STEPS[i]
            res = steps.upgrade_result(res, method, ctx)
            if embeds_caps:
                res = _map_field(res, "capabilities", steps.upgrade_server_capabilities)
    else:
        for i in _down(src, dst):
            steps = _STEPS[i]
            res = steps.downgrade_result(res, method, ctx)
            if embeds_caps:
                res = _map_field(res, "capabilities", steps.downgrade_server_capabilities)
    return res


# ---------------------------------------------------------------------------
# Notifications
# ---------------------------------------------------------------------------


def _removed_notifications(old: Version, new: Version) -> frozenset[str]:
    return old.features.notifications - new.features.notifications


# Per module index i: notification methods that stop existing when moving
# from version i-1 up to i, and from version i down to i-1.
_GONE_UP: Final = tuple(
    frozenset() if i == 0 else _removed_notifications(_VERSIONS[i - 1], v)
    for i, v in enumerate(_VERSIONS)
)
_GONE_DOWN: Final = tuple(
    frozenset() if i == 0 else _removed_notifications(v, _VERSIONS[i - 1])
    for i, v in enumerate(_VERSIONS)
)


def notification(msg: JSONObject, src: Version, dst: Version) -> JSONObject | None:
    """Translate a JSON-RPC notification; None when it cannot exist in ``dst`` (drop it).

    A notification is dropped at the first step whose destination version
    does not define its method (in either direction: which peer sent it is
    the caller's concern). Methods no version defines pass unchanged.
    """
    if src.index == dst.index:
        return msg
    out: JSONObject | None = msg
    if src.index < dst.index:
        for i in _up(src, dst):
            if out is None or out.get("method") in _GONE_UP[i]:
                return None
            out = _STEPS[i].upgrade_notification(out)
    else:
        for i in _down(src, dst):
            if out is None or out.get("method") in _GONE_DOWN[i]:
                return None
            out = _STEPS[i].downgrade_notification(out)
    return out


# ---------------------------------------------------------------------------
# Capabilities
# ---------------------------------------------------------------------------


def _walk(
    caps: JSONObject,
    src: Version,
    dst: Version,
    up: Callable[[Steps], CapabilitiesStep],
    down: Callable[[Steps], CapabilitiesStep],
) -> JSONObject:
    """Apply each adjacent step's upgrade (or downgrade) in turn."""
    if src.index < dst.index:
        for i in _up(src, dst):
            caps = up(_STEPS[i])(caps)
    else:
        for i in _down(src, dst):
            caps = down(_STEPS[i])(caps)
    return caps


def server_capabilities(caps: JSONObject, src: Version, dst: Version) -> JSONObject:
    """Translate a ServerCapabilities object."""
    return _walk(
        caps,
        src,
        dst,
        lambda st: st.upgrade_server_capabilities,
        lambda st: st.downgrade_server_capabilities,
    )


def client_capabilities(caps: JSONObject, src: Version, dst: Version) -> JSONObject:
    """Translate a ClientCapabilities object."""
    return _walk(
        caps,
        src,
        dst,
        lambda st: st.upgrade_client_capabilities,
        lambda st: st.downgrade_client_capabilities,
    )


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def error(err: JSONObject, src: Version, dst: Version, method: str | None = None) -> JSONObject:
    """Translate a JSON-RPC error object (``{code, message, data?}``) from ``src`` to ``dst``.

    The code is decoded with ``src``'s table (current or retired codes) into
    a symbolic meaning and encoded with ``dst``'s table; a meaning ``dst``
    lacks falls back to a standard code (``registry.error_fallback``) with
    ``data`` unchanged. A code ``src`` gives no meaning to (e.g. an SDK's own
    -32001 "request timeout" from a 2025 server) passes unchanged, unless
    ``dst`` would read it differently or forbids it: it collides with a code
    ``dst`` defines, is retired in ``dst``, or lies in ``dst``'s reserved
    range ("Implementations MUST NOT emit any code from this sub-range that
    is not defined by this specification", 2026-07-28 basic/index "Error
    Codes"). Then it becomes -32603 with the original under
    ``data.originalError``. Translating to the same version still applies
    these rules, so a modern server's stray -32002 reaches a modern client as
    -32602.

    ``method`` is the request the error answers. Where ``src`` signals a
    meaning with a shared code (``Features.error_signatures``: 2026-07-28's
    resource not found is -32602 with ``data.uri`` on ``resources/read``), the
    error carrying that signal has that meaning, so a 2025 client gets its
    -32002; every other -32602 stays invalid params.
    """
    code = err.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        return _wrap(err, dst)  # "Error codes MUST be integers" (basic/index)
    new_code = _encode(_meaning(err, code, src, method), code, dst)
    if new_code is None:
        return _wrap(err, dst)
    if new_code == code:
        return err
    return {**err, "code": new_code}


def _meaning(err: JSONObject, code: int, src: Version, method: str | None) -> str | None:
    for meaning, signature in src.features.error_signatures.items():
        if signature.matches(err, method):
            return meaning
    return src.features.error_meaning(code)


def _encode(meaning: str | None, code: int, dst: Version) -> int | None:
    """``dst``'s code for ``meaning`` (or for the opaque ``code``); None: must be wrapped."""
    table = dst.features.error_codes
    seen: set[str] = set()
    while meaning is not None and meaning not in seen:
        number = table.get(meaning)
        if number is not None:
            return number
        seen.add(meaning)
        meaning = error_fallback(meaning)
    features = dst.features
    if code in table.values() or code in features.retired_error_codes:
        return None
    reserved = features.reserved_error_range
    if reserved is not None and reserved[0] <= code <= reserved[1]:
        return None
    return code


def _wrap(err: JSONObject, dst: Version) -> JSONObject:
    original = {k: err[k] for k in ("code", "message", "data") if k in err}
    message = err.get("message")
    return {
        "code": dst.features.error_codes["INTERNAL_ERROR"],
        "message": message if isinstance(message, str) else "Internal error",
        "data": {ORIGINAL_ERROR_KEY: original},
    }
