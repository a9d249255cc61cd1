"""OAuth passed through: an upstream that is an OAuth resource server (2025-06-18
basic/authorization and later) stays one behind the gateway.

The gateway holds no tokens and checks none: the caller's `Authorization`
goes upstream as it came (sessions are keyed by its hash, app/upstream/sessions/pool.py),
and the upstream decides. What the gateway changes is where clients look:

- a 401 or 403 from the upstream reaches the client with the same status and
  the upstream's `WWW-Authenticate`, its `resource_metadata` pointing at the
  gateway's own metadata URL (RFC 9728 section 5.1);
- the gateway serves the protected-resource metadata of its own MCP endpoint
  (RFC 9728 section 3), built from the upstream's: `resource` is the gateway's
  MCP URL (a client MUST check that it is the URL it is talking to, RFC 9728
  section 3.3), `authorization_servers` and the rest stay the upstream's.

The URL the gateway names is `MCP_SHIM_PUBLIC_URL`, or else one derived from
the request's scheme and Host, only when that Host is loopback or listed in
`MCP_SHIM_ALLOWED_HOSTS` (a `*` there does not count): an unchecked Host is
never echoed.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import structlog

from app.fronts.shared import security
from app.rejections import INVALID_REQUEST, Rejection, RequestId
from app.upstream.errors import UpstreamAuthChallenge, UpstreamError

log = structlog.get_logger("mcp_shim.auth")

WELL_KNOWN = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"

# An auth-param `resource_metadata=<token or quoted-string>` (RFC 9110 11.2),
# or its extended form `resource_metadata*=UTF-8''<percent-encoded>` (RFC 8187,
# which RFC 9110 11.2 allows a challenge's parameters): both name the
# upstream's metadata, so both are rewritten, whatever their value.
_RESOURCE_METADATA = re.compile(
    r'(?P<name>\bresource_metadata(?P<ext>\s*\*)?\s*=\s*)(?P<value>"(?:[^"\\]|\\.)*"|[^\s,]*)',
    re.IGNORECASE,
)
# RFC 8187 section 3.2.1: attr-char, what an ext-value leaves unencoded.
_ATTR_CHARS = "!#$&+-.^_`|~"
_ERROR_PARAM = re.compile(r'\berror\s*=\s*"?(?P<value>[A-Za-z0-9_]{1,64})"?', re.IGNORECASE)
# A Host header fit to be put into a URL: a name or IP literal and a port, nothing else.
_HOST_OK = re.compile(r"^(?:[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?$")
# An upstream metadata document larger than this is not metadata.
MAX_METADATA_BYTES = 64 * 1024


def metadata_url(resource: str) -> str:
    """RFC 9728 section 3.1: the well-known suffix goes between host and path."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN + path, "", ""))


def well_known_candidates(upstream_url: str) -> list[str]:
    """Where the upstream's own metadata lives, in the order MCP clients try
    (2025-11-25 basic/authorization "Protected Resource Metadata Discovery")."""
    parts = urlsplit(upstream_url)
    root = urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN, "", ""))
    suffixed = metadata_url(upstream_url)
    return [suffixed] if suffixed == root else [suffixed, root]


def gateway_mcp_url(
    public_url: str | None,
    scheme: str,
    host: str | None,
    allowed_hosts: Sequence[str],
    path: str = MCP_PATH,
) -> str | None:
    """The gateway's MCP endpoint URL as clients reach it, or None when it cannot
    be told without trusting an unchecked Host."""
    if public_url is not None:
        return public_url
    if host is None or scheme not in ("http", "https") or not _HOST_OK.match(host):
        return None
    listed = [h for h in allowed_hosts if h != "*"]
    if security.check_host(host, listed) is not None:
        return None
    return f"{scheme}://{host.lower()}{path}"


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def _ext_decode(value: str) -> str | None:
    """An RFC 8187 ext-value (`charset'[language]'pct-encoded`), decoded; None
    when it is not one (an unknown charset, bad escapes)."""
    charset, quote, rest = value.partition("'")
    _language, quote2, encoded = rest.partition("'")
    if not quote or not quote2 or charset.lower() not in ("utf-8", "iso-8859-1"):
        return None
    try:
        return unquote(encoded, encoding=charset, errors="strict")
    except (UnicodeDecodeError, LookupError):
        return None


def _ext_encode(value: str) -> str:
    return "UTF-8''" + quote(value, safe=_ATTR_CHARS)


def challenge_metadata_url(challenge: str | None) -> str | None:
    """The `resource_metadata` URL a `WWW-Authenticate` value names, if any
    (the extended form decoded)."""
    if challenge is None:
        return None
    for match in _RESOURCE_METADATA.finditer(challenge):
        value = _unquote(match.group("value"))
        if match.group("ext") is None:
            return value
        decoded = _ext_decode(value)
        if decoded is not None:
            return decoded
    return None


def rewrite_challenge(challenge: str, gateway_metadata_url: str | None) -> str:
    """The upstream's challenge with `resource_metadata` pointing at the gateway,
    in the form it came in (the extended one encoded again). Without a URL of
    ours the parameter is removed: the upstream's address is not the client's
    business, and the client falls back to the gateway's well-known URLs
    (2025-11-25 basic/authorization, "MUST fall back")."""
    if gateway_metadata_url is None:
        return _drop_resource_metadata(challenge)
    ours = gateway_metadata_url

    def ours_for(match: re.Match[str]) -> str:
        if match.group("ext") is not None:
            return f"{match.group('name')}{_ext_encode(ours)}"
        return f'{match.group("name")}"{ours}"'

    return _RESOURCE_METADATA.sub(ours_for, challenge)


