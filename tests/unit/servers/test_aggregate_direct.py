"""A modern call handed straight to its member's route on the aggregated /mcp
(app/servers/aggregate/direct.py) and its answer renamed (renaming.py): which
requests it takes, the request the member gets (body bytes, Mcp-Name,
Content-Length, root path), the answer as the endpoint would rename it, and
everything else reaching the top-level graph exactly as it came. The member
route and the top-level graph are recording ASGI apps here; real servers
behind real routes: tests/integration/test_aggregate.py."""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping
from typing import Any

import pytest

from app.cluster.sealing import Sealer
from app.connection.link import LINK, ConnectionLink
from app.servers.aggregate import sealed
from app.servers.aggregate.aggregator import Aggregator
from app.servers.aggregate.direct import Direct, agrees, modern_call
from app.servers.aggregate.member_call import Seen
from app.servers.aggregate.members import Member
from app.servers.aggregate.renaming import (
    Renamer,
    may_rename,
    opened_request_id,
    server_request_id,
)
from app.servers.aggregate.uris import Owners, made
from tests.unit.servers.test_aggregate_aggregator import Link, tools

MODERN = [
    (b"host", b"127.0.0.1:8000"),
    (b"content-type", b"application/json"),
    (b"mcp-protocol-version", b"2026-07-28"),
    (b"mcp-method", b"tools/call"),
    (b"mcp-name", b"a__echo"),
    (b"content-length", b"0"),
]


def _aggregator() -> Aggregator:
    return Aggregator(
        [Member("a", Link(tools())), Member("b", Link(tools()))],
        separator="__",
        list_timeout_s=1.0,
        sealer=Sealer([os.urandom(32)]),
        left_out=lambda m, r: None,
    )


def _call(name: str = "a__echo", **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": {"text": "hi"}, **params},
    }


