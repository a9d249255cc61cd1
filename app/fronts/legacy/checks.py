"""What a legacy (2024-11-05 .. 2025-11-25) client sends to `POST /mcp`.

Pure: the era of a request, the checks of a legacy message, version
negotiation. No I/O; the sessions and the forwarding are in app/fronts/legacy/.

Era per request, as a dual-era server selects it (2026-07-28
basic/versioning "Backward Compatibility with Initialization-Based
Versions"; streamable-http "Backward Compatibility"): a body whose
`params._meta` carries `io.modelcontextprotocol/protocolVersion` is modern;
an `initialize` request, or anything carrying an `Mcp-Session-Id`, is legacy;
everything else takes the modern path and gets its 400, so a dual-era
client's probe still falls back to `initialize`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app import jsonio
from app.fronts.modern import checks as modern
from app.fronts.modern.checks import META_VERSION
from app.fronts.shared import header_guard
from app.quoting import quoted
from app.rejections import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, Rejection, RequestId
from translators.capabilities import client_capability_objects
from translators.registry import LATEST_LEGACY, Version, get_version, legacy_versions

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
LAST_EVENT_ID_HEADER = "last-event-id"

_MARKER = META_VERSION.encode()
_INITIALIZE = b'"initialize"'


@dataclass(frozen=True, slots=True)
class Claim:
    """A POST the legacy front takes: its parsed body (or the parse error) and session id."""

    body: Any
    session_id: str | None
    parse_error: bool = False
    # The bytes it was parsed from: the depth check counts brackets there first.
    raw: bytes = b""


def claims(body: bytes, headers: Mapping[str, str]) -> Claim | None:
    """The legacy front's claim on a POST body, or None: the modern path takes it.

    The common modern request is decided from the bytes, without a parse (the
    modern path parses it once, as before)."""
    session_id = headers.get(SESSION_HEADER)
    if session_id is None and _INITIALIZE not in body:
        return None
    try:
        parsed = jsonio.loads(body)
    except jsonio.JSONDecodeError:
        return Claim(None, session_id, parse_error=True) if session_id is not None else None
    if isinstance(parsed, dict):
        if _MARKER in body and _is_modern(parsed):
            return None
        if parsed.get("method") == "initialize" or session_id is not None:
            return Claim(parsed, session_id, raw=body)
        return None
    if isinstance(parsed, list):
        if session_id is not None:
            if _MARKER in body and any(isinstance(m, dict) and _is_modern(m) for m in parsed):
                return None
            return Claim(parsed, session_id, raw=body)
        if holds_initialize(parsed):
            return Claim(parsed, None, raw=body)
        return None
    return Claim(parsed, session_id, raw=body) if session_id is not None else None


def _is_modern(message: dict[str, Any]) -> bool:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and META_VERSION in meta


def negotiate(requested: object) -> Version:
    """The version answered to `initialize`: the client's if it is a legacy version
    the gateway knows, else the latest legacy one (2025-11-25 basic/lifecycle
    "Version Negotiation": the server responds with another version it supports)."""
    version = get_version(requested)
    if version is not None and version in legacy_versions():
        return version
    return LATEST_LEGACY


# ---------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LegacyRequest:
    id: RequestId
    method: str
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LegacyNotification:
    method: str
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LegacyResponse:
    """The client's answer to a request the server sent it."""

    id: RequestId
    message: dict[str, Any]


LegacyMessage = LegacyRequest | LegacyNotification | LegacyResponse


def parse_error() -> Rejection:
    return Rejection(PARSE_ERROR, "Parse error: the request body is not valid JSON")


