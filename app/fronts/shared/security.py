"""Origin and Host checks against DNS rebinding (2026-07-28 streamable-http
"Security & Endpoint": an invalid Origin MUST get 403)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from app.quoting import quoted
from app.rejections import INVALID_REQUEST, Rejection

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
# RFC 9110 7.2 / RFC 3986 3.2.2: Host is uri-host [ ":" port ]. We accept a
# DNS name or IPv4 address (letters, digits, hyphens, dots, non-empty labels
# of at most 63), or a bracketed IPv6 literal; the port, if any, is digits.
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_PORT = re.compile(r"[0-9]{1,5}")
_MAX_NAME = 253


def parse_host(host_header: str) -> tuple[str, int | None] | None:
    """The host name (lower case; an IPv6 literal keeps its brackets) and port of
    a Host header value, or None if it is not a well-formed host."""
    host = host_header.lower()
    if host.startswith("["):
        end = host.find("]")
        if end == -1:
            return None
        name, rest = host[: end + 1], host[end + 1 :]
        if "%" in name:
            return None  # a zone id names an interface of the client, never this server
        try:
            ipaddress.IPv6Address(name[1:-1])
        except ValueError:
            return None
    else:
        name, colon, port_text = host.partition(":")
        rest = colon + port_text
        if len(name) > _MAX_NAME or _NAME.fullmatch(name) is None:
            return None
    if not rest:
        return name, None
    if not rest.startswith(":") or _PORT.fullmatch(rest[1:]) is None:
        return None
    port = int(rest[1:])
    return (name, port) if port <= 65535 else None


def check_host(host_header: str | None, allowed: Sequence[str]) -> Rejection | None:
    if "*" in allowed:
        return None
    if host_header is None:
        return Rejection(INVALID_REQUEST, "Forbidden: the Host header is missing", status=403)
    parsed = parse_host(host_header)
    if parsed is None:
        # RFC 9112 3.2: a Host header with an invalid field value MUST get 400.
        return Rejection(
            INVALID_REQUEST,
            "Bad request: the Host header is not a host name or address with an optional "
            "numeric port",
            status=400,
        )
    name = parsed[0]
    if name in _LOOPBACK or name in allowed or host_header.lower() in allowed:
        return None
    return Rejection(
        INVALID_REQUEST,
        f"Forbidden: Host {quoted(host_header)} is not allowed; add it to MCP_SHIM_ALLOWED_HOSTS",
        status=403,
    )


def check_origin(origin: str | None, allowed: Sequence[str]) -> Rejection | None:
    if origin is None or "*" in allowed:
        return None
    if origin in allowed:
        return None
    parts = urlsplit(origin)
    if parts.scheme in ("http", "https") and parts.hostname is not None:
        name = parts.hostname.lower()
        if name in _LOOPBACK or f"[{name}]" in _LOOPBACK:
            return None
    return Rejection(
        INVALID_REQUEST,
        f"Forbidden: Origin {quoted(origin)} is not allowed; add it to MCP_SHIM_ALLOWED_ORIGINS",
        status=403,
    )
