"""What a legacy (2024-11-05 .. 2025-11-25) client sends to `POST /mcp`.

Pure: the era of a request, the checks of a legacy message, version
negotiation. No I/O; the sessions and the forwarding are in app/legacy/.

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
from app.front.modern import META_VERSION
from app.rejections import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, Rejection, RequestId
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
            return Claim(parsed, session_id)
        return None
    if isinstance(parsed, list):
        if session_id is not None:
            if _MARKER in body and any(isinstance(m, dict) and _is_modern(m) for m in parsed):
                return None
            return Claim(parsed, session_id)
        if holds_initialize(parsed):
            return Claim(parsed, None)
        return None
    return Claim(parsed, session_id) if session_id is not None else None


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


def supported_names() -> list[str]:
    return [v.name for v in legacy_versions()]


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
    info = params.get("clientInfo")
    return Initialize(
        request.id,
        requested,
        negotiate(requested),
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
            f"Bad Request: MCP-Protocol-Version {value!r} is not the version this session "
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