def _valid_id(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def readable_id(body: Any) -> RequestId | None:
    rid = body.get("id") if isinstance(body, dict) else None
    return rid if _valid_id(rid) else None


# The id of an error answering a message whose id could not be read. JSON-RPC 2.0
# says null, but the legacy revisions' schemas have no null id: 2024-11-05 ..
# 2025-06-18 `JSONRPCError` requires `id` (a RequestId, string or integer), and
# the official SDK's client (mcp 1.x, which speaks 2025-11-25 too) requires it as
# well. Its servers answer such errors with this same id, so legacy clients
# know it.
UNREAD_ID = "server-error"


def error_message(rejection: Rejection) -> dict[str, Any]:
    """A rejection as a legacy client receives it: always with an id."""
    message = rejection.to_message()
    if "id" in message:
        return message
    return {"jsonrpc": "2.0", "id": UNREAD_ID, "error": message["error"]}


def check_received(claim: Claim, headers: Mapping[str, str], max_depth: int) -> Rejection | None:
    """What every legacy POST must pass before its messages are looked at (the
    modern front's checks, issue 7): nesting within MCP_SHIM_MAX_JSON_DEPTH
    (orjson parses 1,024 levels but serialises only about 254, and every
    message is serialised again on its way upstream), and header values an
    HTTP client can forward."""
    if jsonio.deeper_than(claim.raw, claim.body, max_depth):
        return too_deep(claim.body, max_depth)
    return check_header_values(headers, readable_id(claim.body))


def too_deep(body: Any, max_depth: int) -> Rejection:
    return Rejection(
        INVALID_REQUEST,
        f"Invalid request: the message nests objects and arrays more than {max_depth} "
        "levels deep (MCP_SHIM_MAX_JSON_DEPTH)",
        readable_id(body),
    )


def check_header_values(
    headers: Mapping[str, str], request_id: RequestId | None = None
) -> Rejection | None:
    """`Authorization` and `Mcp-*` values must be printable ASCII (the modern
    front's rule: what an HTTP client can forward); the message names the
    header, never the value. -32020 is a 2026-07-28 code: a legacy client gets
    -32600 for either."""
    bad = header_guard.check_header_values(headers)
    if bad is None:
        return None
    if bad.code != INVALID_REQUEST:
        bad = Rejection(
            INVALID_REQUEST,
            "Invalid request: an Mcp-* header contains characters other than printable ASCII",
        )
    return bad.with_id(request_id)


def check_message(message: Any) -> LegacyMessage | Rejection:
    """JSON-RPC 2.0 shape of one message a legacy client POSTs (2025-11-25 basic/index)."""
    if not isinstance(message, dict):
        return Rejection(INVALID_REQUEST, "Invalid request: a JSON-RPC message must be an object")
    rid = message.get("id")
    known_id = rid if _valid_id(rid) else None
    if message.get("jsonrpc") != "2.0":
        return Rejection(INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"', known_id)
    if "id" in message and known_id is None:
        return Rejection(
            INVALID_REQUEST,
            "Invalid request: the id must be a string or an integer (basic/index: "
            "requests MUST include a string or integer ID, not null)",
        )
    if "method" not in message:
        if known_id is None or (("result" in message) == ("error" in message)):
            return Rejection(
                INVALID_REQUEST,
                "Invalid request: a response needs an id and exactly one of result or error",
                known_id,
            )
        return LegacyResponse(known_id, message)
    method = message.get("method")
    if not isinstance(method, str) or not method:
        return Rejection(
            INVALID_REQUEST, 'Invalid request: "method" must be a non-empty string', known_id
        )
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        return Rejection(INVALID_REQUEST, 'Invalid request: "params" must be an object', known_id)
    if known_id is None:
        return LegacyNotification(method, message)
    return LegacyRequest(known_id, method, message)


@dataclass(frozen=True, slots=True)
class Initialize:
    id: RequestId
    requested: str
    version: Version
    capabilities: dict[str, Any]
    client_info: dict[str, Any] | None


def check_initialize(request: LegacyRequest) -> Initialize | Rejection:
    params = request.message.get("params")
    if not isinstance(params, dict):
        return Rejection(INVALID_PARAMS, "Invalid params: initialize needs params", request.id)
    requested = params.get("protocolVersion")
    if not isinstance(requested, str):
        return Rejection(
            INVALID_PARAMS,
            'Invalid params: initialize needs "protocolVersion" (a string)',
            request.id,
        )
    caps = params.get("capabilities", {})
    if not isinstance(caps, dict):
        return Rejection(
            INVALID_PARAMS, 'Invalid params: "capabilities" must be an object', request.id
        )
    version = negotiate(requested)
    # Malformed capabilities are the client's error (issue 7): refused here,
    # not by the upstream's initialize.
    bad = modern.check_client_capabilities(caps, client_capability_objects(version))
    if bad is not None:
        return Rejection(
            INVALID_PARAMS,
            f'Invalid params: "capabilities"{bad} ({version.name} ClientCapabilities)',
            request.id,
        )
    info = params.get("clientInfo")
    return Initialize(
        request.id,
        requested,
        version,
        caps,
        info if isinstance(info, dict) else None,
    )


def check_version_header(value: str | None, negotiated: Version) -> Rejection | None:
    """`MCP-Protocol-Version` on a request of a session (2025-06-18 on: "If the server
    receives a request with an invalid or unsupported MCP-Protocol-Version, it MUST
    respond with 400 Bad Request"; absent, the server assumes 2025-03-26 or the
    negotiated version, so absence is accepted)."""
    if value is None:
        return None
    if value != negotiated.name:
        return Rejection(
            INVALID_REQUEST,
            f"Bad Request: MCP-Protocol-Version {quoted(value)} is not the version this session "
            f"negotiated ({negotiated.name})",
            status=400,
        )
    return None


# ---------------------------------------------------------------------------
# Batches (2025-03-26 basic/index "Batching"; removed in 2025-06-18)
# ---------------------------------------------------------------------------


def holds_initialize(items: list[Any]) -> bool:
    return any(isinstance(m, dict) and m.get("method") == "initialize" for m in items)


def check_batch(items: list[Any], version: Version | None, max_batch: int) -> Rejection | None:
    """Whether a JSON-RPC batch may be served at all; each member is checked on its own."""
    if holds_initialize(items):
        return Rejection(
            INVALID_REQUEST,
            "Invalid request: initialize must not be part of a JSON-RPC batch "
            "(2025-03-26 basic/lifecycle)",
        )
    if version is None or not version.features.batching:
        name = version.name if version is not None else "2025-06-18 and later"
        return Rejection(
            INVALID_REQUEST,
            f"Invalid request: JSON-RPC batches are not accepted; protocol version {name} "
            "removed batching (2025-06-18), send each message in its own POST",
        )
    if not items:
        return Rejection(INVALID_REQUEST, "Invalid request: the batch is empty")
    if len(items) > max_batch:
        return Rejection(
            INVALID_REQUEST,
            f"Invalid request: the batch holds {len(items)} messages; the limit is "
            f"{max_batch} (MCP_SHIM_MAX_BATCH)",
        )
    return None


def batch_members(
    items: list[Any], version: Version | None, max_batch: int
) -> list[LegacyMessage] | Rejection:
    """The batch rules, for every route a legacy client may send a batch to
    (`POST /mcp`, `POST /messages`): whether it may be served at all
    (`check_batch`), each member's shape, and no two requests with one id.

    Ids are compared with their type: 1 and "1" are two ids (JSON-RPC 2.0
    "Request object": a String or a Number), both served."""
    refusal = check_batch(items, version, max_batch)
    if refusal is not None:
        return refusal
    members: list[LegacyMessage] = []
    seen: set[tuple[type, RequestId]] = set()
    for item in items:
        checked = check_message(item)
        if isinstance(checked, Rejection):
            return checked
        if isinstance(checked, LegacyRequest):
            typed = (type(checked.id), checked.id)
            if typed in seen:
                return Rejection(
                    INVALID_REQUEST,
                    f"Invalid request: two requests in the batch share the id {quoted(checked.id)}",
                )
            seen.add(typed)
        members.append(checked)
    return members
