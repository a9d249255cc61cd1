"""The state key's sealing, shared by every replica and worker process: what
a client holds that names a replica (a parked call's `requestState`, a legacy
session id, a task id) and the notes replicas send each other are sealed here
under AES-GCM, so a client can neither forge nor alter them.

Token layout, base64url without padding::

    version (1 byte) | key id (4 bytes) | nonce (12 bytes) | ciphertext + tag (16)

The version byte and key id are authenticated as associated data, with the
token's purpose (each use seals under its own, so a token sealed for one use
never opens as another). Keys come from `MCP_SHIM_STATE_KEY` (several,
comma-separated, for rotation: the first seals, all open). Pure: no clock,
randomness only for nonces and generated keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from app import jsonio

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VERSION: Final = 1
KEY_ID_LEN: Final = 4
NONCE_LEN: Final = 12
TAG_LEN: Final = 16
# A sealed state is ~250 characters; anything much longer is not ours.
MAX_TOKEN_CHARS: Final = 4096
KEY_SIZES: Final = (16, 24, 32)
# The base64url characters that hold a token's version, key id and nonce (4 per 3 bytes).
_NONCE_CHARS: Final = -(-(1 + KEY_ID_LEN + NONCE_LEN) * 4 // 3)

_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9_-]+$")
_KEY_HINT = (
    "each key must be 16, 24 or 32 random bytes in base64 (32 recommended), e.g. "
    "`openssl rand -base64 32`"
)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes | None:
    """Strict base64url: only the alphabet, canonical (re-encodes to the same text)."""
    if not _TOKEN_CHARS.match(text) or len(text) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if b64url(raw) == text else None


def caller_digest(credential_hash: str) -> str:
    """Short form of the pool's credential hash (a SHA-256 hex digest, or "-")."""
    return credential_hash[:32]


def parse_keys(text: str) -> list[bytes]:
    """`MCP_SHIM_STATE_KEY`: comma-separated base64 keys; ValueError names the bad one."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise ValueError(f"no key given; {_KEY_HINT}")
    keys: list[bytes] = []
    for n, item in enumerate(items, start=1):
        if not item:
            raise ValueError(f"key {n} of {len(items)} is empty")
        padded = item + "=" * (-len(item) % 4)
        try:
            raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"key {n} of {len(items)} is not base64; {_KEY_HINT}") from None
        if len(raw) not in KEY_SIZES:
            raise ValueError(f"key {n} of {len(items)} decodes to {len(raw)} bytes; {_KEY_HINT}")
        keys.append(raw)
    return keys


def sealed_nonce(token: str) -> str:
    """What tells one sealing from every other, in a token that opened: its
    version, key id and nonce (12 random bytes per seal, authenticated with the
    rest), so a token sent again is known by it."""
    return token[:_NONCE_CHARS]


def generate_key() -> bytes:
    return os.urandom(32)


def key_id(key: bytes) -> bytes:
    return hashlib.sha256(b"mcp-shim requestState key\x00" + key).digest()[:KEY_ID_LEN]


class Sealer:
    """Seals claims with the first key; opens with any (rotation)."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("at least one key is needed")
        if any(len(k) not in KEY_SIZES for k in keys):
            raise ValueError(f"a key must be {', '.join(map(str, KEY_SIZES))} bytes long")
        self._raw = list(keys)
        self._ciphers: list[tuple[bytes, AESGCM]] | None = None

    def subkeys(self, label: bytes) -> list[bytes]:
        """One key per state key, in the same order (the first is current), for a
        use other than sealing: HMAC-SHA256 of `label` under each. Keys for
        different labels tell nothing of each other nor of the state keys."""
        return [
            hmac.new(key, b"mcp-shim subkey\x00" + label, hashlib.sha256).digest()
            for key in self._raw
        ]

    def _keys(self) -> list[tuple[bytes, AESGCM]]:
        if self._ciphers is None:
            # cryptography (a Rust extension with its own OpenSSL) adds about 7 MB
            # of RSS once imported; it is imported by the first state sealed or
            # opened, not at start, as most gateways never park a call
            # (bench/memory.py; docs/performance.md).
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._ciphers = [(key_id(k), AESGCM(k)) for k in self._raw]
        return self._ciphers

    def seal_bytes(self, plain: bytes, purpose: bytes = b"") -> str:
        """`plain` sealed; `purpose` is authenticated too, so a token sealed for one
        use (a session id, app/cluster/replicas.py) never opens as another (a requestState,
        app/mrtr/state.py)."""
        kid, aead = self._keys()[0]
        prefix = bytes([VERSION]) + kid
        nonce = os.urandom(NONCE_LEN)
        sealed = aead.encrypt(nonce, plain, prefix + purpose)
        return b64url(prefix + nonce + sealed)

    def open_object(
        self, token: object, purpose: bytes = b"", max_chars: int = MAX_TOKEN_CHARS
    ) -> dict[str, Any] | None:
        """The JSON object `seal_bytes` sealed for `purpose`, or None: not ours,
        altered, or not an object (each kind of sealed id checks its own fields)."""
        plain = self.open_bytes(token, purpose, max_chars)
        if plain is None:
            return None
        try:
            data = jsonio.loads(plain)
        except jsonio.JSONDecodeError:
            return None
        return data if isinstance(data, dict) else None

    def open_bytes(
        self, token: object, purpose: bytes = b"", max_chars: int = MAX_TOKEN_CHARS
    ) -> bytes | None:
        """What `seal_bytes` sealed for `purpose`, or None."""
        if not isinstance(token, str) or not token or len(token) > max_chars:
            return None
        raw = _unb64url(token)
        if raw is None or len(raw) < 1 + KEY_ID_LEN + NONCE_LEN + TAG_LEN or raw[0] != VERSION:
            return None
        prefix = raw[: 1 + KEY_ID_LEN]
        kid = prefix[1:]
        nonce = raw[len(prefix) : len(prefix) + NONCE_LEN]
        sealed = raw[len(prefix) + NONCE_LEN :]
        keys = self._keys()
        from cryptography.exceptions import InvalidTag  # already imported by _keys()

        for candidate, aead in keys:
            if candidate != kid:
                continue
            try:
                return aead.decrypt(nonce, sealed, prefix + purpose)
            except InvalidTag:
                continue
        return None
