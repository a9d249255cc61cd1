"""What every route checks before a front sees the request: Host and Origin,
the body's size and pace; and the gateway's own URL, as a client reached it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from urllib.parse import urlsplit

import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from app import jsonio
from app.config import Settings
from app.connection.link import connection_link
from app.fronts.legacy import checks as legacy
from app.fronts.shared import security
from app.fronts.shared.auth import gateway_mcp_url
from app.metrics import Metrics
from app.rejections import INVALID_REQUEST, Rejection

log = structlog.get_logger("mcp_shim.http")

# How many Host values (and scheme, Host pairs) the hot path remembers.
_MEMO_SIZE = 256


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    pass


class BodyAbandoned(Exception):
    """The client went away before sending the whole body: its doing, not an error."""


async def read_body(
    request: Request, headers: Mapping[str, str], limit: int, timeout_s: float
) -> bytes:
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    link = connection_link(request.scope)
    if link is not None and link.body_complete:
        # The whole body came with the head (the common call): every receive()
        # answers at once, so there is nothing to time (an asyncio.timeout costs
        # more than the read: bench/asyncio_costs.py).
        return await _received_body(request.receive, limit)
    try:
        # A body shorter than its Content-Length, or dripped, would hold the
        # connection for ever (uvicorn has no body timeout).
        async with asyncio.timeout(timeout_s):
            return await _received_body(request.receive, limit)
    except TimeoutError:
        raise BodyTimeout from None


async def _received_body(receive: Receive, limit: int) -> bytes:
    # ASGI's messages read as starlette's `Request.stream` reads them, without
    # its async generator around each (bench/profile.py); the
    # common body comes whole in one message and is not copied.
    first = b""
    more: bytearray | None = None
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunk: bytes = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge
                if more is None and not first:
                    first = chunk
                else:
                    if more is None:
                        more = bytearray(first)
                    more += chunk
            if not message.get("more_body", False):
                break
        elif kind == "http.disconnect":
            raise BodyAbandoned
    return first if more is None else bytes(more)


def answer(rejection: Rejection, legacy_client: bool = False) -> Response:
    """A rejection as its JSON-RPC error message and HTTP status; a legacy client's
    always has an id, which every legacy revision's JSONRPCError requires
    (app/fronts/legacy/checks.py, UNREAD_ID)."""
    message = legacy.error_message(rejection) if legacy_client else rejection.to_message()
    return Response(
        jsonio.dumps(message),
        status_code=rejection.http_status,
        media_type="application/json",
    )


def accepts(accept: str) -> tuple[bool, bool]:
    """Whether the client takes an event stream, and JSON, by its Accept header."""
    if not accept:
        return True, True
    kinds = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    any_kind = "*/*" in kinds
    return (
        any_kind or "text/event-stream" in kinds or "text/*" in kinds,
        any_kind or "application/json" in kinds or "application/*" in kinds,
    )


class Edge:
    """The checks of one app's settings, with what they remember."""

    def __init__(self, settings: Settings, metrics: Metrics, mcp_path: str = "/mcp") -> None:
        """`mcp_path`: where clients reach this app's MCP endpoint (one of many
        servers': /servers/NAME/mcp)."""
        self._settings = settings
        self._mcp_path = mcp_path
        self._metrics = metrics
        self._allowed_hosts = [h.lower() for h in settings.allowed_hosts]
        self._public_url = str(settings.public_url) if settings.public_url is not None else None
        # Pure functions of a Host value (and the scheme), which every call of a
        # client repeats: remembered for the first few hundred values seen (1-2% of
        # the hot path's CPU each, bench/profile.py).
        self._known_urls: dict[tuple[str, str | None], str | None] = {}
        self._hosts_ok: set[str] = set()
        # RFC 9728 section 3.1: the metadata of https://host/mcp is at
        # /.well-known/oauth-protected-resource/mcp; clients also try the root form.
        self.metadata_paths = {"", mcp_path}
        if self._public_url is not None:
            self.metadata_paths.add(urlsplit(self._public_url).path.rstrip("/"))

    def gateway_url(self, request: Request, headers: Mapping[str, str] | None = None) -> str | None:
        # The scope's scheme, which is what `request.url.scheme` reads, without
        # building the whole URL (3% of the hot path's CPU, bench/profile.py).
        key = (
            request.scope.get("scheme", "http"),
            (request.headers if headers is None else headers).get("host"),
        )
        known = self._known_urls
        if key in known:
            return known[key]
        url = gateway_mcp_url(self._public_url, key[0], key[1], self._allowed_hosts, self._mcp_path)
        if len(known) < _MEMO_SIZE:
            known[key] = url
        return url

    def refused(
        self, rejection: Rejection, reason: str, legacy_client: bool = False, **seen: str | None
    ) -> Response:
        """A refusal before any front saw the request: logged (with what was refused,
        `seen`, so an operator can tell which name to allow), counted, answered."""
        log.warning("request_refused", reason=reason, status=rejection.http_status, **seen)
        self._metrics.rejected(rejection.code, rejection.http_status)
        return answer(rejection, legacy_client)

    def method_refused(self, request: Request, allow: str) -> Response:
        """405: a method the route does not serve, with those it does (RFC 9110
        15.5.6: the Allow header is required)."""
        log.info(
            "request_refused",
            request_id=request.state.request_id,
            reason="method_not_allowed",
            http_method=request.method,
            status=405,
        )
        self._metrics.rejected(None, 405)
        return Response(status_code=405, headers={"allow": allow})

    def host_refused(self, headers: Mapping[str, str]) -> Response | None:
        host = headers.get("host")
        refused = security.check_host(host, self._allowed_hosts)
        return None if refused is None else self.refused(refused, "host_or_origin", host=host)

    def host_or_origin_refused(
        self, headers: Mapping[str, str], legacy_client: bool = False
    ) -> Response | None:
        host = headers.get("host")
        refused = None
        if host is None or host not in self._hosts_ok:
            refused = security.check_host(host, self._allowed_hosts)
            if refused is None and host is not None and len(self._hosts_ok) < _MEMO_SIZE:
                self._hosts_ok.add(host)
        refused = refused or security.check_origin(
            headers.get("origin"), self._settings.allowed_origins
        )
        if refused is None:
            return None
        origin = headers.get("origin")
        return self.refused(refused, "host_or_origin", legacy_client, host=host, origin=origin)

    def media_type_refused(
        self, headers: Mapping[str, str], legacy_client: bool = False
    ) -> Response | None:
        content_type = headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if content_type == "application/json":
            return None
        rejection = Rejection(
            INVALID_REQUEST,
            "Unsupported media type: send the JSON-RPC message as application/json",
            status=415,
        )
        return self.refused(rejection, "content_type", legacy_client)

    async def body_or_refusal(
        self,
        request: Request,
        headers: Mapping[str, str] | None = None,
        legacy_client: bool = False,
    ) -> bytes | Response:
        """The request body, or the answer refusing it (413, 408, a client gone)."""
        settings = self._settings
        try:
            return await read_body(
                request,
                request.headers if headers is None else headers,
                settings.max_body_bytes,
                settings.read_timeout_s,
            )
        except BodyAbandoned:
            log.info("client_disconnected", phase="request_body")
            return Response(status_code=400)  # nobody is left to read it
        except BodyTimeout:
            timeout = self.refused(
                Rejection(
                    INVALID_REQUEST,
                    f"Request timeout: the body did not arrive within {settings.read_timeout_s:g} "
                    "s (MCP_SHIM_READ_TIMEOUT_S)",
                    status=408,
                ),
                "body_timeout",
                legacy_client,
            )
            # The rest of the body may still come: this connection cannot carry another request.
            timeout.headers["connection"] = "close"
            return timeout
        except BodyTooLarge:
            return self.refused(
                Rejection(
                    INVALID_REQUEST,
                    f"Request body too large: the limit is {settings.max_body_bytes} bytes "
                    "(MCP_SHIM_MAX_BODY_BYTES)",
                    status=413,
                ),
                "body_too_large",
                legacy_client,
            )
