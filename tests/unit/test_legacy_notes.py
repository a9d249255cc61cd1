"""The workers' notes about legacy sessions (app/cluster/notes.py) and what a
worker serves on a guest copy of another's session (app/fronts/legacy/front.py):
a note opens only with the deployment's key and as a note, never as its reply
nor as a session id; a plain request is served where it lands, everything else
(and a string id an integer id shares the text of) goes to the owner."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pytest
from structlog.testing import capture_logs

from app.cluster.notes import CLOCK_SKEW_S, NOTE_LIFETIME_S, Notes
from app.cluster.replicas import OwnedIds, ReplicaRelay
from app.cluster.sealing import Sealer, generate_key
from app.cluster.session import shares_integer_text
from app.fronts.legacy.front import _plain_request
from app.upstream.sessions.pool import credential_hash

KEY = generate_key()
ME = "http://10.0.0.5:8080"


def notes(key: bytes = KEY) -> Notes:
    relay = ReplicaRelay(connect_timeout_s=1.0, request_timeout_s=1.0)
    return Notes(Sealer([key]), relay, ME)


def sealed(note: dict[str, Any], key: bytes = KEY) -> bytes:
    """A note as `Notes.send` puts it on the wire."""
    return notes(key).seal(note)


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


# ---------------------------------------------------------------------------
# Freshness: a captured note cannot be sent again
# ---------------------------------------------------------------------------


class Clock:
    """Wall-clock seconds, moved by the test."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def clocked(clock: Clock) -> Notes:
    relay = ReplicaRelay(connect_timeout_s=1.0, request_timeout_s=1.0)
    return Notes(Sealer([KEY]), relay, ME, clock=clock)


def test_a_note_opens_once_and_only_within_its_lifetime() -> None:
    sender_clock, receiver_clock = Clock(), Clock()
    sender, receiver = clocked(sender_clock), clocked(receiver_clock)
    cancel = {"k": "cancel", "s": "session", "i": 7}
    with capture_logs() as logs:
        body = sender.seal(cancel)
        assert receiver.open(body) == cancel
        assert receiver.open(body) is None  # the same note again: a replay
        # Sealed now, arriving a lifetime and a bit later: as good as lost.
        late = sender.seal(cancel)
        receiver_clock.now += NOTE_LIFETIME_S + 0.001
        assert receiver.open(late) is None
        # Within the lifetime, by a receiver whose clock is behind the sender's.
        sender_clock.now = receiver_clock.now + CLOCK_SKEW_S - 0.5
        assert receiver.open(sender.seal(cancel)) == cancel
        # A sender's clock further ahead than the skew allows.
        sender_clock.now = receiver_clock.now + CLOCK_SKEW_S + 0.5
        assert receiver.open(sender.seal(cancel)) is None
    refusals = [line for line in logs if line["event"] == "replica_note_refused"]
    assert [r["reason"] for r in refusals] == ["replayed", "stale", "from_the_future"]
    assert refusals[0]["kind"] == "cancel" and refusals[0]["lifetime_s"] == NOTE_LIFETIME_S
    assert all("session" not in str(r) for r in refusals)  # no note content logged


def test_a_note_of_the_format_without_a_time_never_opens() -> None:
    from app import jsonio

    old = Sealer([KEY]).seal_bytes(
        jsonio.dumps({"k": "end", "ids": ["s"]}), b"mcp-shim legacy note v1"
    )
    assert notes().open(old.encode()) is None
    # Nor a v2 seal of a note without the time.
    bare = Sealer([KEY]).seal_bytes(jsonio.dumps({"m": {"k": "end"}}), b"mcp-shim legacy note v2")
    assert notes().open(bare.encode()) is None


def test_the_nonces_kept_are_bounded_and_forgotten_after_the_lifetime() -> None:
    clock = Clock()
    receiver = clocked(clock)
    sender = clocked(clock)
    bodies = [sender.seal({"k": "touch", "n": n}) for n in range(3)]
    for body in bodies:
        assert receiver.open(body) is not None
    assert len(receiver._seen) == 3
    clock.now += NOTE_LIFETIME_S + CLOCK_SKEW_S
    assert receiver.open(sender.seal({"k": "touch"})) is not None
    assert len(receiver._seen) == 1  # the three are stale now: forgotten
    # At the bound, the oldest is forgotten first.
    with patch("app.cluster.notes._MAX_SEEN_NOTES", 2):
        assert receiver.open(sender.seal({"k": "touch"})) is not None
        assert receiver.open(sender.seal({"k": "touch"})) is not None
        assert len(receiver._seen) == 2


async def test_a_stale_answer_is_not_read() -> None:
    """The answer to a note is sealed with its time too: one older than the
    lifetime (an answer captured earlier, sent in place of the real one) is
    taken for no answer."""
    clock = Clock()
    owner = clocked(clock)
    answers: list[bytes] = []

    class Relay:
        request_timeout_s = 1.0

        async def note(self, replica: str, body: bytes, *, timeout_s: float) -> bytes | None:
            return answers.pop(0)

    worker = Notes(Sealer([KEY]), Relay(), ME, clock=clock)  # type: ignore[arg-type]
    answers.append(owner.seal_reply({"gone": []}))
    assert await worker.send(ME, {"k": "touch"}) == {"gone": []}
    answers.append(owner.seal_reply({"gone": []}))
    clock.now += NOTE_LIFETIME_S + 1
    assert await worker.send(ME, {"k": "touch"}) is None
