"""Sealing `requestState`: what the gateway needs on a retry, under AES-GCM.

2026-07-28 basic/patterns/mrtr: `requestState` is attacker-controlled input;
its integrity MUST be protected, and it SHOULD bind the principal, a short
expiry and the originating request (method and a digest of its parameters).
The claims sealed here are exactly those, plus the parked exchange's id, the
replica that holds it and the round it belongs to (a state from an earlier
round is stale: every round gets a fresh state, so they differ).

Token layout, base64url without padding::

    version (1 byte) | key id (4 bytes) | nonce (12 bytes) | ciphertext + tag (16)

The version byte and key id are authenticated as associated data. Keys come
from `MCP_SHIM_STATE_KEY` (several, comma-separated, for rotation: the first
seals, all open). Pure: no clock (callers pass `now`), randomness only for
nonces and generated keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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

# Parameters that change between the first call and its retries, or are
# per-request metadata: not part of "the same request".
_UNBOUND_PARAMS: Final = frozenset({"_meta", "inputResponses", "requestState"})
_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9_-]+$")
_KEY_HINT = (
    "each key must be 16, 24 or 32 random bytes in base64 (32 recommended), e.g. "
    "`openssl rand -base64 32`"
)


@dataclass(frozen=True, slots=True)
class Claims:
    """What a sealed `requestState` says."""

    exchange: str  # id of the parked exchange
    replica: str  # the replica holding it: its advertised base URL, or a local id
    caller: str  # digest of the caller's credentials
    method: str
    digest: str  # params_digest of the original request
    expires_at: int  # unix seconds
    round: int  # which input_required answer of the exchange issued it

    def to_json(self) -> dict[str, Any]:
        return {
            "x": self.exchange,
            "r": self.replica,
            "c": self.caller,
            "m": self.method,
            "d": self.digest,
            "e": self.expires_at,
            "n": self.round,
        }

    @staticmethod
    def from_json(data: Any) -> Claims | None:
        if not isinstance(data, dict):
            return None
        strings = [data.get(k) for k in ("x", "r", "c", "m", "d")]
        numbers = [data.get(k) for k in ("e", "n")]
        if not all(isinstance(s, str) for s in strings):
            return None
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            return None
        return Claims(
            exchange=data["x"],
            replica=data["r"],
            caller=data["c"],
            method=data["m"],
            digest=data["d"],
            expires_at=data["e"],
            round=data["n"],
        )


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes | None:
    """Strict base64url: only the alphabet, canonical (re-encodes to the same text)."""
    if not _TOKEN_CHARS.match(text) or len(text) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if _b64url(raw) == text else None


def params_digest(params: Mapping[str, Any]) -> str:
    """Digest of the request's own parameters (name/uri and arguments), order-free."""
    bound = {k: v for k, v in params.items() if k not in _UNBOUND_PARAMS}
    return _b64url(hashlib.sha256(jsonio.dumps_sorted(bound)).digest()[:16])


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

    def seal(self, claims: Claims) -> str:
        return self.seal_bytes(jsonio.dumps(claims.to_json()))

    def open(self, token: object) -> Claims | None:
        """The claims, or None for anything that is not a state we sealed, unaltered.

        Expiry and binding are the caller's checks (it knows the clock and the
        request); one None for every failure keeps attackers guessing.
        """
        plain = self.open_bytes(token)
        if plain is None:
            return None
        try:
            return Claims.from_json(jsonio.loads(plain))
        except jsonio.JSONDecodeError:
            return None

    def seal_bytes(self, plain: bytes, purpose: bytes = b"") -> str:
        """`plain` sealed; `purpose` is authenticated too, so a token sealed for one
        use (a session id, app/cluster/replicas.py) never opens as another (a requestState)."""
        kid, aead = self._keys()[0]
        prefix = bytes([VERSION]) + kid
        nonce = os.urandom(NONCE_LEN)
        sealed = aead.encrypt(nonce, plain, prefix + purpose)
        return _b64url(prefix + nonce + sealed)

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