def _compact(message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def _headers(**changed: bytes | None) -> list[tuple[bytes, bytes]]:
    out = [(k, changed.get(k.decode().replace("-", "_"), v)) for k, v in MODERN]
    return [(k, v) for k, v in out if v is not None]


# -- which requests the shortcut takes ---------------------------------------


def test_the_headers_of_a_modern_call() -> None:
    seen = Seen(_headers())
    assert modern_call(seen)
    assert (seen.name, seen.method, seen.length, seen.repeated) == (
        b"a__echo",
        b"tools/call",
        b"0",
        False,
    )
    assert modern_call(Seen(_headers(mcp_method=b"prompts/get")))


@pytest.mark.parametrize(
    "headers",
    [
        _headers(mcp_protocol_version=b"2025-06-18"),  # a legacy client: the graph's
        _headers(mcp_protocol_version=b"2026-07-28x"),  # unknown: the graph refuses it
        _headers(mcp_protocol_version=None),
        _headers(mcp_method=b"tools/list"),  # the aggregator's own
        _headers(mcp_name=None),  # the graph refuses the missing header
        [*_headers(), (b"mcp-session-id", b"s")],  # a session is a legacy client's
        [*_headers(), (b"mcp-name", b"b__echo")],  # repeated: the graph decides
        [*_headers(), (b"content-length", b"9")],
    ],
)
def test_not_a_call_for_the_shortcut(headers: list[tuple[bytes, bytes]]) -> None:
    seen = Seen(headers)
    assert seen.repeated or not modern_call(seen)


def test_mcp_name_agrees_plain_or_base64() -> None:
    assert agrees(b"a__echo", "a__echo")
    assert agrees(b"=?base64?YV9fw6lsYW4=?=", "a__élan")
    assert not agrees(b"a__echo", "a__other")
    assert not agrees(b"=?base64?!!?=", "a__echo")


def _direct(apps: dict[str, Any] | None = None) -> tuple[Direct, Aggregator]:
    aggregator = _aggregator()
    members = apps if apps is not None else {"a": None, "b": None}
    return Direct(None, aggregator, members, 1 << 20, 5.0), aggregator  # type: ignore[arg-type]


def test_renamed_in_place_when_unambiguous() -> None:
    direct, _ = _direct()
    body = _compact(_call())
    taken = direct.taken(body, b"a__echo", b"tools/call")
    assert taken == ("a", "tools/call", body.replace(b'"a__echo"', b'"echo"'), b"echo")


@pytest.mark.parametrize(
    "body",
    [
        # The name's string twice: the one in the arguments stays as sent.
        _compact({**_call(), "params": {"name": "a__echo", "arguments": {"q": "a__echo"}}}),
        # Spaces after the colon, an escape in the body: not found in place.
        json.dumps(_call()).encode(),
        _compact(_call(arguments={"text": 'say "hi"'})),
        # The name spelled with an escape, its plain spelling once in the arguments.
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a\\u005f_echo",'
        b'"arguments":{"name":"a__echo"}}}',
    ],
)
def test_parsed_when_the_bytes_are_ambiguous(body: bytes) -> None:
    direct, _ = _direct()
    taken = direct.taken(body, b"a__echo", b"tools/call")
    assert taken is not None
    member, method, renamed, bare = taken
    sent = json.loads(body)
    sent["params"]["name"] = "echo"
    assert (member, method, json.loads(renamed), bare) == ("a", "tools/call", sent, b"echo")


def test_a_retry_opens_its_state_for_the_member_that_sealed_it() -> None:
    direct, aggregator = _direct()
    state = sealed.wrap(aggregator.sealer, sealed.STATE, "a", "member-state")
    assert state is not None
    body = _compact(_call(requestState=state))
    taken = direct.taken(body, b"a__echo", b"tools/call")
    assert taken is not None
    assert json.loads(taken[2])["params"]["requestState"] == "member-state"
    # The same state on another member's tool is not that member's to open.
    other = _compact(_call("b__echo", requestState=state))
    assert direct.taken(other, b"b__echo", b"tools/call") is None


@pytest.mark.parametrize(
    ("body", "name"),
    [
        (_compact(_call("zz__echo")), b"zz__echo"),  # no such member
        (_compact(_call("echo")), b"echo"),  # no prefix
        (_compact(_call("b__echo")), b"a__echo"),  # Mcp-Name disagrees with the body
        (b"{not json", b"a__echo"),
        (_compact({**_call(), "params": {"name": "a__echo"}, "id": None} | {"x": 1}), b"x"),
    ],
)
def test_left_to_the_graph(body: bytes, name: bytes) -> None:
    direct, _ = _direct()
    assert direct.taken(body, name, b"tools/call") is None


# -- the answer, renamed -------------------------------------------------------


def _renamer(owners: Owners | None = None, method: str = "tools/call") -> Renamer:
    return Renamer(Sealer([os.urandom(32)]), "a", owners or Owners(order=("a", "b")), method)


def test_an_answer_with_nothing_to_rename_is_the_same_bytes() -> None:
    body = _compact({"jsonrpc": "2.0", "id": 7, "result": {"content": [], "isError": False}})
    assert not may_rename(body)
    assert _renamer().body(body) is body


def test_state_task_id_and_resource_links_renamed() -> None:
    owners = Owners(order=("a", "b"), renamed={"a": frozenset({"file:///x"})})
    renamer = _renamer(owners)
    answer = {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "resultType": "input_required",
            "requestState": "member-state",
            "content": [{"type": "resource_link", "uri": "file:///x", "name": "x"}],
        },
    }
    out = json.loads(renamer.body(_compact(answer)))["result"]
    assert sealed.unwrap(renamer._scope.sealer, sealed.STATE, out["requestState"]) == (
        "a",
        "member-state",
    )
    assert out["content"][0]["uri"] == made("a", "file:///x")


def test_events_renamed_one_by_one_across_chunks() -> None:
    renamer = _renamer()
    log = {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "info", "data": "x"},
    }
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
    final = {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}
    stream = b"".join(b"event: message\ndata: " + _compact(m) + b"\n\n" for m in (log, progress))
    stream += b"event: message\ndata: " + _compact(final) + b"\n\n"
    cut = len(stream) // 2
    out = renamer.events(stream[:cut], last=False) + renamer.events(stream[cut:], last=True)
    events = [json.loads(e.split(b"data: ")[1]) for e in out.split(b"\n\n") if e]
    assert events[0]["params"]["logger"] == "a"
    assert events[1:] == [progress, final]


# -- the whole shortcut, over recording apps ----------------------------------


