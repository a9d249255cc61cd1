"""What the aggregated `/mcp`'s shortcuts (direct.py, direct_legacy.py) share:
the body read once, the request given back to the top-level graph as it came,
and a member's route called with the client's own scope and connection, its
answer renamed for the aggregate (renaming.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any, Final

from starlette.types import ASGIApp, Receive, Scope, Send

from app.connection.link import ConnectionLink
from app.servers.aggregate.aggregator import Aggregator
from app.servers.aggregate.renaming import Renamer, RenamingSend
from app.servers.aggregate.uris import SCHEME

SCHEME_BYTES: Final = SCHEME.encode()

Read = list[MutableMapping[str, Any]]


class Seen:
    """The headers a request on the aggregated `/mcp` is routed by, read in
    one pass: the 2026-07-28 call's (`Mcp-Protocol-Version`, `Mcp-Method`,
    `Mcp-Name`), a legacy session's, the credential and the length."""

    __slots__ = (
        "authorization",
        "length",
        "method",
        "name",
        "raw_authorization",
        "raw_session",
        "repeated",
        "session",
        "version",
    )

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        version = method = name = length = session = authorization = None
        # A header the routing reads, twice: the top-level graph decides.
        repeated = False
        for key, value in headers:
            if key == b"mcp-name":
                repeated = repeated or name is not None
                name = value
            elif key == b"mcp-method":
                method = value
            elif key == b"mcp-protocol-version":
                version = value
            elif key == b"content-length":
                repeated = repeated or length is not None
                length = value
            elif key == b"mcp-session-id":
                repeated = repeated or session is not None
                session = value
            elif key == b"authorization":
                authorization = value
        self.version, self.method, self.name, self.length = version, method, name, length
        self.raw_session: bytes | None = session
        self.raw_authorization: bytes | None = authorization
        self.repeated = repeated
        self.session = None if session is None else session.decode("latin-1")
        self.authorization = None if authorization is None else authorization.decode("latin-1")


async def read_body(
    receive: Receive, complete: bool, limit: int, timeout_s: float
) -> tuple[Read, bytes | None]:
    """The messages read, and the whole body (None: not whole within `limit`
    and `timeout_s`, or a disconnect: the graph reads on and refuses as it
    does). `complete`: the body came with the head (app/routes/edge.py), so
    nothing is timed."""
    if complete:
        first = await receive()
        body: bytes | None = first.get("body", b"")
        if (
            first["type"] != "http.request"
            or first.get("more_body", False)
            or len(body or b"") > limit
        ):
            body = None
        return [first], body
    read: Read = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await receive()
                read.append(message)
                if message["type"] != "http.request":
                    return read, None
                size += len(message.get("body", b""))
                if size > limit:
                    return read, None
                if not message.get("more_body", False):
                    return read, b"".join(m.get("body", b"") for m in read)
    except TimeoutError:
        return read, None


def replaying(read: Read, receive: Receive) -> Receive:
    """`receive` with the messages already read handed out first again."""
    pending: Read = list(reversed(read))

    async def replay() -> MutableMapping[str, Any]:
        if pending:
            return pending.pop()
        message: MutableMapping[str, Any] = await receive()
        return message

    return replay


def into_member(
    scope: Scope,
    root: str,
    swapped: tuple[bytes, bytes, bytes],
    length: bytes | None,
    size: int,
) -> None:
    """The client's scope made the member route's request, in place (nothing
    else reads it from here): the header `swapped` names (name, value sent,
    the member's value) replaced, the length the renamed body's, the
    member's route (`root`) in front of its path."""
    headers = scope["headers"]
    if type(headers) is not list:
        headers = scope["headers"] = list(headers)
    name, sent, own = swapped
    headers[headers.index((name, sent))] = (name, own)
    if length is not None:
        headers.remove((b"content-length", length))
    headers.append((b"content-length", b"%d" % size))
    scope["root_path"] = scope.get("root_path", "") + root


class MemberCall:
    """A member route's ASGI receive and send for one request: the renamed
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
        renaming: tuple[Aggregator, str, str, bool],
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
            aggregator, member, method, sessions = self._renaming
            self._renamer = Renamer(
                aggregator.sealer, member, aggregator.owners, method, server_requests=sessions
            )
        return self._renamer

    def rewrite(self, body: bytes) -> bytes:
        aggregator, member, _, legacy = self._renaming
        # Most answers hold nothing to rename, told from their bytes (memchr
        # speed, whatever their size): no resource URI the aggregate shows
        # otherwise (uris.py `Owners.outward`: a member's URI in the gateway's
        # scheme, or one two members share) and no sealed value (a modern
        # retry's requestState, a task id; a legacy session's answer has none:
        # its task-augmented calls are the graph's).
        if (
            not aggregator.owners.renamed.get(member)
            and SCHEME_BYTES not in body
            and (legacy or (b'"requestState"' not in body and b'"taskId"' not in body))
        ):
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

    async def run(self, app: ASGIApp, scope: Scope) -> None:
        """`app` answering `scope` (the member's form of the request), its
        answer renamed on the way to the client."""
        link = self._link
        link.body_complete = True  # read whole, for the member's route too
        link.rewrite = self.rewrite
        try:
            await app(scope, self.receive, self.send)
        finally:
            link.rewrite = None
