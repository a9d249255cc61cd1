"""The gateway's own HTTP/1.1 client (app/upstream/httpclient/h1.py) as an adapter of the
answer interface (app/upstream/httpclient/interface.py): a session's POSTs (the hot
path), the one-off requests of a plain gateway (the era probe, DELETE) and
its GETs (streams, metadata). h1's exceptions become the gateway's in
`upstream_error`, and nowhere else."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
import structlog

from app.upstream.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
    too_large,
)
from app.upstream.httpclient import h1, h1_errors
from app.upstream.httpclient.common import printable_ascii
from app.upstream.httpclient.interface import Post
from app.upstream.sessions.pool import credential_hash

log = structlog.get_logger("mcp_shim.upstream")


def upstream_error(exc: Exception, what: str) -> UpstreamError | None:
    """The gateway's error for one of h1's exceptions (the same errors and
    messages as aiohttp's), None for another's."""
    if not isinstance(exc, h1_errors.H1Error):
        return None
    if isinstance(exc, h1_errors.H1Timeout):
        return UpstreamTimeout(f"upstream timed out during {what}")
    if isinstance(exc, h1_errors.AnswerTooLarge):
        return too_large(exc.limit, what)
    if isinstance(exc, h1_errors.MalformedAnswer):
        return UpstreamProtocolError(f"upstream sent a malformed HTTP answer during {what}")
    return UpstreamUnavailable(f"upstream unreachable during {what}: {type(exc).__name__}")


async def get(
    client: h1.H1Client, url: httpx.URL, merged: Mapping[str, str], timeouts: httpx.Timeout
) -> h1.H1Answer:
    """A GET (a session's stream, the OAuth metadata), headers already merged."""
    fields = {k: v for k, v in merged.items() if k.lower() not in _FRAMING}
    if not all(_token(k) and printable_ascii(v) for k, v in fields.items()):
        raise UnicodeEncodeError("ascii", "", 0, 0, "header value")
    # No body, no Content-Length (RFC 9110 section 8.6: not for a GET
    # without content), as aiohttp sent it.
    head = b"GET %s HTTP/1.1\r\nhost: %s\r\n%s\r\n" % (
        url.raw_path,
        url.netloc,
        "".join(f"{k}: {v}\r\n" for k, v in fields.items()).encode(),
    )
    return await client.request(
        client.origin(url.scheme, url.host, url.port, _credential(fields)),
        head,
        connect_timeout=timeouts.connect,
        read_timeout=timeouts.read,
        pool_timeout=timeouts.pool,
    )


# Set by the request itself (h1 writes the body's length); httpx's client
# headers never carry them, a caller's are not forwarded as they are.
_FRAMING = frozenset(("host", "content-length", "transfer-encoding"))


def poster(
    client: h1.H1Client,
    url: httpx.URL,
    merged: dict[str, str],
    timeout: httpx.Timeout,
    method: bytes = b"POST",
) -> Post:
    """The hot path on app/upstream/httpclient/h1.py: the request's head built once per
    session (the call's extra headers, the trace context, appended), one write
    of head and body per POST. `method`: another for a one-off (`UpstreamClient.one_off`)."""
    fields = {k: v for k, v in merged.items() if k.lower() not in _FRAMING}
    # Connections are the credential's own (app/upstream/httpclient/h1.py says why); a
    # call's extra headers never carry Authorization (tracing.outgoing_headers).
    origin = client.origin(url.scheme, url.host, url.port, _credential(fields))
    # httpx refuses what is not ASCII, aiohttp a CR or LF: refused here as
    # httpx did (UnicodeEncodeError, turned into our error in `library_errors`).
    unsendable = not all(_token(k) and printable_ascii(v) for k, v in fields.items())
    names = frozenset(k.lower() for k in fields)
    start = b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method, url.raw_path, url.netloc)
    lines = "" if unsendable else "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    head = start + lines.encode()
    connect, read, pool = timeout.connect, timeout.read, timeout.pool

    def head_with(extra: Mapping[str, str]) -> bytes:
        if not all(_token(k) and printable_ascii(v) for k, v in extra.items()):
            raise UnicodeEncodeError("ascii", "", 0, 0, "header value")
        if names.isdisjoint(k.lower() for k in extra):
            return head + "".join(f"{k}: {v}\r\n" for k, v in extra.items()).encode()
        # A call's field replaces the session's of the same name, in any case.
        replaced = {k.lower() for k in extra}
        both = {k: v for k, v in fields.items() if k.lower() not in replaced} | dict(extra)
        return start + "".join(f"{k}: {v}\r\n" for k, v in both.items()).encode()

    async def post(content: bytes, extra: Mapping[str, str], resend: bool = False) -> h1.H1Answer:
        # h1's exceptions go up as they are: `library_errors` around the call maps them.
        if unsendable:
            raise UnicodeEncodeError("ascii", "", 0, 0, "header value")
        payload = b"%scontent-length: %d\r\n\r\n%s" % (
            head_with(extra) if extra else head,
            len(content),
            content,
        )
        try:
            return await client.request(
                origin,
                payload,
                connect_timeout=connect,
                read_timeout=read,
                pool_timeout=pool,
                whole=True,
            )
        except h1_errors.StaleConnection as exc:
            # `_stale`'s rule: a reused connection that failed before any answer.
            if not resend:
                raise
            log.info("upstream_post_resent", error=type(exc).__name__)
        return await client.request(
            origin,
            payload,
            connect_timeout=connect,
            read_timeout=read,
            pool_timeout=pool,
            fresh=True,
            whole=True,
        )

    return post


def _credential(fields: Mapping[str, str]) -> str:
    """The h1 pool's credential key: the same hash the session pool keys by."""
    for name, value in fields.items():
        if name.lower() == "authorization":
            return credential_hash(value)
    return credential_hash(None)


def _token(name: str) -> bool:
    # RFC 9110 section 5.6.2: a field name is a token.
    return bool(name) and name.isascii() and all(c in _TCHAR for c in name)


_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
