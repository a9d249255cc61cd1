"""The gateway's own upstream errors. Library exceptions become these in one place
per HTTP adapter (`upstream_error` of app/upstream/httpclient/h1_adapter.py, aiohttp_client.py
and httpx_adapter.py), all applied by `app.upstream.httpclient.client.library_errors`;
nothing above the transport sees a library's exception."""

from __future__ import annotations

import structlog

log = structlog.get_logger("mcp_shim.upstream")


class UpstreamError(Exception):
    """Base: the upstream could not serve a message. `status` is what the client sees."""

    status = 502

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UpstreamUnavailable(UpstreamError):
    """Could not connect, or the connection broke before an answer."""


class UpstreamTimeout(UpstreamError):
    status = 504


class UpstreamProtocolError(UpstreamError):
    """The upstream answered something that is not MCP over Streamable HTTP."""


class UpstreamAnswerTooLarge(UpstreamProtocolError):
    """One answer's body is over MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES (decoded);
    its connection was closed."""


class UpstreamHttpError(UpstreamError):
    """A non-2xx answer without a JSON-RPC body."""

    def __init__(self, message: str, http_status: int) -> None:
        super().__init__(message)
        self.http_status = http_status


class UpstreamAuthChallenge(UpstreamError):
    """The upstream refused the caller's credentials: 401 (none, invalid or expired)
    or 403 (insufficient scope). Relayed to the client with the same status and the
    upstream's `WWW-Authenticate` challenge (app/fronts/shared/auth.py); never retried."""

    def __init__(self, message: str, http_status: int, www_authenticate: str | None) -> None:
        super().__init__(message)
        self.status = http_status
        self.www_authenticate = www_authenticate


class SessionExpired(UpstreamError):
    """404 for our Mcp-Session-Id: the server forgot the session; its handler never ran."""


class PoolExhausted(UpstreamError):
    status = 503

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        # Seconds after which a retry may find room: the answer's Retry-After.
        self.retry_after_s = retry_after_s


class SessionShareExceeded(PoolExhausted):
    """One credential holds its whole share of upstream sessions, all busy: the
    caller's own load, so 429 (RFC 6585) rather than the pool's 503."""

    status = 429


class AnswerRoomFull(PoolExhausted):
    """Large answers in flight already hold MCP_SHIM_MAX_ANSWER_BYTES_IN_FLIGHT
    and none gave room back within the wait (app/splice.py): 503, Retry-After."""


def too_large(limit: int, what: str) -> UpstreamAnswerTooLarge:
    """An answer over MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES (every transport's), logged."""
    log.warning(
        "upstream_answer_too_large", limit=limit, setting="MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES"
    )
    return UpstreamAnswerTooLarge(
        f"the upstream answer to {what} exceeded {limit} bytes (MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES)"
    )
