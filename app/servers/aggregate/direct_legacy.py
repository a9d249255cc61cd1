"""A legacy client's call of one member's tool or prompt on the aggregated
`/mcp`, handed straight to that member's route in a session of its own there.

The top-level graph opens the client's session (`initialize`, answered as the
aggregate) and serves everything else of it. A `tools/call` or `prompts/get`
in that session goes to the member its name's prefix names, in a session the
gateway opens at the member's route for this client session (the client's
own `initialize` parameters, its credential), so the member's route serves
it as it serves a client of its own: the client's era, no translation to the
aggregate's era and back. The answer is renamed as the aggregate's endpoint
renames it (renaming.py); a request of the member to the client (an
elicitation) gets an id that names the member (`server_request_id`), and the
client's answer to it goes back to that member's session.

The member sessions are the client session's: each call keeps the client
session alive at the top-level graph; the client's `DELETE` ends them; those
of a client session that ended otherwise (idle, reclaimed) are ended when the
gateway next looks (`sweep`). What does not fit (a session of another worker,
a task-augmented call, a batch, a member whose route answers the client's
`initialize` in another version) goes to the top-level graph as it came.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final

import structlog
from starlette.types import ASGIApp, Receive, Scope, Send

from app import jsonio
from app.call import Message
from app.connection.link import LINK, ConnectionLink
from app.servers.aggregate.aggregator import Aggregator
from app.servers.aggregate.inprocess import call_app, post_scope
from app.servers.aggregate.member_call import (
    MemberCall,
    Seen,
    into_member,
    read_body,
    replaying,
)
from app.servers.aggregate.renaming import opened_request_id

log = structlog.get_logger("mcp_shim.aggregate")

_CALLS: Final = frozenset({"tools/call", "prompts/get"})
_SESSION: Final = b"mcp-session-id"
_ACCEPT: Final = b"application/json, text/event-stream"
# An initialize answer read to learn the session's version: far below this.
_MAX_INIT_ANSWER: Final = 1 << 20
# Client sessions whose member sessions are looked at for an end at most this often.
SWEEP_EVERY_S: Final = 10.0


@dataclass(slots=True)
class _Client:
    """A client session of the top-level graph and its sessions at members."""

    params: dict[str, Any]  # its initialize parameters
    version: str  # the version the top-level graph agreed
    members: dict[str, str | None] = field(default_factory=dict)  # None: not to be used
    opening: asyncio.Lock = field(default_factory=asyncio.Lock)


class LegacyDirect:
    """The legacy clients' shortcut of the aggregated `/mcp` (direct.py)."""

    def __init__(
        self,
        top: Any,  # the top-level graph's app: its `state.wiring` holds its sessions
        aggregator: Aggregator,
        apps: dict[str, ASGIApp],
        max_body_bytes: int,
        read_timeout_s: float,
    ) -> None:
        self._top = top
        self._aggregator = aggregator
        self._apps = apps
        self._roots = {name: "/servers/" + name for name in apps}
        self._separator = aggregator.separator
        self._limit = max_body_bytes
        self._read_timeout_s = read_timeout_s
        self._clients: dict[str, _Client] = {}
        self._swept_at = time.monotonic()
        # Each graph's legacy sessions, once its lifespan has wired them.
        self._sessions: dict[str, Any] = {}

    def _top_sessions(self) -> Any:
        return self._sessions_of("", self._top)

    def _sessions_of(self, name: str, app: Any) -> Any:
        found = self._sessions.get(name)
        if found is None:
            wired = getattr(getattr(app, "state", None), "wiring", None)
            found = None if wired is None else wired.legacy_sessions
            if found is not None:
                self._sessions[name] = found
        return found

    def _alive(self, member: str, own: str) -> bool:
        """`own` is still a session of `member`'s route."""
        store = self._sessions_of(member, self._apps[member])
        return store is not None and own in store

    async def post(
        self, scope: Scope, receive: Receive, send: Send, link: ConnectionLink, seen: Seen
    ) -> None:
        session_id = seen.session
        client = None if session_id is None else self._clients.get(session_id)
        if session_id is not None and client is None:
            await self._top(scope, receive, send)  # not a session this worker saw open
            return
        read, body = await read_body(receive, link.body_complete, self._limit, self._read_timeout_s)
        message = None
        if body is not None:
            try:
                message = jsonio.loads(body)
            except jsonio.JSONDecodeError:
                pass
            if type(message) is not dict:
                message = None
        routed = None if message is None or client is None else self._routed(message)
        if routed is None:
            replay = replaying(read, receive)
            if message is not None and client is None and message.get("method") == "initialize":
                await self._initialize(scope, replay, send, message)
                return
            if message is not None and client is not None and _notification(message):
                # Each member session hears it too (a cancellation, a roots change).
                await self._tell_members(scope, client, message, seen.raw_authorization)
            await self._top(scope, replay, send)
            return
        assert client is not None
        member, body, method = routed
        sessions = self._top_sessions()
        session = None if sessions is None else sessions.find(session_id, seen.authorization)
        own = client.members.get(member, "")
        if session is not None:
            session.last_used = time.monotonic()  # in use, though at a member
            if own == "" or (own and not self._alive(member, own)):
                own = await self._member_session(scope, client, member, seen)
        if session is None or not own:
            # Ended, another credential's, or a member not reached this way:
            # the graph answers it as it does.
            await self._top(scope, replaying(read, receive), send)
            return
        swapped = (_SESSION, seen.raw_session or b"", own.encode("latin-1"))
        into_member(scope, self._roots[member], swapped, seen.length, len(body))
        renaming = (self._aggregator, member, method, True)
        await MemberCall(body, receive, send, link, renaming).run(self._apps[member], scope)

    async def delete(self, scope: Scope, receive: Receive, send: Send, seen: Seen) -> None:
        """The client's DELETE ends its session at the top-level graph, then at every member."""
        await self._top(scope, receive, send)
        session_id = seen.session
        client = None if session_id is None else self._clients.get(session_id)
        if client is not None and session_id is not None:
            sessions = self._top_sessions()
            if sessions is None or session_id not in sessions:
                del self._clients[session_id]
                await self._end_members(client, seen.raw_authorization)

    # -- a client session's requests -------------------------------------------

    def _routed(self, message: Message) -> tuple[str, bytes, str] | None:
        """(member, the body in its own names, the method) of a call of a
        member's tool or prompt, or of the client's answer to a member's
        request; None: the top-level graph's."""
        method = message.get("method")
        if method is None:  # the client's answer to a member's request
            opened = opened_request_id(message.get("id"))
            if opened is None or opened[0] not in self._apps:
                return None
            try:
                return opened[0], jsonio.dumps_parsed({**message, "id": opened[1]}), ""
            except TypeError:
                return None
        params = message.get("params")
        if method not in _CALLS or "id" not in message or type(params) is not dict:
            return None
        name = params.get("name")
        if "task" in params or not isinstance(name, str):
            return None
        member, sep, bare = name.partition(self._separator)
        if not sep or not bare or member not in self._apps:
            return None
        params["name"] = bare  # `message` is this call's own, parsed from its body
        try:
            return member, jsonio.dumps_parsed(message), method
        except TypeError:  # deeper than the serialiser goes: the graph refuses it
            return None

    # -- the member sessions ---------------------------------------------------

    async def _member_session(
        self, scope: Scope, client: _Client, member: str, seen: Seen
    ) -> str | None:
        """The client session's session at `member`, opened when it has none
        (or its own ended); None: the member is not to be reached this way.
        The caller's credential is the client session's, found at the
        top-level graph; the member's route checks it again."""
        own = client.members.get(member, "")
        if own is None or (own and self._alive(member, own)):
            return own
        async with client.opening:
            own = client.members.get(member, "")
            if own is None or (own and self._alive(member, own)):
                return own
            own = await self._open(scope, client, member, seen.raw_authorization)
            if own != "":  # "": refused for now (a bound): asked again at the next call
                client.members[member] = own
            return own or None

    def _in_member(self, member: str) -> ASGIApp:
        """`member`'s route app for a request of the gateway's own, its log
        lines naming the member (as app/servers/app.py binds it)."""
        app = self._apps[member]

        async def named(scope: Scope, receive: Receive, send: Send) -> None:
            structlog.contextvars.bind_contextvars(server=member)
            await app(scope, receive, send)

        return named

    async def _open(
        self, scope: Scope, client: _Client, member: str, auth: bytes | None
    ) -> str | None:
        """A session at `member` for this client session; None: the member
        agreed another version; "": refused now."""
        app = self._in_member(member)
        host = _header(scope["headers"], b"host") or b"localhost"
        raw = [(b"host", host), (b"accept", _ACCEPT), (b"content-type", b"application/json")]
        if auth is not None:
            raw.append((b"authorization", auth))
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": client.params}
        answer = await call_app(
            app, post_scope("/mcp", self._roots[member], raw), jsonio.dumps(init), _MAX_INIT_ANSWER
        )
        try:
            got = await answer.aread()
        finally:
            await answer.aclose()
        own = answer.headers.get("mcp-session-id")
        result = _result(answer.headers.get("content-type", ""), got)
        agreed = None if result is None else result.get("protocolVersion")
        if answer.status_code != 200 or own is None or agreed != client.version:
            log.warning(
                "aggregate_member_session_refused",
                server=member,
                status=answer.status_code,
                version=agreed,
            )
            # Another version: this client session's calls of it go through the
            # top-level graph from now on; anything else is asked again next time.
            return None if answer.status_code == 200 and own is not None else ""
        raw += [
            (_SESSION, own.encode("latin-1")),
            (b"mcp-protocol-version", client.version.encode()),
        ]
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        answer = await call_app(
            app, post_scope("/mcp", self._roots[member], raw), jsonio.dumps(done), _MAX_INIT_ANSWER
        )
        await answer.aclose()
        log.info("aggregate_member_session_opened", server=member)
        return own

    async def _tell_members(
        self, scope: Scope, client: _Client, message: Message, auth: bytes | None
    ) -> None:
        """A client notification (a cancellation, a roots change) to each of its member sessions."""
        for member, own in list(client.members.items()):
            if own is not None:
                await self._send_member(
                    member, own, client, auth, scope, "POST", jsonio.dumps(message)
                )

    async def _end_members(self, client: _Client, auth: bytes | None) -> None:
        for member, own in list(client.members.items()):
            if own is not None:
                await self._send_member(member, own, client, auth, None, "DELETE", b"")

    async def _send_member(
        self,
        member: str,
        own: str,
        client: _Client,
        auth: bytes | None,
        scope: Scope | None,
        method: str,
        body: bytes,
    ) -> None:
        host = (_header(scope["headers"], b"host") if scope is not None else None) or b"localhost"
        raw = [
            (b"host", host),
            (b"accept", _ACCEPT),
            (b"content-type", b"application/json"),
            (_SESSION, own.encode("latin-1")),
            (b"mcp-protocol-version", client.version.encode()),
        ]
        if auth is not None:
            raw.append((b"authorization", auth))
        request = {**post_scope("/mcp", self._roots[member], raw), "method": method}
        try:
            answer = await call_app(self._in_member(member), request, body, _MAX_INIT_ANSWER)
            await answer.aclose()
        except Exception as exc:  # the member's session ends by its own idle time then
            log.info("aggregate_member_session_unreached", server=member, error=type(exc).__name__)

    # -- the client's initialize ----------------------------------------------

    async def _initialize(
        self, scope: Scope, receive: Receive, send: Send, message: Message
    ) -> None:
        """The top-level graph answers it; the session it opens and the
        version it agrees are remembered with the client's parameters."""
        params = message.get("params")
        captured = _Captured(send)
        # No connection link: the answer goes through `send`, where it is read.
        plain = {
            **scope,
            "extensions": {k: v for k, v in (scope.get("extensions") or {}).items() if k != LINK},
        }
        await self._top(plain, receive, captured.send)
        session_id = captured.headers.get("mcp-session-id")
        result = _result(captured.headers.get("content-type", ""), bytes(captured.body))
        version = None if result is None else result.get("protocolVersion")
        if (
            captured.status == 200
            and session_id
            and isinstance(version, str)
            and isinstance(params, dict)
        ):
            self._sweep()
            self._clients[session_id] = _Client(params, version)

    def _sweep(self) -> None:
        """Client sessions the top-level graph no longer has: their member sessions ended."""
        now = time.monotonic()
        sessions = self._top_sessions()
        if sessions is None or now - self._swept_at < SWEEP_EVERY_S:
            return
        self._swept_at = now
        gone = [sid for sid in self._clients if sid not in sessions]
        for sid in gone:
            client = self._clients.pop(sid)
            if any(own is not None for own in client.members.values()):
                task = asyncio.get_running_loop().create_task(self._end_members(client, None))
                _ENDING.add(task)
                task.add_done_callback(_ENDING.discard)


