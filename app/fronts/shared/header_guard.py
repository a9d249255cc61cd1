"""The guard every front puts on the headers it reads or forwards: `Authorization`
and `Mcp-*` values that an HTTP client can forward, an `Authorization` of a
size an upstream accepts. The codes are the modern revision's; the legacy
front answers its clients -32600 for either (app/fronts/legacy/checks.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from app.quoting import quoted
from app.rejections import HEADER_MISMATCH, INVALID_REQUEST, Rejection

# RFC 9110 field values the gateway can forward: visible ASCII, space and tab.
# Anything else (obs-text, control characters) is refused before it reaches an
# HTTP client, whose encoding error would carry the value into an exception.
_BAD_HEADER_CHAR = re.compile(r"[^\x20-\x7e\t]")


# RFC 6585 section 5: 431 Request Header Fields Too Large.
MAX_AUTHORIZATION_CHARS = 8192


def check_header_values(headers: Mapping[str, str]) -> Rejection | None:
    """Headers the gateway reads or forwards must be plain ASCII (streamable-http
    "Server Validation": "A header value contains invalid characters" is a
    validation failure). The message names the header, never its value."""
    authorization = headers.get("authorization")
    if authorization is not None and len(authorization) > MAX_AUTHORIZATION_CHARS:
        # Forwarded upstream as it came, where servers refuse oversized headers
        # (8 KiB is common): the caller's own doing, not the upstream's failure.
        return Rejection(
            INVALID_REQUEST,
            f"Request header too large: the Authorization header is longer than "
            f"{MAX_AUTHORIZATION_CHARS} characters",
            status=431,
        )
    for name, value in headers.items():
        if value.isascii() and value.isprintable():
            continue  # the common case, in C
        lowered = name.lower()
        if lowered != "authorization" and not lowered.startswith("mcp-"):
            continue
        if _BAD_HEADER_CHAR.search(value) is None:
            continue  # a tab
        if lowered == "authorization":
            return Rejection(
                INVALID_REQUEST,
                "Invalid request: the Authorization header contains characters other than "
                "printable ASCII",
            )
        return Rejection(
            HEADER_MISMATCH,
            f"Header mismatch: the {quoted(name)} header contains characters other than "
            "printable ASCII; encode the value with the Base64 sentinel (=?base64?...?=)",
        )
    return None