class _Recorder:
    """An ASGI app that records what it got and answers `answer` as JSON."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.scope: dict[str, Any] = {}
        self.body = b""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scope = dict(scope)
        message = await receive()
        self.body = message["body"]
        body = _compact(self.answer)
        headers = [(b"content-type", b"application/json"), (b"x-request-id", b"r1")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


class _Flow:
    write_paused = False


async def _serve(direct: Direct, body: bytes, headers: list[tuple[bytes, bytes]]) -> list[Any]:
    link = ConnectionLink(_Flow())
    link.body_complete = True
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "root_path": "",
        "headers": [*headers[:-1], (b"content-length", str(len(body)).encode())],
        "extensions": {LINK: link},
    }
    given = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> Any:
        return given.pop(0) if given else {"type": "http.disconnect"}

    async def send(event: MutableMapping[str, Any]) -> None:
        sent.append(event)

    await direct(scope, receive, send)
    return sent


async def test_the_member_gets_its_own_names_and_the_client_the_aggregates() -> None:
    member = _Recorder(
        {"jsonrpc": "2.0", "id": 7, "result": {"resultType": "input_required", "requestState": "s"}}
    )
    top = _Recorder({})
    aggregator = _aggregator()
    direct = Direct(top, aggregator, {"a": member}, 1 << 20, 5.0)
    body = _compact(_call())
    sent = await _serve(direct, body, MODERN)
    assert member.body == body.replace(b'"a__echo"', b'"echo"') and top.body == b""
    assert member.scope["root_path"] == "/servers/a"
    got = dict(member.scope["headers"])
    assert got[b"mcp-name"] == b"echo"
    assert got[b"content-length"] == str(len(member.body)).encode()
    start, answer = sent
    out = json.loads(answer["body"])
    assert sealed.unwrap(aggregator.sealer, sealed.STATE, out["result"]["requestState"]) == (
        "a",
        "s",
    )
    assert dict(start["headers"])[b"content-length"] == str(len(answer["body"])).encode()
    assert dict(start["headers"])[b"x-request-id"] == b"r1"


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (_compact(_call("zz__echo")), _headers(mcp_name=b"zz__echo")),
        (_compact(_call()), _headers(mcp_protocol_version=b"2025-11-25")),
        (_compact({**_call(), "method": "tools/list"}), _headers(mcp_method=b"tools/list")),
    ],
)
async def test_everything_else_reaches_the_graph_as_it_came(
    body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    member, top = _Recorder({}), _Recorder({"jsonrpc": "2.0", "id": 7, "result": {}})
    direct = Direct(top, _aggregator(), {"a": member}, 1 << 20, 5.0)
    await _serve(direct, body, headers)
    assert top.body == body and member.body == b""
    assert top.scope["root_path"] == "" and dict(top.scope["headers"]).get(b"mcp-name") == dict(
        headers
    ).get(b"mcp-name")


# -- a legacy session's answer: the member's requests to the client ------------


@pytest.mark.parametrize("own", [0, 17, "e-1", 'a:"b"'])
def test_a_members_request_id_names_it_and_comes_back(own: Any) -> None:
    made_id = server_request_id("a", own)
    assert opened_request_id(made_id) == ("a", own)


@pytest.mark.parametrize(
    "value", [5, "5", "mcp-shim:", "mcp-shim:a", "mcp-shim:a:", "mcp-shim:a:[1]", "mcp-shim::1"]
)
def test_not_an_id_the_aggregate_made(value: Any) -> None:
    assert opened_request_id(value) is None


def test_a_members_request_in_a_legacy_answer_gets_the_aggregates_id() -> None:
    renamer = Renamer(
        Sealer([os.urandom(32)]), "a", Owners(order=("a",)), "tools/call", server_requests=True
    )
    ask = {"jsonrpc": "2.0", "id": 3, "method": "elicitation/create", "params": {}}
    final = {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}
    stream = b"".join(b"event: message\ndata: " + _compact(m) + b"\n\n" for m in (ask, final))
    events = [
        json.loads(e.split(b"data: ")[1]) for e in renamer.events(stream, True).split(b"\n\n") if e
    ]
    assert events[0] == {**ask, "id": server_request_id("a", 3)}
    assert events[1] == final
    # Not in a modern answer: a stateless answer carries no request of the member's.
    modern = Renamer(Sealer([os.urandom(32)]), "a", Owners(order=("a",)), "tools/call")
    assert modern.message(ask) is ask
