"""Header mirroring (2026-07-28 streamable-http "Request Metadata"): value encoding."""

from __future__ import annotations

import base64
import binascii
from typing import Any

# Methods whose `Mcp-Name` header mirrors a body field (streamable-http
# "Standard Request Headers"): the modern front checks it, the modern upstream
# writes it, from this one table.
NAME_FIELDS: dict[str, str] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    # SEP-2663 "Streamable HTTP: Routing Headers": Mcp-Name is the task id.
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}

_PREFIX = "=?base64?"
_SUFFIX = "?="


class BadHeaderValue(ValueError):
    """A mirrored header value that cannot be decoded."""


def decode_header_value(raw: str) -> str:
    """Decode the Base64 sentinel form `=?base64?...?=`; plain values pass as they are."""
    if raw.startswith(_PREFIX) and raw.endswith(_SUFFIX) and len(raw) >= len(_PREFIX) + 2:
        payload = raw[len(_PREFIX) : -len(_SUFFIX)]
        try:
            return base64.b64decode(payload, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise BadHeaderValue("invalid Base64 sentinel value") from exc
    if any(not (0x20 <= ord(ch) <= 0x7E or ch == "\t") for ch in raw):
        raise BadHeaderValue("header value has characters outside visible ASCII")
    return raw


def header_form(value: Any) -> str | None:
    """The string a conforming client mirrors for a body value, or None if not mirrorable."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        # streamable-http "Server Validation": compare integers numerically (42.0 == 42).
        return str(int(value))
    if isinstance(value, str):
        return value
    return None


def values_match(header_raw: str, body_value: Any) -> bool:
    decoded = decode_header_value(header_raw)
    expected = header_form(body_value)
    if expected is None:
        return False
    if isinstance(body_value, (int, float)) and not isinstance(body_value, bool):
        try:
            return float(decoded) == float(body_value)
        except ValueError:
            return False
    return decoded == expected
