"""Owned ids and the relay's headers (app/cluster/replicas.py): an id names its owner
replica under the deployment's seal, so no client can forge one or steer a
request to an address of its choosing; the relay passes a request on as it
came, marked as relayed once."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import structlog
from starlette.responses import Response

from app.cluster.replicas import (
    HOP_HEADER,
    OwnedIds,
    ReplicaRelay,
    reachable,
    relayed_headers,
    same_route,
    split_replica,
)
from app.cluster.sealing import Sealer, caller_digest, generate_key
from app.mrtr.state import Claims, open_state, seal_state
from app.upstream.sessions.pool import credential_hash

KEY = generate_key()
ME = "http://10.0.0.5:8080"
OTHER = "http://10.0.0.6:8080"
ALICE = credential_hash("Bearer alice")
MALLORY = credential_hash("Bearer mallory")


def ids(me: str = ME, key: bytes = KEY) -> OwnedIds:
    return OwnedIds(Sealer([key]), me)


def test_an_id_names_its_owner_only_for_its_credential() -> None:
    token = ids(OTHER).mint(ALICE)
    assert ids().owner(token, ALICE) == OTHER
    assert ids().owner(token, MALLORY) is None
    # Visible ASCII (2025-11-25 streamable-http: 0x21 to 0x7E), opaque: no address shown.
    assert all(0x21 <= ord(c) <= 0x7E for c in token)
    assert "10.0.0.6" not in token


def test_ids_carry_256_random_bits_each() -> None:
    minted = {ids().mint(ALICE) for _ in range(200)}
    assert len(minted) == 200
    # The random part alone is 32 bytes (43 base64url characters) inside the seal.
    assert all(len(token) > 43 + 32 for token in minted)


def test_an_altered_or_foreign_id_names_nobody() -> None:
    token = ids(OTHER).mint(ALICE)
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[-20] ^= 1
    altered = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    assert ids().owner(altered, ALICE) is None
    # Sealed with another deployment's key: not ours.
    assert ids(key=generate_key()).owner(token, ALICE) is None
    assert ids().owner("not-a-token", ALICE) is None
    assert ids().owner("", ALICE) is None


def test_a_request_state_is_no_session_id_and_back() -> None:
    sealer = Sealer([KEY])
    claims = Claims("ex", OTHER, caller_digest(ALICE), "tools/call", "d", 1_900_000_000, 1)
    state = seal_state(sealer, claims)
    assert OwnedIds(sealer, ME).owner(state, ALICE) is None
    assert open_state(sealer, OwnedIds(sealer, OTHER).mint(ALICE)) is None


def test_elsewhere_only_for_another_reachable_owner_and_never_twice() -> None:
    token = ids(OTHER).mint(ALICE)
    assert ids().elsewhere(token, ALICE, hopped=False) == OTHER
    # Relayed here already: never relayed again, whatever the configuration.
    assert ids().elsewhere(token, ALICE, hopped=True) is None
    # Ours (a session that ended here), or not ours at all: answered here (404).
    assert ids(OTHER).elsewhere(token, ALICE, hopped=False) is None
    assert ids().elsewhere(None, ALICE, hopped=False) is None
    assert ids().elsewhere(token, MALLORY, hopped=False) is None
    # A replica that advertised no URL cannot be reached by anyone.
    local = ids("local:0123456789abcdef").mint(ALICE)
    assert ids().elsewhere(local, ALICE, hopped=False) is None
    assert not reachable("local:0123456789abcdef") and reachable(OTHER)


def test_an_owner_s_url_splits_into_its_process_and_its_server_s_route() -> None:
    # One of many servers (app/servers): the worker's URL, then the route.
    assert split_replica("http://127.0.0.1:4100/servers/b") == (
        "http://127.0.0.1:4100",
        "/servers/b",
    )
    assert split_replica("http://127.0.0.1:4100/servers/b/") == (
        "http://127.0.0.1:4100",
        "/servers/b",
    )
    # A single server's, and the aggregated /mcp's: no route.
    assert split_replica(ME) == (ME, "")
    assert split_replica(ME + "/") == (ME, "")
    assert split_replica("local:0123") == ("local:0123", "")


def test_state_of_one_server_is_never_another_server_s() -> None:
    b, c = ME + "/servers/b", ME + "/servers/c"
    assert same_route(OTHER + "/servers/b", b)  # the same server on another worker
    assert not same_route(c, b) and not same_route(ME, b) and not same_route(b, ME)
    assert same_route(OTHER, ME)
    # A session id of server b's is unknown on server c's route, on every worker.
    token = ids(OTHER + "/servers/b").mint(ALICE)
    assert ids(b).elsewhere(token, ALICE, hopped=False) == OTHER + "/servers/b"
    assert ids(c).owner(token, ALICE) is None
    assert ids(ME).owner(token, ALICE) is None


def test_relayed_headers_keep_the_request_and_mark_the_hop() -> None:
    structlog.contextvars.bind_contextvars(request_id="req-1")
    try:
        out = relayed_headers(
            [
                ("host", "mcp.example.com"),
                ("authorization", "Bearer alice"),
                ("mcp-session-id", "abc"),
                ("last-event-id", "7"),
                ("connection", "keep-alive"),
                ("content-length", "12"),
                ("transfer-encoding", "chunked"),
                ("x-request-id", "client-chosen"),
                (HOP_HEADER, "forged"),
            ]
        )
    finally:
        structlog.contextvars.unbind_contextvars("request_id")
    assert out == [
        ("host", "mcp.example.com"),
        ("authorization", "Bearer alice"),
        ("mcp-session-id", "abc"),
        ("last-event-id", "7"),
        (HOP_HEADER, "1"),
        ("x-request-id", "req-1"),
    ]


class _Siblings:
    """The sibling workers' outboxes (app/serving/handoff.py), recorded."""

    def __init__(self, *urls: str) -> None:
        self.urls = set(urls)
        self.sent: list[tuple[str, bytes]] = []

    def reaches(self, owner: str) -> bool:
        return owner in self.urls

    def send(self, owner: str, scope: Mapping[str, Any], request: bytes) -> bool:
        self.sent.append((owner, request))
        return True


async def test_a_handed_over_request_keeps_its_server_s_route() -> None:
    """The owner of a stdio session of server b gets the connection with the
    request on b's route, whichever path the relaying app saw it on."""
    relay = ReplicaRelay(connect_timeout_s=1.0, request_timeout_s=1.0)
    siblings = _Siblings(OTHER)
    relay.handoff = siblings
    for owner, path in ((OTHER + "/servers/b", "/servers/b/mcp"), (OTHER, "/mcp")):
        answer = relay.answer(
            owner,
            "POST",
            "/mcp",
            [("mcp-session-id", "s")],
            b"{}",
            what="legacy_session",
            long_lived=False,
            unreachable=lambda: Response(status_code=502),
            write_timeout_s=1.0,
        )

        async def never() -> dict[str, Any]:
            raise AssertionError("nothing is read or written here once handed over")

        await answer({}, never, never)  # type: ignore[arg-type]
        sibling, request = siblings.sent[-1]
        assert sibling == OTHER
        assert request.startswith(f"POST {path} HTTP/1.1\r\n".encode())
    # A worker no outbox reaches (another pod's) is relayed over HTTP instead.
    assert not relay.handoff.reaches(ME)
    await relay.aclose()