_ENDING: set[asyncio.Task[None]] = set()


class _Captured:
    """An ASGI send that passes everything on and keeps the status, headers and body."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = bytearray()

    async def send(self, event: MutableMapping[str, Any]) -> None:
        if event["type"] == "http.response.start":
            self.status = event["status"]
            self.headers = {
                k.decode("latin-1").lower(): v.decode("latin-1")
                for k, v in event.get("headers", ())
            }
        elif event["type"] == "http.response.body" and len(self.body) < _MAX_INIT_ANSWER:
            self.body += event.get("body", b"")
        await self._send(event)


def _header(headers: Any, name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return bytes(value)
    return None


def _notification(message: Message) -> bool:
    return "id" not in message and isinstance(message.get("method"), str)


def _result(content_type: str, body: bytes) -> dict[str, Any] | None:
    """The result of a JSON or event-stream answer to one request."""
    messages: list[Any] = []
    try:
        if content_type.startswith("text/event-stream"):
            for line in body.split(b"\n"):
                if line.startswith(b"data:") and line[5:].strip():
                    messages.append(jsonio.loads(line[5:]))
        else:
            messages.append(jsonio.loads(body))
    except jsonio.JSONDecodeError:
        return None
    for message in messages:
        if isinstance(message, dict) and isinstance(message.get("result"), dict):
            result: dict[str, Any] = message["result"]
            return result
    return None