def _drop_resource_metadata(challenge: str) -> str:
    match = _RESOURCE_METADATA.search(challenge)
    while match is not None:
        before = challenge[: match.start()].rstrip()
        after = challenge[match.end() :].lstrip()
        if after.startswith(","):
            after = after[1:].lstrip()
        elif before.endswith(","):
            before = before[:-1].rstrip()
        challenge = f"{before} {after}".strip()
        match = _RESOURCE_METADATA.search(challenge)
    return challenge


def challenge_error(challenge: str | None) -> str | None:
    """The OAuth `error` code of the challenge (`invalid_token`, `insufficient_scope`)."""
    if challenge is None:
        return None
    match = _ERROR_PARAM.search(challenge)
    return match.group("value") if match else None


def gateway_metadata(upstream: dict[str, Any], resource: str) -> dict[str, Any]:
    """The gateway's document: the upstream's, for the gateway's resource.
    `signed_metadata` goes: its signed `resource` would name the upstream and
    take precedence over ours (RFC 9728 section 2.2)."""
    document = {k: v for k, v in upstream.items() if k != "signed_metadata"}
    document["resource"] = resource
    return document


def _same_origin(url: str, other: str) -> bool:
    a, b = urlsplit(url), urlsplit(other)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


def refusal(
    call_id: RequestId | None, exc: UpstreamAuthChallenge, gateway_url: str | None
) -> tuple[Rejection, tuple[tuple[str, str], ...]]:
    """The client's answer to an upstream 401/403: the same status, the challenge
    rewritten, a JSON-RPC error body (the code matters little: OAuth clients act
    on the status and the header)."""
    error = challenge_error(exc.www_authenticate)
    data: dict[str, Any] = {"status": exc.status}
    if error is not None:
        data["error"] = error
    what = "requires authorization" if exc.status == 401 else "refused the authorization"
    rejection = Rejection(
        INVALID_REQUEST,
        f"Unauthorized: the upstream MCP server {what} (HTTP {exc.status}); "
        "see the WWW-Authenticate header",
        call_id,
        data,
        status=exc.status,
    )
    headers: tuple[tuple[str, str], ...] = ()
    if exc.www_authenticate is not None:
        ours = metadata_url(gateway_url) if gateway_url is not None else None
        headers = (("www-authenticate", rewrite_challenge(exc.www_authenticate, ours)),)
    return rejection, headers


Fetch = Callable[[str], Awaitable[Any]]


class MetadataUnavailable(Exception):
    """The upstream's metadata could not be read: `status` is what the client gets."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class AuthRelay:
    """The upstream's challenges and metadata, seen from the gateway's endpoint."""

    def __init__(
        self,
        fetch: Fetch,
        upstream_url: str,
        *,
        cache_s: float = 60.0,
        failure_cache_s: float = 5.0,
    ) -> None:
        self._fetch = fetch  # GET a JSON document from the upstream; None if not 200
        self._upstream_url = upstream_url
        self._cache_s = cache_s
        self._failure_cache_s = failure_cache_s
        # The metadata URL of the upstream's latest challenge (same origin only:
        # a challenge naming the gateway's own public URL would make us fetch ourselves).
        self._named: str | None = None
        self._cached: tuple[float, dict[str, Any] | MetadataUnavailable] | None = None
        self._lock = asyncio.Lock()

    def note(self, challenge: str | None) -> None:
        """Remember where the upstream's latest challenge says its metadata is."""
        named = challenge_metadata_url(challenge)
        if named is not None and _same_origin(named, self._upstream_url) and named != self._named:
            self._named = named
            self._cached = None

    async def answer(self, gateway_url: str | None) -> tuple[int, dict[str, Any]]:
        """Status and body of `GET /.well-known/oauth-protected-resource[...]`."""
        if gateway_url is None:
            return 404, {
                "error": "not_found",
                "error_description": "the gateway's public URL is not configured: "
                "set MCP_SHIM_PUBLIC_URL",
            }
        try:
            return 200, await self.metadata(gateway_url)
        except MetadataUnavailable as exc:
            return exc.status, {"error": "unavailable", "error_description": exc.message}

    async def metadata(self, gateway_url: str) -> dict[str, Any]:
        """The gateway's protected-resource metadata; MetadataUnavailable if the
        upstream has none (404) or cannot be reached (502)."""
        upstream = await self._upstream_metadata()
        return gateway_metadata(upstream, gateway_url)

    async def _upstream_metadata(self) -> dict[str, Any]:
        async with self._lock:  # one fetch at a time; the rest read the cache
            now = time.monotonic()
            if self._cached is not None:
                at, value = self._cached
                ttl = self._failure_cache_s if isinstance(value, Exception) else self._cache_s
                if now - at < ttl:
                    if isinstance(value, MetadataUnavailable):
                        raise value
                    return value
            try:
                value = await self._read()
            except MetadataUnavailable as exc:
                self._cached = (time.monotonic(), exc)
                raise
            self._cached = (time.monotonic(), value)
            return value

    async def _read(self) -> dict[str, Any]:
        candidates = [self._named] if self._named is not None else []
        candidates += [u for u in well_known_candidates(self._upstream_url) if u not in candidates]
        for url in candidates:
            try:
                document = await self._fetch(url)
            except UpstreamError as exc:
                log.warning("upstream_metadata_unavailable", error=exc.message)
                raise MetadataUnavailable(
                    "the upstream MCP server could not be reached for its metadata", 502
                ) from exc
            if isinstance(document, dict) and isinstance(document.get("resource"), str):
                return document
        raise MetadataUnavailable(
            "the upstream MCP server publishes no OAuth protected-resource metadata", 404
        )
