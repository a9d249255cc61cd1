"""TLS contexts toward the upstream with their CA certificates read on the first
handshake (app/upstream/httpclient/tls.py): the same verification as the contexts they
replace, a real handshake that verifies, and none that succeeds unverified."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import uvloop
from aiohttp import connector as aiohttp_connector
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import app.upstream.httpclient.aiohttp_client  # noqa: F401 - importing it defers aiohttp's contexts
from app.upstream.httpclient import tls

# The settings a verifying client context carries; the trust store is compared apart.
_SETTINGS = ("protocol", "verify_mode", "check_hostname", "options", "verify_flags")


def _settings(context: ssl.SSLContext) -> dict[str, object]:
    return {name: getattr(context, name) for name in _SETTINGS}


def _store(context: ssl.SSLContext) -> list[dict[str, object]]:
    return sorted(context.get_ca_certs(), key=repr)


@pytest.mark.parametrize("verified", [True, False])
def test_aiohttp_defaults_are_replaced_by_the_same_contexts_deferred(verified: bool) -> None:
    name = "_SSL_CONTEXT_VERIFIED" if verified else "_SSL_CONTEXT_UNVERIFIED"
    replaced = getattr(aiohttp_connector, name)
    # Importing app.upstream.httpclient.aiohttp_client replaced it (a new aiohttp without
    # these names fails here).
    assert isinstance(replaced, tls.DeferredCAContext), name
    original = aiohttp_connector._make_ssl_context(verified)
    assert _settings(replaced) == _settings(original)
    fresh = tls._aiohttp_verified() if verified else tls._aiohttp_unverified()
    assert fresh.cert_store_stats()["x509"] == 0
    fresh._ready()
    assert fresh.loaded
    assert _store(fresh) == _store(original)
    assert len(_store(original)) > 0  # the comparison compares something


def test_upstream_context_is_httpx_default_deferred() -> None:
    original = httpx.create_ssl_context(verify=True, trust_env=False)
    context = tls.upstream_context()
    assert _settings(context) == _settings(original)
    assert context.cert_store_stats()["x509"] == 0 and not context.loaded
    context._ready()
    assert _store(context) == _store(original)
    assert len(_store(original)) > 0


def _certificates(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key) files."""
    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("test CA"))
        .issuer_name(name("test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = (tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


async def _handshake(client: ssl.SSLContext, server: ssl.SSLContext) -> bytes:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server)
    port = listener.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        data = await reader.read()
        writer.close()
        return data
    finally:
        listener.close()


@pytest.mark.parametrize(
    "loop_factory", [uvloop.new_event_loop, asyncio.new_event_loop], ids=["uvloop", "asyncio"]
)
def test_first_handshake_reads_the_store_and_verifies(
    tmp_path: Path, loop_factory: Callable[[], asyncio.AbstractEventLoop]
) -> None:
    ca, cert, key = _certificates(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)

    client = tls.deferred(lambda context: context.load_verify_locations(cafile=ca))
    assert not client.loaded
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        assert runner.run(_handshake(client, server)) == b"ok"
    assert client.loaded

    # Before its store is read a context already verifies: a server its CAs do
    # not vouch for is refused, never accepted unverified.
    other = tls.deferred(lambda context: None)
    with (
        asyncio.Runner(loop_factory=loop_factory) as runner,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        runner.run(_handshake(other, server))
