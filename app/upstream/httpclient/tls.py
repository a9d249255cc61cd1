"""TLS contexts toward the upstream, with their CA certificates read on the first
TLS handshake instead of at start-up.

A context that verifies servers parses a whole CA bundle into OpenSSL's memory
when it is made: about 0.9 MB of RSS each, 2 MB for the three a gateway used to
make at every start (bench/memory.py; docs/performance.md), although
an upstream over plain http never uses any of them:

- the upstream transport's own (httpx's `create_ssl_context(verify=True,
  trust_env=False)`: certifi's bundle), now `upstream_context()`;
- the two aiohttp makes when it is imported (`aiohttp/connector.py`,
  `_SSL_CONTEXT_VERIFIED` and `_SSL_CONTEXT_UNVERIFIED`, the system store),
  which only requests that bring no context of their own use (the gateway's
  always bring the transport's). `defer_aiohttp_defaults` replaces them with
  the same contexts, deferred; it runs right after aiohttp is imported
  (`app/upstream/httpclient/aiohttp_client.py`, itself imported by the first request
  that needs aiohttp), so the imports that follow reuse the memory the first
  ones are given back.

Verification itself is unchanged and set at once (CERT_REQUIRED, host names
checked); only the trust store is filled later, by `wrap_bio`/`wrap_socket`,
which every handshake goes through (uvloop's and asyncio's SSL protocols call
`wrap_bio`) before a byte is exchanged. If reading the bundle fails, that
handshake fails: nothing is ever verified against an empty store.

httpx's own transport (no longer an option toward the upstream) would run
`wrap_bio` of any SSLContext subclass in a worker thread (anyio), a thread hop
per handshake that neither h1 nor aiohttp needs.
"""

from __future__ import annotations

import os
import socket
import ssl
import sys
from collections.abc import Callable


class DeferredCAContext(ssl.SSLContext):
    """An SSLContext whose CA certificates `_load` reads on the first wrap."""

    _load: Callable[[ssl.SSLContext], None] | None = None

    def _ready(self) -> None:
        load = self._load
        if load is not None:
            load(self)
            self._load = None

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        self._ready()
        return super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)

    def wrap_socket(
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        self._ready()
        return super().wrap_socket(
            sock,
            server_side,
            do_handshake_on_connect,
            suppress_ragged_eofs,
            server_hostname,
            session,
        )

    @property
    def loaded(self) -> bool:
        """Whether the CA certificates have been read (a handshake was started)."""
        return self._load is None


def deferred(load: Callable[[ssl.SSLContext], None]) -> DeferredCAContext:
    """A client context that verifies servers, as `ssl.create_default_context()`
    makes it, with `load` filling its trust store on the first wrap."""
    context = DeferredCAContext(ssl.PROTOCOL_TLS_CLIENT)
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = True
    keylog = os.environ.get("SSLKEYLOGFILE")
    if keylog and not sys.flags.ignore_environment:
        context.keylog_filename = keylog
    context._load = load
    return context


def _certifi(context: ssl.SSLContext) -> None:
    import certifi  # httpx's own choice of bundle; imported when first needed

    context.load_verify_locations(cafile=certifi.where())


def upstream_context() -> DeferredCAContext:
    """What httpx's `create_ssl_context(verify=True, trust_env=False)` makes (the
    transports' default): certifi's CA bundle, read on the first handshake."""
    return deferred(_certifi)


def _system_store(context: ssl.SSLContext) -> None:
    context.load_default_certs()


def _aiohttp_verified() -> DeferredCAContext:
    """aiohttp's `_make_ssl_context(True)`, deferred."""
    context = deferred(_system_store)
    context.set_alpn_protocols(("http/1.1",))
    return context


def _aiohttp_unverified() -> DeferredCAContext:
    """aiohttp's `_make_ssl_context(False)`, deferred (it reads the system store too,
    although it verifies nothing)."""
    context = DeferredCAContext(ssl.PROTOCOL_TLS_CLIENT)
    context.options |= ssl.OP_NO_SSLv2 | ssl.OP_NO_SSLv3 | ssl.OP_NO_COMPRESSION
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context._load = ssl.SSLContext.set_default_verify_paths
    context.set_alpn_protocols(("http/1.1",))
    return context


def defer_aiohttp_defaults() -> bool:
    """Replace aiohttp's import-time contexts with deferred ones; False if this
    aiohttp has none under those names (then nothing is changed:
    tests/unit/test_tls.py fails, so a version bump is noticed)."""
    from aiohttp import connector as _aiohttp_connector

    if not isinstance(getattr(_aiohttp_connector, "_SSL_CONTEXT_VERIFIED", None), ssl.SSLContext):
        return False
    if not isinstance(getattr(_aiohttp_connector, "_SSL_CONTEXT_UNVERIFIED", None), ssl.SSLContext):
        return False
    _aiohttp_connector._SSL_CONTEXT_VERIFIED = _aiohttp_verified()
    _aiohttp_connector._SSL_CONTEXT_UNVERIFIED = _aiohttp_unverified()
    return True
