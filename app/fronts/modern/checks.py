"""Validation of what a 2026-07-28 client sends to `POST /mcp`.

Pure: takes the body bytes and the request headers, returns a parsed call or
a Rejection. No I/O, so every rule here is unit-tested without a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from app import jsonio
from app.call import LOG_LEVELS, ModernCall, ModernNotification
from app.fronts.shared.header_guard import check_header_values
from app.headers.header_values import NAME_FIELDS, BadHeaderValue, decode_header_value
from app.quoting import quoted
from app.rejections import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    Rejection,
    RequestId,
)
from translators.capabilities import client_capability_objects
from translators.registry import LATEST_MODERN, get_version, modern_versions

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"

# Methods whose `Mcp-Name` header mirrors a body field (app/headers).
NAME_FIELD = NAME_FIELDS
# The requests of the extension io.modelcontextprotocol/tasks (SEP-2663), not of
# the core revision: whoever serves the call (app/tasks, or a modern upstream)
# answers -32601 where the extension is not offered. tasks/result and
# tasks/list are gone from it (-32601 here).
EXTENSION_REQUESTS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


Parsed = ModernCall | ModernNotification | Rejection


def supported_version_names() -> list[str]:
    return [v.name for v in modern_versions()]


def _too_deep(max_depth: int, request_id: RequestId | None) -> Rejection:
    return Rejection(
        INVALID_REQUEST,
        f"Invalid request: the message nests objects and arrays more than {max_depth} "
        "levels deep (MCP_SHIM_MAX_JSON_DEPTH)",
        request_id,
    )


def parse(
    body: bytes, headers: Mapping[str, str], *, max_depth: int = jsonio.DEFAULT_MAX_DEPTH
) -> Parsed:
    try:
        message = jsonio.loads(body)
    except jsonio.JSONDecodeError as exc:
        deep = jsonio.read_deep(body) if jsonio.is_depth_error(exc) else None
        if deep is None or not deep.json_text:
            return Rejection(PARSE_ERROR, "Parse error: the request body is not valid JSON")
        # Deeper than the parser goes: the same refusal as any message over the
        # limit, its id read from the top level when it can be.
        return _too_deep(max_depth, deep.id)
    if jsonio.deeper_than(body, message, max_depth):
        return _too_deep(max_depth, _readable_id(message))
    if isinstance(message, list):
        return Rejection(
            INVALID_REQUEST,
            "Invalid request: JSON-RPC batches are not accepted; batching was removed in "
            "protocol version 2025-06-18, send each request in its own POST",
        )
    if not isinstance(message, dict):
        return Rejection(INVALID_REQUEST, "Invalid request: the body must be a JSON-RPC object")

    has_id = "id" in message
    request_id = message.get("id")
    shape = _check_shape(message, has_id, request_id)
    if shape is not None:
        return shape
    method: str = message["method"]
    bad_header = check_header_values(headers)
    if bad_header is not None:
        return bad_header.with_id(request_id if has_id else None)
    if not has_id:
        return _check_notification(message, method, headers)
    assert isinstance(request_id, str | int)
    return _check_request(message, method, request_id, headers)


def _readable_id(message: Any) -> RequestId | None:
    if not isinstance(message, dict):
        return None
    rid = message.get("id")
    return rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None


def _check_notification(message: dict[str, Any], method: str, headers: Mapping[str, str]) -> Parsed:
    """A notification POST: the same headers and method table as a request.

    streamable-http "Sending Messages": every POST carries the request metadata
    headers, and every POST MUST include MCP-Protocol-Version; a notification
    the server cannot accept gets an HTTP error status, with an error that has
    no id. The revision defines no header rule beyond that for notifications,
    so Mcp-Method is checked when present. NotificationParams' `_meta` has no
    protocolVersion; one that is sent must agree with the header.
    """
    header_version = headers.get("mcp-protocol-version")
    if header_version is None:
        return Rejection(
            HEADER_MISMATCH, "Header mismatch: the MCP-Protocol-Version header is missing"
        )
    header_version = header_version.strip()
    params = message.get("params") or {}
    meta = params.get("_meta")
    body_version = meta.get(META_VERSION) if isinstance(meta, dict) else None
    if body_version is not None and body_version != header_version:
        return Rejection(
            HEADER_MISMATCH,
            f"Header mismatch: MCP-Protocol-Version header value {quoted(header_version)} "
            f"does not match body value {quoted(body_version)}",
        )
    version = get_version(header_version)
    if version is None or version not in modern_versions():
        return Rejection(
            UNSUPPORTED_PROTOCOL_VERSION,
            f"Unsupported protocol version {quoted(header_version)}: send one of "
            + ", ".join(supported_version_names()),
            data={"supported": supported_version_names(), "requested": header_version[:64]},
        )
    header_method = headers.get("mcp-method")
    if header_method is not None and header_method.strip(" \t") != method:
        return Rejection(
            HEADER_MISMATCH,
            f"Header mismatch: Mcp-Method header value {quoted(header_method.strip())} does "
            f"not match body value {quoted(method)}",
        )
    if method not in version.features.client_notifications:
        return Rejection(
            METHOD_NOT_FOUND,
            f"Method not found: {quoted(method)} is not a {version.name} client notification",
        )
    return ModernNotification(method, message)


def _check_shape(message: dict[str, Any], has_id: bool, request_id: Any) -> Rejection | None:
    rid = (
        request_id
        if isinstance(request_id, str | int) and not isinstance(request_id, bool)
        else None
    )
    if message.get("jsonrpc") != "2.0":
        return Rejection(INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"', rid)
    if has_id and request_id is None:
        return Rejection(
            INVALID_REQUEST,
            "Invalid request: the id must not be null (2026-07-28 basic/index: requests "
            "MUST include a string or integer id)",
        )
    if has_id and rid is None:
        return Rejection(INVALID_REQUEST, "Invalid request: the id must be a string or an integer")
    if "result" in message or "error" in message:
        return Rejection(
            INVALID_REQUEST, "Invalid request: clients must not POST JSON-RPC responses", rid
        )
    if not isinstance(message.get("method"), str) or not message["method"]:
        return Rejection(
            INVALID_REQUEST, 'Invalid request: "method" must be a non-empty string', rid
        )
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        return Rejection(INVALID_REQUEST, 'Invalid request: "params" must be an object', rid)
    return None


def _check_request(
    message: dict[str, Any], method: str, request_id: RequestId, headers: Mapping[str, str]
) -> Parsed:
    params: dict[str, Any] = message.get("params") or {}
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        meta = {}

    # Order follows what clients rely on (docs/notes/conformance-scenarios.md 3.1):
    # a missing header first, then missing _meta, then header/body mismatch,
    # then an unsupported version.
    header_version = headers.get("mcp-protocol-version")
    if header_version is None:
        return Rejection(
            HEADER_MISMATCH,
            "Header mismatch: the MCP-Protocol-Version header is missing",
            request_id,
        )
    meta_checked = _check_meta(meta, request_id)
    if isinstance(meta_checked, Rejection):
        return meta_checked
    requested, capabilities = meta_checked
    if header_version.strip() != requested:
        return Rejection(
            HEADER_MISMATCH,
            f"Header mismatch: MCP-Protocol-Version header value {quoted(header_version)} does "
            f"not match body value {quoted(requested)}",
            request_id,
        )

    version = get_version(requested)
    if version is None or version not in modern_versions():
        return Rejection(
            UNSUPPORTED_PROTOCOL_VERSION,
            f"Unsupported protocol version {quoted(requested)}: send one of "
            + ", ".join(supported_version_names()),
            request_id,
            data={"supported": supported_version_names(), "requested": requested[:64]},
        )

    mismatch = _check_standard_headers(method, params, headers)
    if mismatch is not None:
        return mismatch.with_id(request_id)

    if method not in version.features.client_requests and method not in EXTENSION_REQUESTS:
        return Rejection(
            METHOD_NOT_FOUND,
            f"Method not found: {quoted(method)} is not a {version.name} method",
            request_id,
        )

    log_level = meta.get(META_LOG_LEVEL)
    if log_level is not None and log_level not in LOG_LEVELS:
        return Rejection(
            INVALID_PARAMS, f"Invalid params: unknown log level {quoted(log_level)}", request_id
        )

    param_headers = {
        name[len("mcp-param-") :]: value
        for name, value in headers.items()
        if name.lower().startswith("mcp-param-")
    }
    return ModernCall(
        id=request_id,
        method=method,
        params=params,
        message=message,
        version=version,
        client_capabilities=capabilities,
        log_level=log_level,
        param_headers=param_headers,
    )


def _check_meta(
    meta: dict[str, Any], request_id: RequestId
) -> tuple[str, dict[str, Any]] | Rejection:
    """The request's `_meta` protocol version and client capabilities: present,
    of their types, the capabilities of the 2026-07-28 shape."""
    requested = meta.get(META_VERSION)
    capabilities = meta.get(META_CAPABILITIES)
    missing = [
        k for k, v in ((META_VERSION, requested), (META_CAPABILITIES, capabilities)) if v is None
    ]
    if missing:
        return Rejection(
            INVALID_PARAMS,
            "Invalid params: every 2026-07-28 request must carry "
            + " and ".join(f"params._meta[{quoted(k)}]" for k in missing),
            request_id,
        )
    if not isinstance(requested, str):
        return Rejection(
            INVALID_PARAMS,
            f"Invalid params: _meta[{quoted(META_VERSION)}] must be a string",
            request_id,
        )
    if not isinstance(capabilities, dict):
        return Rejection(
            INVALID_PARAMS,
            f"Invalid params: _meta[{quoted(META_CAPABILITIES)}] must be an object",
            request_id,
        )
    bad_capability = check_client_capabilities(capabilities)
    if bad_capability is not None:
        return Rejection(
            INVALID_PARAMS,
            f"Invalid params: _meta[{quoted(META_CAPABILITIES)}]{bad_capability}",
            request_id,
        )
    return requested, capabilities


def _check_standard_headers(
    method: str, params: dict[str, Any], headers: Mapping[str, str]
) -> Rejection | None:
    header_method = headers.get("mcp-method")
    if header_method is not None:
        header_method = header_method.strip(" \t")
    if header_method is None:
        return Rejection(HEADER_MISMATCH, "Header mismatch: the Mcp-Method header is missing")
    if header_method != method:
        return Rejection(
            HEADER_MISMATCH,
            f"Header mismatch: Mcp-Method header value {quoted(header_method)} does not match "
            f"body value {quoted(method)}",
        )
    field = NAME_FIELD.get(method)
    if field is None:
        return None
    body_name = params.get(field)
    raw = headers.get("mcp-name")
    if raw is None:
        return Rejection(
            HEADER_MISMATCH, f"Header mismatch: the Mcp-Name header is missing for {method}"
        )
    try:
        header_name = decode_header_value(raw.strip(" \t"))
    except BadHeaderValue as exc:
        return Rejection(HEADER_MISMATCH, f"Header mismatch: Mcp-Name header: {exc}")
    if header_name != body_name:
        return Rejection(
            HEADER_MISMATCH,
            f"Header mismatch: Mcp-Name header value {quoted(header_name)} does not match body "
            f"value {quoted(body_name)}",
        )
    return None


# 2026-07-28 schema.json ClientCapabilities, as the translators define it.
_CAPABILITY_OBJECTS: Final = client_capability_objects(LATEST_MODERN)


def check_client_capabilities(
    capabilities: Mapping[str, Any],
    shape: Mapping[str, tuple[str, ...] | None] = _CAPABILITY_OBJECTS,
) -> str | None:
    """What is wrong with a ClientCapabilities object's shape, as the rest of a
    sentence naming the field (`.roots must be an object`), or None.

    Hand-written from the 2026-07-28 schema: a few dict look-ups, no schema
    engine on the hot path. Malformed capabilities are the client's error, to
    be refused here, not by the upstream's `initialize`.
    """
    for name, members in shape.items():
        value = capabilities.get(name)
        if value is None and name not in capabilities:
            continue
        if not isinstance(value, dict):
            return f".{name} must be an object"
        checked = value.keys() if members is None else members
        for member in checked:
            if member in value and not isinstance(value[member], dict):
                # A member the schema names reads as a path; one the client chose
                # (under an open map such as experimental) is quoted, bounded.
                label = f".{member}" if members is not None else f"[{quoted(member)}]"
                return f".{name}{label} must be an object"
    return None
