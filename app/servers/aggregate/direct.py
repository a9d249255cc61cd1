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

from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from app import jsonio
from app.connection.link import connection_link
from app.headers.header_values import BadHeaderValue, decode_header_value
from app.servers.aggregate.aggregator import Aggregator
from app.servers.aggregate.direct_legacy import LegacyDirect
from app.servers.aggregate.member_call import (
    MemberCall,
    Seen,
    into_member,
    read_body,
    replaying,
)
from app.servers.aggregate.routing import Routed, route
from app.upstream.modern.upstream import header_value
from translators.registry import modern_versions

_METHODS: Final = frozenset({"tools/call", "prompts/get"})
_METHOD_NAMES: Final = {m.encode(): m for m in _METHODS}
_METHODS_B: Final = frozenset(_METHOD_NAMES)
_VERSIONS: Final = frozenset(v.name.encode() for v in modern_versions())

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
        legacy: LegacyDirect | None = None,
    ) -> None:
        self._top = top
        self._aggregator = aggregator
        self._apps = apps
        self._separator_b = aggregator.separator.encode()
        self._members_b = {name.encode(): name for name in apps}
        self._roots = {name: "/servers/" + name for name in apps}
        self._limit = max_body_bytes
        self._read_timeout_s = read_timeout_s
        self._legacy = legacy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        link = connection_link(scope)
        seen = None if link is None else Seen(scope["headers"])
        if link is None or seen is None or seen.repeated:
            await self._top(scope, receive, send)
            return
        method = scope["method"]
        legacy = self._legacy
        if method != "POST" or not modern_call(seen):
            if method == "POST" and legacy is not None:
                await legacy.post(scope, receive, send, link, seen)
            elif method == "DELETE" and legacy is not None:
                await legacy.delete(scope, receive, send, seen)
            else:
                await self._top(scope, receive, send)
            return
        read, body = await read_body(receive, link.body_complete, self._limit, self._read_timeout_s)
        raw_name = seen.name
        assert raw_name is not None and seen.method is not None
        taken = None if body is None else self.taken(body, raw_name, seen.method)
        if taken is None:
            await self._top(scope, replaying(read, receive), send)
            return
        member, call_method, renamed, bare = taken
        swapped = (b"mcp-name", raw_name, bare)
        into_member(scope, self._roots[member], swapped, seen.length, len(renamed))
        renaming = (self._aggregator, member, call_method, False)
        await MemberCall(renamed, receive, send, link, renaming).run(self._apps[member], scope)

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
            # An escape: the name may be spelled otherwise (a quote in it, too).
            or b"\\" in body
            or b'"requestState"' in body  # a retry: opened by routing.py
        ):
            return self._parsed(body, name)
        quoted = b'"' + name + b'"'
        if body.count(quoted) != 1:
            return self._parsed(body, name)
        renamed = body.replace(b'"name":' + quoted, b'"name":"' + bare + b'"')
        if len(renamed) == len(body):  # not as the name's member: another spelling
            return self._parsed(body, name)
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
            renamed = jsonio.dumps_parsed(routed.message)
        except TypeError:  # deeper than the serialiser goes: the graph refuses it
            return None
        bare = header_value(str(routed.message["params"]["name"])).encode("latin-1")
        return routed.member, message["method"], renamed, bare


def modern_call(seen: Seen) -> bool:
    """A 2026-07-28 client's `tools/call` or `prompts/get` outside any
    session, its name in `Mcp-Name` (else the graph answers it)."""
    return (
        seen.raw_session is None
        and seen.name is not None
        and seen.version in _VERSIONS
        and seen.method in _METHODS_B
    )


def agrees(raw: bytes, name: str) -> bool:
    """`Mcp-Name` names the body's `name` (2026-07-28 streamable-http
    "Server Validation"; the graph refuses it otherwise)."""
    try:
        return decode_header_value(raw.decode("latin-1").strip(" \t")) == name
    except BadHeaderValue:
        return False
