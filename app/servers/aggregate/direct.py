"""A modern client's call of one member's tool or prompt on the aggregated
`/mcp`, handed straight to that member's route.

Every other request on `/mcp` goes through the top-level gateway graph and the
aggregate's endpoint (serve.py), two gateways deep. A 2026-07-28 client's
`tools/call` or `prompts/get` needs none of that graph: the client already
speaks the aggregate's era, and the call belongs to the one member its name's
prefix names (names.py; a retry's `requestState` opened by routing.py, as the
endpoint opens it). So the request is put in the member's own names (body
and `Mcp-Name`) and given to the member's route app as a request to
`/servers/NAME/mcp`, which checks and answers it as for a client of its own
(Host and Origin, body bounds, headers, credentials, era, logs, metrics), and
its answer is renamed on the way back as the endpoint renames it
(renaming.py).

Whatever does not fit exactly (another method or era, a session, a body
still arriving past its bound, a name no member owns, an `Mcp-Name` that
disagrees) goes to the top-level graph as it came, which answers or refuses
it as before: the shortcut never refuses anything itself.
bench/instructions.py --route aggregate counts its cost per call, against
--route single.
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any, Final

import structlog
from starlette.types import ASGIApp, Receive, Scope, Send

from app import jsonio
from app.connection.link import ConnectionLink, connection_link
from app.headers.header_values import BadHeaderValue, decode_header_value
from app.servers.aggregate.aggregator import Aggregator
from app.servers.aggregate.renaming import RENAMED, Renamer, RenamingSend
from app.servers.aggregate.routing import Routed, route
from app.upstream.modern.upstream import header_value
from translators.registry import modern_versions

_METHODS: Final = frozenset({"tools/call", "prompts/get"})
_METHOD_NAMES: Final = {m.encode(): m for m in _METHODS}
_METHODS_B: Final = frozenset(_METHOD_NAMES)
_VERSIONS: Final = frozenset(v.name.encode() for v in modern_versions())

Read = list[MutableMapping[str, Any]]
# (member, method, the body in the member's names, its Mcp-Name)
Taken = tuple[str, str, bytes, bytes]


class Direct:
    """The ASGI app of the aggregated `/mcp`: the shortcut when it applies,
    else the top-level graph's app (`top`)."""

    def __init__(
        self,
        top: ASGIApp,
        aggregator: Aggregator,
        apps: dict[str, ASGIApp],
        max_body_bytes: int,
        read_timeout_s: float,
    ) -> None:
        self._top = top
        self._aggregator = aggregator
        self._apps = apps
        self._separator_b = aggregator.separator.encode()
        self._members_b = {name.encode(): name for name in apps}
        self._roots = {name: "/servers/" + name for name in apps}
        self._limit = max_body_bytes
        self._read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        link = connection_link(scope)
        named = None
        if link is not None and scope["method"] == "POST":
            named = call_name(scope["headers"])
        if link is None or named is None:
            await self._top(scope, receive, send)
            return
        if link.body_complete:
            # The whole body came with the head: nothing to time (app/routes/edge.py).
            first = await receive()
            read: Read = [first]
            body = first.get("body", b"")
            if (
                first["type"] != "http.request"
                or first.get("more_body", False)
                or len(body) > self._limit
            ):
                body = None
        else:
            read, body = await self._read(receive)
        raw_name, raw_method, length = named
        taken = None if body is None else self.taken(body, raw_name, raw_method)
        if taken is None:
            await self._top(scope, _replaying(read, receive), send)
            return
        member, method, renamed, bare = taken
        call = _MemberCall(renamed, receive, send, link, (self._aggregator, member, method))
        link.body_complete = True  # read whole, for the member's route too
        link.rewrite = call.rewrite
        structlog.contextvars.bind_contextvars(server=member)
        try:
            # The scope is the member's from here: nothing else reads it.
            headers = scope["headers"] = list(scope["headers"])
            headers[headers.index((b"mcp-name", raw_name))] = (b"mcp-name", bare)
            if length is not None:
                headers.remove((b"content-length", length))
            headers.append((b"content-length", b"%d" % len(renamed)))
            scope["root_path"] = scope.get("root_path", "") + self._roots[member]
            await self._apps[member](scope, call.receive, call.send)
        finally:
            link.rewrite = None

    async def _read(self, receive: Receive) -> tuple[Read, bytes | None]:
        """The messages read, and the whole body (None: not whole within the
        bounds and the read timeout, or a disconnect: the graph reads on and
        refuses as it does)."""
        read: Read = []
        size = 0
        try:
            async with asyncio.timeout(self._read_timeout_s):
                while True:
                    message = await receive()
                    read.append(message)
                    if message["type"] != "http.request":
                        return read, None
                    size += len(message.get("body", b""))
                    if size > self._limit:
                        return read, None
                    if not message.get("more_body", False):
                        return read, b"".join(m.get("body", b"") for m in read)
        except TimeoutError:
            return read, None

    def taken(self, body: bytes, name: bytes, method: bytes) -> Taken | None:
        """(member, method, the body in the member's names, its `Mcp-Name`);
        None: the top-level graph's to answer. Routed by the headers the
        member's route checks against the body (`Mcp-Method`, `Mcp-Name`:
        2026-07-28 streamable-http "Server Validation"), the name put in the
        member's form in the body's bytes when that is unambiguous; else
        from the parsed body."""
        member_b, _, bare = name.partition(self._separator_b)
        member = self._members_b.get(member_b)
        if (
            member is None
            or not bare
            or b'"' in name
            or b"\\" in body  # an escape: the name may be spelled otherwise
            or b'"requestState"' in body  # a retry: opened by routing.py
        ):
            return self._parsed(body, name)
        quoted = b'"' + name + b'"'
        if body.count(quoted) != 1 or b'"name":' + quoted not in body:
            return self._parsed(body, name)
        renamed = body.replace(quoted, b'"' + bare + b'"')
        return member, _METHOD_NAMES[method], renamed, bare

    def _parsed(self, body: bytes, raw_name: bytes) -> Taken | None:
        try:
            message = jsonio.loads(body)
        except jsonio.JSONDecodeError:
            return None
        if type(message) is not dict or message.get("method") not in _METHODS:
            return None
        params = message.get("params")
        if "id" not in message or type(params) is not dict:
            return None
        name = params.get("name")
        if not isinstance(name, str) or not agrees(raw_name, name):
            return None
        routed = route(self._aggregator.table(), message)
        if not isinstance(routed, Routed) or routed.member not in self._apps:
            return None
        try:
            renamed = jsonio.dumps(routed.message)
        except TypeError:  # deeper than the serialiser goes: the graph refuses it
            return None
        bare = header_value(str(routed.message["params"]["name"])).encode("latin-1")
        return routed.member, message["method"], renamed, bare


