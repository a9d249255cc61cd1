"""Browsers on other origins (CORS, the Fetch standard): what a preflight is
answered, and the headers an answer to an allowed Origin carries.

Which origins are allowed is `security.check_origin`'s decision (loopback
origins and MCP_SHIM_ALLOWED_ORIGINS), the same that refuses any other with a
403; this module only says so to a browser. Pure: no I/O, no request objects.

No `Access-Control-Allow-Credentials`: the gateway authenticates nothing by
cookie, and a page's `Authorization` header is not a CORS credential (the
page's script sets it, so it already holds the token; only a request in
credentials mode "include", which sends the browser's own cookies and TLS
client certificates, needs the header). Without it, a browser refuses to send
ambient credentials cross-origin through the gateway at all: an allowed
origin's page can do what its script could do with its own token, nothing
on behalf of cookies a proxy in front may have set. The Origin is echoed, never
`*`, so the same answers stay valid if credentials are ever allowed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.fronts.shared import security

Headers = tuple[tuple[bytes, bytes], ...]

# How long a browser may reuse a preflight's answer (Access-Control-Max-Age).
# A page preflights each distinct set of request header names per URL (a tool
# with `Mcp-Param-*` headers is one more set), so a session's calls pay one
# preflight per set per ten minutes; short enough that a changed
# MCP_SHIM_ALLOWED_ORIGINS or a gateway that accepts new headers reaches open
# pages soon. Within every browser's cap (Chromium 7200, Firefox 86400).
MAX_AGE_S = 600

# The request headers an MCP client sends (each revision's Streamable HTTP
# transport, the HTTP+SSE one, OAuth), plus the request id and W3C trace
# context the gateway reads. Content-Type needs listing: application/json is
# not a CORS-safelisted value. Lower case: a preflight's
# Access-Control-Request-Headers names are lower case, compared as such.
REQUEST_HEADERS = frozenset(
    {
        "accept",
        "authorization",
        "content-type",
        "last-event-id",
        "mcp-method",
        "mcp-name",
        "mcp-protocol-version",
        "mcp-session-id",
        "traceparent",
        "tracestate",
        "x-request-id",
    }
)
# A tool's `x-mcp-header` parameters: any name after the prefix.
PARAM_PREFIX = "mcp-param-"
# RFC 9110 5.1: a field name is a token.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")

# What a page's script may read of an answer: the session (legacy clients),
# the version, the id an operator finds the log lines by, an OAuth challenge,
# and when to retry.
EXPOSED_HEADERS = (
    b"Mcp-Session-Id, MCP-Protocol-Version, X-Request-Id, WWW-Authenticate, Retry-After"
)

# A route's methods in the order Allow and Access-Control-Allow-Methods list them.
METHOD_ORDER = ("GET", "HEAD", "POST", "DELETE", "OPTIONS")

# How many Origin values `Cors` remembers the decision for.
_MEMO_SIZE = 256


def allow_value(methods: Sequence[str]) -> str:
    """An Allow header's value: `methods` in a fixed order, OPTIONS last."""
    known = [m for m in METHOD_ORDER if m in methods]
    return ", ".join([*known, *sorted(m for m in methods if m not in METHOD_ORDER)])


def allowed_request_headers(requested: str) -> str:
    """Of a preflight's Access-Control-Request-Headers, the names the gateway
    accepts, in the order asked. A name it does not accept is left out, and
    the browser then refuses the request itself: a preflight lists exact
    names, so echoing them works where `*` would not (`*` never covers
    Authorization)."""
    kept: list[str] = []
    for part in requested.split(","):
        name = part.strip().lower()
        if name in REQUEST_HEADERS or (
            name.startswith(PARAM_PREFIX)
            and len(name) > len(PARAM_PREFIX)
            and _TOKEN.fullmatch(name) is not None
        ):
            if name not in kept:
                kept.append(name)
    return ", ".join(kept)


class Cors:
    """The CORS decisions of one app's MCP_SHIM_ALLOWED_ORIGINS."""

    def __init__(self, allowed_origins: Sequence[str]) -> None:
        self._allowed = list(allowed_origins)
        # An answer's headers by Origin value: a page's every call repeats its
        # Origin, and the check parses it as a URL.
        self._answers: dict[str, Headers] = {}

    def allowed(self, origin: str) -> bool:
        return security.check_origin(origin, self._allowed) is None

    def answer_headers(self, origin: str) -> Headers:
        """The headers an answer to a request from `origin` carries: none for
        an origin not allowed (its request is refused with a 403, which a
        browser then does not let its page read)."""
        known = self._answers.get(origin)
        if known is not None:
            return known
        headers: Headers = ()
        if self.allowed(origin):
            headers = (
                (b"access-control-allow-origin", origin.encode("latin-1")),
                (b"access-control-expose-headers", EXPOSED_HEADERS),
                (b"vary", b"Origin"),
            )
        if len(self._answers) < _MEMO_SIZE:
            self._answers[origin] = headers
        return headers

    @staticmethod
    def preflight_headers(
        methods: str, requested_headers: str | None, private_network: bool = False
    ) -> dict[str, str]:
        """A preflight's answer to an allowed origin for a route serving
        `methods` (an Allow value), besides the Allow-Origin and Vary every
        answer to that origin carries (`answer_headers`): every method the
        route serves, whatever the one asked (the browser checks its own),
        and the requested headers the gateway accepts. `private_network`: the
        browser asked whether a page of a public address may reach this
        private one (Chromium's Private Network Access); an origin the
        operator allowed may."""
        headers = {
            "access-control-allow-methods": methods,
            "access-control-max-age": str(MAX_AGE_S),
        }
        if requested_headers:
            allowed = allowed_request_headers(requested_headers)
            if allowed:
                headers["access-control-allow-headers"] = allowed
        if private_network:
            headers["access-control-allow-private-network"] = "true"
        return headers
