"""requestState sealing (app/mrtr/state.py on app/cluster/sealing.py): AES-GCM, key
rotation, strict decoding."""

from __future__ import annotations

import base64
import os
from dataclasses import replace

import pytest

from app.cluster.sealing import MAX_TOKEN_CHARS, Sealer, caller_digest, generate_key, parse_keys
from app.mrtr.state import Claims, open_state, params_digest, seal_state

CLAIMS = Claims(
    exchange="ex-123",
    replica="http://10.0.0.5:8080",
    caller="c0ffee",
    method="tools/call",
    digest="d1",
    expires_at=1_900_000_000,
    round=2,
)


def test_seal_and_open_round_trip() -> None:
    sealer = Sealer([generate_key()])
    token = seal_state(sealer, CLAIMS)
    assert open_state(sealer, token) == CLAIMS
    # Only the base64url alphabet: safe in JSON and URLs, opaque to the client.
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert "ex-123" not in token and "tools/call" not in token


def test_every_seal_is_fresh() -> None:
    sealer = Sealer([generate_key()])
    assert seal_state(sealer, CLAIMS) != seal_state(sealer, CLAIMS)  # a new nonce every time


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t + "-TAMPERED",  # the conformance suite's tamper ('-' is in the alphabet)
        lambda t: t[:-1],
        lambda t: t[:-4],
        lambda t: t[:20],
        lambda t: t[:30] + ("A" if t[30] != "A" else "B") + t[31:],
        lambda t: t + "A",
        lambda t: t + "=",
        lambda t: t.replace(t[5], "!", 1),
        lambda t: " " + t,
        lambda t: t + "\n",
        lambda t: "",
        lambda t: "A" * (MAX_TOKEN_CHARS + 1),
    ],
)
def test_altered_tokens_do_not_open(tamper: object) -> None:
    sealer = Sealer([generate_key()])
    token = seal_state(sealer, CLAIMS)
    assert open_state(sealer, tamper(token)) is None  # type: ignore[operator]


def test_non_canonical_encoding_is_refused() -> None:
    # A lax base64 decoder ignores the unused low bits of the last character:
    # flipping one gives another text for the same bytes. Only ours opens.
    sealer = Sealer([generate_key()])
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for k in range(4):
        token = seal_state(sealer, replace(CLAIMS, exchange="e" * (10 + k)))
        if len(token) % 4 in (2, 3):
            break
    else:  # pragma: no cover - some length mod 4 always has spare bits
        raise AssertionError("no token with spare bits")
    sibling = token[:-1] + alphabet[alphabet.index(token[-1]) ^ 1]
    assert base64.urlsafe_b64decode(sibling + "==") == base64.urlsafe_b64decode(token + "==")
    assert open_state(sealer, token) is not None
    assert open_state(sealer, sibling) is None


@pytest.mark.parametrize("token", [None, 42, ["a"], {"x": 1}])
def test_non_strings_do_not_open(token: object) -> None:
    assert open_state(Sealer([generate_key()]), token) is None


def test_other_key_does_not_open() -> None:
    token = seal_state(Sealer([generate_key()]), CLAIMS)
    assert open_state(Sealer([generate_key()]), token) is None


def test_rotation_first_key_seals_all_keys_open() -> None:
    old, new = generate_key(), generate_key()
    before = seal_state(Sealer([old]), CLAIMS)
    rotated = Sealer([new, old])
    assert open_state(rotated, before) == CLAIMS
    after = seal_state(rotated, CLAIMS)
    assert open_state(Sealer([new]), after) == CLAIMS
    assert open_state(Sealer([old]), after) is None


def test_claims_from_json_rejects_wrong_types() -> None:
    good = CLAIMS.to_json()
    assert Claims.from_json(good) == CLAIMS
    for key, value in [("x", 1), ("e", "soon"), ("n", True), ("m", None)]:
        assert Claims.from_json({**good, key: value}) is None
    assert Claims.from_json([good]) is None


def test_params_digest_binds_name_and_arguments_only() -> None:
    base = {"name": "t", "arguments": {"a": 1, "b": [1, 2]}}
    digest = params_digest(base)
    # Key order, _meta, inputResponses and requestState do not matter...
    assert params_digest({"arguments": {"b": [1, 2], "a": 1}, "name": "t"}) == digest
    assert (
        params_digest(
            {
                **base,
                "_meta": {"progressToken": 7},
                "inputResponses": {"k": {}},
                "requestState": "s",
            }
        )
        == digest
    )
    # ...the request's own parameters do.
    assert params_digest({**base, "name": "u"}) != digest
    assert params_digest({"name": "t", "arguments": {"a": 2, "b": [1, 2]}}) != digest
    assert params_digest({"name": "t", "arguments": {"a": 1, "b": [2, 1]}}) != digest


def test_caller_digest_is_short_and_stable() -> None:
    assert caller_digest("-") == "-"
    assert caller_digest("ab" * 32) == "ab" * 16


def test_parse_keys_accepts_base64_and_base64url_and_several() -> None:
    one, two = os.urandom(32), os.urandom(16)
    text = (
        base64.b64encode(one).decode() + " , " + base64.urlsafe_b64encode(two).decode().rstrip("=")
    )
    assert parse_keys(text) == [one, two]


# Fixed values: pytest-xdist's workers must collect the same test ids.
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no key given"),
        (" , ", "no key given"),
        ("abc$%^", "key 1 of 1 is not base64"),
        (base64.b64encode(b"short").decode(), "decodes to 5 bytes"),
        (base64.b64encode(b"k" * 32).decode() + ",,", "key 2 of 3 is empty"),
    ],
)
def test_parse_keys_explains_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        parse_keys(text)
    assert text.strip(" ,") == "" or text.split(",")[0] not in str(caught.value)


def test_a_key_of_the_wrong_size_is_refused_when_the_sealer_is_made() -> None:
    # The cipher objects are made by the first seal or open (cryptography is
    # imported then, not at start); a bad key must still fail at start-up.
    with pytest.raises(ValueError, match="16, 24, 32 bytes"):
        Sealer([generate_key(), b"short"])
