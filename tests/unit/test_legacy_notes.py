"""The workers' notes about legacy sessions (app/fronts/legacy/notes.py) and what a
worker serves on a guest copy of another's session (app/fronts/legacy/front.py):
a note opens only with the deployment's key and as a note, never as its reply
nor as a session id; a plain request is served where it lands, everything else
(and a string id an integer id shares the text of) goes to the owner."""

from __future__ import annotations

from typing import Any

import pytest

from app.fronts.legacy.front import _plain_request
from app.fronts.legacy.notes import Notes
from app.fronts.legacy.sessions import shares_integer_text
from app.mrtr.state import Sealer, generate_key
from app.replicas import OwnedIds, ReplicaRelay
from app.upstream.pool import credential_hash

KEY = generate_key()
ME = "http://10.0.0.5:8080"


def notes(key: bytes = KEY) -> Notes:
    relay = ReplicaRelay(connect_timeout_s=1.0, request_timeout_s=1.0)
    return Notes(Sealer([key]), relay, ME)


def sealed(note: dict[str, Any], key: bytes = KEY) -> bytes:
    """A note as `Notes.send` puts it on the wire."""
    from app import jsonio

    return Sealer([key]).seal_bytes(jsonio.dumps(note), b"mcp-shim legacy note v1").encode()


def test_a_note_opens_with_the_deployment_s_key_only() -> None:
    note = {"k": "touch", "ids": ["a", "b"]}
    assert notes().open(sealed(note)) == note
    assert notes(generate_key()).open(sealed(note)) is None
    body = bytearray(sealed(note))
    body[-3] ^= 1
    assert notes().open(bytes(body)) is None
    assert notes().open(b"\xff\xfe") is None
    assert notes().open(b"") is None


def test_a_reply_or_a_session_id_never_opens_as_a_note() -> None:
    reply = notes().seal_reply({"k": "end", "ids": ["x"]})
    assert notes().open(reply) is None
    session_id = OwnedIds(Sealer([KEY]), ME).mint(credential_hash(None))
    assert notes().open(session_id.encode()) is None


@pytest.mark.parametrize(
    ("request_id", "shares"),
    [
        *[("1", True), ("-3", True), ("0", True), ("12345678901234567890", True)],
        *[("01", False), ("1.0", False), (" 1", False), ("1a", False), ("-0", False)],
        *[("", False), (1, False), ("abc", False)],
    ],
)
def test_which_string_ids_share_an_integer_id_s_text(request_id: Any, shares: bool) -> None:
    assert shares_integer_text(request_id) is shares
    if isinstance(request_id, str) and shares:
        assert str(int(request_id)) == request_id


def call(rid: Any, method: str = "tools/call") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {}}


@pytest.mark.parametrize(
    ("body", "plain"),
    [
        (call(7), True),
        (call("req-7"), True),
        (call("7"), False),  # its twin 7 may be in flight: the owner's IdTurns decides
        (call(7, "initialize"), False),
        ({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}, False),
        ({"jsonrpc": "2.0", "id": 3, "result": {}}, False),  # an answer to a server request
        ([call(1), call(2)], False),  # a batch
        ({"jsonrpc": "2.0", "id": 7, "method": 5}, False),
    ],
)
def test_what_a_worker_serves_on_a_guest_copy(body: Any, plain: bool) -> None:
    assert _plain_request(body) is plain