def call_name(
    headers: list[tuple[bytes, bytes]],
) -> tuple[bytes, bytes, bytes | None] | None:
    """A 2026-07-28 client's `tools/call` or `prompts/get` outside any
    session: its `Mcp-Name`, `Mcp-Method` and `Content-Length` as sent (None:
    not such a request, or one of them repeated; the graph answers it)."""
    version = name = method = length = None
    for key, value in headers:
        if key == b"mcp-name":
            if name is not None:
                return None
            name = value
        elif key == b"mcp-method":
            method = value
        elif key == b"mcp-protocol-version":
            version = value
        elif key == b"content-length":
            if length is not None:
                return None
            length = value
        elif key == b"mcp-session-id":
            return None
    if name is None or version not in _VERSIONS or method not in _METHODS_B:
        return None
    return name, method, length


def agrees(raw: bytes, name: str) -> bool:
    """`Mcp-Name` names the body's `name` (2026-07-28 streamable-http
    "Server Validation"; the graph refuses it otherwise)."""
    try:
        return decode_header_value(raw.decode("latin-1").strip(" \t")) == name
    except BadHeaderValue:
        return False


def _replaying(read: Read, receive: Receive) -> Receive:
    """`receive` with the messages already read handed out first again."""
    pending: Read = list(reversed(read))

    async def replay() -> MutableMapping[str, Any]:
        if pending:
            return pending.pop()
        message: MutableMapping[str, Any] = await receive()
        return message

    return replay


class _MemberCall:
    """The member route's ASGI receive and send for one call: the renamed
    body, then the client's own receive (its disconnect); the answer renamed
    on its way (renaming.py), written whole on the client's connection when
    it can be (`rewrite`, ConnectionLink.write_whole)."""

    __slots__ = ("_body", "_link", "_receive", "_renamer", "_renaming", "_send", "_sending")

    def __init__(
        self,
        body: bytes,
        receive: Receive,
        send: Send,
        link: ConnectionLink,
        renaming: tuple[Aggregator, str, str],
    ) -> None:
        self._body: bytes | None = body
        self._receive = receive
        self._send = send
        self._link = link
        self._renaming = renaming
        self._renamer: Renamer | None = None
        self._sending: RenamingSend | None = None

    def renamer(self) -> Renamer:
        if self._renamer is None:
            aggregator, member, method = self._renaming
            self._renamer = Renamer(aggregator.sealer, member, aggregator.owners, method)
        return self._renamer

    def rewrite(self, body: bytes) -> bytes:
        if RENAMED.search(body) is None:  # renaming.py `may_rename`, inline: every call's
            return body
        return self.renamer().body(body)

    async def receive(self) -> MutableMapping[str, Any]:
        body, self._body = self._body, None
        if body is not None:
            return {"type": "http.request", "body": body, "more_body": False}
        message: MutableMapping[str, Any] = await self._receive()
        return message

    async def send(self, event: MutableMapping[str, Any]) -> None:
        if self._sending is None:
            self._sending = RenamingSend(self.renamer(), self._link, self._send)
        await self._sending(event)
