"""Origin and Host checks against DNS rebinding (2026-07-28 streamable-http
"Security & Endpoint": an invalid Origin MUST get 403)."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from app.rejections import INVALID_REQUEST, Rejection

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


def _hostname(host_header: str) -> str:
    host = host_header.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end != -1 else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def check_host(host_header: str | None, allowed: Sequence[str]) -> Rejection | None:
    if "*" in allowed:
        return None
    if host_header is None:
        return Rejection(INVALID_REQUEST, "Forbidden: the Host header is missing", status=403)
    name = _hostname(host_header)
    if name in _LOOPBACK or name in allowed or host_header.strip().lower() in allowed:
        return None
    return Rejection(
        INVALID_REQUEST,
        f"Forbidden: Host {host_header!r} is not allowed; add it to MCP_SHIM_ALLOWED_HOSTS",
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
        f"Forbidden: Origin {origin!r} is not allowed; add it to MCP_SHIM_ALLOWED_ORIGINS",
        status=403,
    )
