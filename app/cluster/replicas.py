"""Many replicas (or worker processes): who owns a piece of state, and the one
relay that reaches the owner.

State that lives in one process's memory has an *owner*, named by the base URL
it advertises (`MCP_SHIM_ADVERTISE_URL`, `settings.advertise_url`, and nothing
else: a process without one is reachable by nobody and names itself
`local:<random>`). What the client holds names the owner under a seal
(AES-GCM with `MCP_SHIM_STATE_KEY`, shared by every replica), so a client can
neither forge an owner nor steer a request to an address of its choosing:

- a parked MRTR call: the sealed `requestState` (app/mrtr/state.py);
- a legacy client's session: the gateway's `Mcp-Session-Id` (`OwnedIds`),
  and an HTTP+SSE channel's `session_id`, the same way.

A request that reaches a replica other than the owner is sent there by
`ReplicaRelay` (the MRTR retry by app/cluster/forwarding.py on top of it, a legacy
session's request as it came with `Relayed`) and the owner's answer is streamed
back. The relayed request carries `Mcp-Shim-Hop`; a replica never relays a
request that carries it, so a misconfigured advertise URL cannot make a loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import urlsplit

import httpx
import structlog
from starlette.responses import Response

from app import jsonio, write_coalescer
from app.cluster.sealing import Sealer, caller_digest, generate_key, parse_keys
from app.config import Settings
from app.connection.held import ClientHeld
from app.upstream.httpclient.common import KEEPALIVE_S

if TYPE_CHECKING:
    import aiohttp

log = structlog.get_logger("mcp_shim.replicas")

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]

HOP_HEADER: Final = "mcp-shim-hop"
# Where replicas send each other their small notes (app/cluster/notes.py).
NOTE_PATH: Final = "/mcp-shim/note"
# A note's body, and its answer, at most (a touch names up to ~5,000 sessions).
MAX_NOTE_BYTES: Final = 1 << 20
# Authenticated with every owned id: an id never opens as a requestState or back.
_ID_PURPOSE: Final = b"mcp-shim owned id v1"
# Never relayed in either direction: per connection (RFC 9110 7.6.1), recomputed
# by the HTTP layer, or set by the relaying replica itself.
_NOT_RELAYED: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "content-length",
        "date",
        "server",
        "x-request-id",
        HOP_HEADER,
    }
)


def _route(replica: str) -> str:
    """The path an advertised URL ends with: one server's route (/servers/NAME)
    when the gateway serves many, else none."""
    return urlsplit(replica).path.rstrip("/") if reachable(replica) else ""


def reachable(replica: str) -> bool:
    """An owner other replicas can reach: an advertised URL, not a `local:` id."""
    return "://" in replica


def same_route(owner: str, me: str) -> bool:
    """Whether state `owner` holds is one of this graph's server: the same route
    (/servers/NAME, or none) on whichever replica. A client's requestState or
    task id of one server presented on another's route is never sent on to
    the server that made it: that route answers as for an unknown one."""
    return _route(owner) == _route(me)


def split_replica(replica: str) -> tuple[str, str]:
    """An owner's advertised URL as (its process's base URL, its server's route):
    `http://h:p/servers/b` is ("http://h:p", "/servers/b"). The base names the
    sibling worker to hand a connection to (app/serving/handoff.py), the route
    goes before the request's own path, as a relay over HTTP puts it."""
    if not reachable(replica):
        return replica, ""
    route = _route(replica)
    base = replica.rstrip("/")
    return base[: len(base) - len(route)], route


class OwnedIds:
    """Ids (a legacy session's, an HTTP+SSE channel's) that name the replica
    owning them. 256 random bits, this replica's advertised URL and the caller's
    credential digest, sealed: the id is as unguessable as before, opaque to
    the client (pod addresses are not shown), and only this deployment's key
    can make one that names an owner."""

    def __init__(self, sealer: Sealer, me: str) -> None:
        self._sealer = sealer
        self.me = me

    def mint(self, credentials: str) -> str:
        plain = {"s": secrets.token_urlsafe(32), "r": self.me, "c": caller_digest(credentials)}
        return self._sealer.seal_bytes(jsonio.dumps(plain), _ID_PURPOSE)

    def owner(self, token: str, credentials: str) -> str | None:
        """The replica an id of ours names, if it was minted for these credentials."""
        data = self._sealer.open_object(token, _ID_PURPOSE)
        if data is None or not isinstance(data.get("r"), str):
            return None
        if data.get("c") != caller_digest(credentials):
            return None
        owner: str = data["r"]
        if not same_route(owner, self.me):
            return None  # another server's, of a gateway with many (app/servers)
        return owner

    def elsewhere(self, token: str | None, credentials: str, hopped: bool) -> str | None:
        """The other replica a request carrying this id must be relayed to, or None
        (no id, not ours, ours, unreachable, or relayed here already: the
        caller answers as for an unknown id, and logs why)."""
        if token is None:
            return None
        owner = self.owner(token, credentials)
        if owner is None or owner == self.me:
            return None
        if hopped or not reachable(owner):
            log.warning(
                "replica_relay_refused",
                reason="hop" if hopped else "owner_not_advertised",
                replica=owner[:200],
                me=self.me[:200],
            )
            return None
        return owner


class RelayFailed(Exception):
    """The owner replica could not be reached (or broke off before answering)."""


def relayed_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """A request's headers as the owner gets them: as they came (Host, Authorization,
    Mcp-Session-Id, Last-Event-ID...), minus per-connection ones, plus the hop mark
    and this request's id (the owner's log lines carry the same one)."""
    out = [(k, v) for k, v in headers if k.lower() not in _NOT_RELAYED]
    out.append((HOP_HEADER, "1"))
    request_id = structlog.contextvars.get_contextvars().get("request_id")
    if isinstance(request_id, str):
        out.append(("x-request-id", request_id))
    return out


class Handoff(Protocol):
    """Sibling workers reached by handing them the client's connection
    (app/serving/handoff.py, which the serving layer passes in)."""

    def reaches(self, owner: str) -> bool: ...

    def send(self, owner: str, scope: Mapping[str, Any], request: bytes) -> bool:
        """Hand this request's connection to `owner` with `request`; True when it
        is the owner's now, False when it stays here, untouched, to be relayed."""
        ...


def request_bytes(
    method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes
) -> bytes:
    """An HTTP/1.1 request as the owner reads it from the socket: `headers` as
    given (the caller drops the per-connection ones), its length recomputed."""
    lines = [f"{method} {target} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class ReplicaRelay:
    """One HTTP client toward the other replicas, for every kind of owned state."""

    def __init__(self, *, connect_timeout_s: float, request_timeout_s: float) -> None:
        self._request_timeout_s = request_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None
        # Told of every relay's end (owned, ending, seconds, stream): the metrics.
        self.observer: Callable[[str, str, float, bool], None] | None = None
        # Sibling workers reached by handing them the connection (app/serving/handoff.py).
        self.handoff: Handoff | None = None
        # The sessions relayed are served best where they were opened (a stdio
        # server's process; the aggregated /mcp's calls at its members): the
        # serving layer gives this relay the hand-over.
        self.hand_over = False

    @property
    def request_timeout_s(self) -> float:
        """MCP_SHIM_REQUEST_TIMEOUT_S: how long a relayed answer may keep us waiting."""
        return self._request_timeout_s

    def ended(self, owned: str, ending: str, duration_s: float, *, stream: bool) -> None:
        """A relay is over: count it (a relay carries no call of its own to count)."""
        if self.observer is not None:
            self.observer(owned, ending, duration_s, stream)

    def _client(self) -> aiohttp.ClientSession:
        # Made by the first relay, not at start (aiohttp wants a running loop),
        # and a gateway without replicas or workers never relays.
        if self._session is None:
            import aiohttp

            # aiohttp as the upstream's transport imports it: its CA contexts deferred.
            import app.upstream.httpclient.aiohttp_client  # noqa: F401

            # aiohttp's session itself, as for the upstream's POSTs: through
            # httpx's client and its own transport (httpcore), a relayed call
            # cost 2.2-3.1 ms of the relaying replica's CPU, against about 0.5
            # ms for the whole call served by its owner (bench/relay.py).
            # No bound of its own on connections: each relayed GET stream holds
            # one for as long as its client does (aiohttp's default of 100 would
            # make the 101st wait); what bounds them is the clients' connections
            # (MCP_SHIM_MAX_CONNECTIONS). No cookie jar: it serves every caller.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def send(
        self,
        replica: str,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes = b"",
        *,
        long_lived: bool = False,
    ) -> httpx.Response:
        """The owner's answer, headers read, body still to stream (the caller closes it).

        An `httpx.Response` over aiohttp's, whose stream raises httpx's errors:
        the callers read it as any other (the MRTR forwarding parses its SSE)."""
        import aiohttp
        from httpx_aiohttp.transport import AiohttpResponseStream, map_aiohttp_exceptions

        # A GET stream lasts as long as the client keeps it; the owner's own
        # keepalives and its upstream's timeouts bound it, not ours.
        read = None if long_lived else self._request_timeout_s
        timeout = aiohttp.ClientTimeout(
            sock_connect=self._connect_timeout_s, sock_read=read, connect=read
        )
        try:
            with map_aiohttp_exceptions():
                answer = await self._client().request(
                    method,
                    replica.rstrip("/") + target,
                    data=body or None,
                    headers=relayed_headers(headers),
                    timeout=timeout,
                    allow_redirects=False,
                    auto_decompress=False,
                )
        except (httpx.HTTPError, TimeoutError) as exc:
            raise RelayFailed(type(exc).__name__) from None
        return httpx.Response(
            answer.status, headers=answer.raw_headers, stream=AiohttpResponseStream(answer)
        )

    async def note(self, replica: str, body: bytes, *, timeout_s: float) -> bytes | None:
        """A small note to another replica (app/cluster/notes.py): the whole body
        of its 200 answer, or None when it was not delivered or not understood."""
        import aiohttp

        started = time.perf_counter()
        headers = {HOP_HEADER: "1", "content-type": "application/octet-stream"}
        ending, reply = "relayed", None
        try:
            async with self._client().post(
                replica.rstrip("/") + NOTE_PATH,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
                allow_redirects=False,
            ) as answer:
                if answer.status == 200:
                    reply = await answer.content.read(MAX_NOTE_BYTES + 1)
                else:
                    ending = "owner_unreachable"
        except (aiohttp.ClientError, TimeoutError, OSError):
            ending = "owner_unreachable"
        self.ended("legacy_note", ending, time.perf_counter() - started, stream=False)
        return reply if reply is not None and len(reply) <= MAX_NOTE_BYTES else None

    def answer(
        self,
        replica: str,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes = b"",
        *,
        what: str,
        long_lived: bool,
        unreachable: Callable[[], Response],
        write_timeout_s: float,
    ) -> Response:
        """The owner's answer to a request relayed as it came, as our response."""
        return Relayed(
            self,
            _Target(replica, method, target, list(headers), body, what, long_lived),
            unreachable=unreachable,
            write_timeout_s=write_timeout_s,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


@dataclass(frozen=True, slots=True)
class _Target:
    replica: str
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    what: str  # what is owned there, for the log: legacy_session, sse_channel
    long_lived: bool


class Relayed(Response):
    """Streams the owner's answer (status, headers, body chunk by chunk) to the
    client; the client going away closes the relayed request, which the owner
    sees as its client going away."""

    def __init__(
        self,
        relay: ReplicaRelay,
        target: _Target,
        *,
        unreachable: Callable[[], Response],
        write_timeout_s: float,
    ) -> None:
        super().__init__(status_code=200)
        self._relay = relay
        self._target = target
        self._unreachable = unreachable
        self._write_timeout_s = write_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        t = self._target
        if self._handed_off(scope):
            return
        started = time.perf_counter()
        answer: httpx.Response | None = None
        # Not a call outcome of app/metrics.py: this says how the relay itself ended.
        status, ending = 0, "relayed"
        held = ClientHeld(receive, scope)
        try:
            async with held:
                try:
                    answer = await self._relay.send(
                        t.replica, t.method, t.target, t.headers, t.body, long_lived=t.long_lived
                    )
                except RelayFailed as exc:
                    log.warning(
                        "replica_relay_failed",
                        replica=t.replica[:200],
                        owned=t.what,
                        http_method=t.method,
                        error=str(exc),
                    )
                    ending = "owner_unreachable"
                    fallback = self._unreachable()
                    status = fallback.status_code
                    await fallback(scope, receive, send)  # type: ignore[arg-type]
                    return
                status = answer.status_code
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": _answer_headers(answer.headers.multi_items()),
                    }
                )
                try:
                    async for chunk in answer.aiter_raw():
                        if not chunk:
                            continue
                        async with asyncio.timeout(self._write_timeout_s):
                            await send(
                                {"type": "http.response.body", "body": chunk, "more_body": True}
                            )
                except httpx.HTTPError as exc:
                    # The owner broke off mid-answer: end ours the same way (a client
                    # of a resumable stream comes back with Last-Event-ID).
                    ending = "owner_broke_off:" + type(exc).__name__
                except TimeoutError:
                    ending = "client_stalled"
                    return
                await send({"type": "http.response.body", "body": b""})
                await write_coalescer.let_writes_out()
        finally:
            if held.disconnected.is_set():
                ending = "client_disconnected"
            if answer is not None:
                with contextlib.suppress(Exception):
                    await answer.aclose()
            duration_s = time.perf_counter() - started
            self._relay.ended(t.what, ending, duration_s, stream=t.long_lived)
            log.info(
                "replica_relayed",
                replica=t.replica[:200],
                owned=t.what,
                http_method=t.method,
                status=status,
                ending=ending,
                duration_ms=round(duration_s * 1000, 2),
            )

    def _handed_off(self, scope: Scope) -> bool:
        """The connection given to its owner, a sibling worker, with this request:
        its next requests reach the owner directly (app/serving/handoff.py)."""
        t, handoff = self._target, self._relay.handoff
        # One of many servers: the owner's URL names its route, which the handed
        # request's path starts with, so the owner's app gives it to that server.
        sibling, route = split_replica(t.replica)
        if handoff is None or not handoff.reaches(sibling):
            return False
        request = request_bytes(t.method, route + t.target, relayed_headers(t.headers), t.body)
        if not handoff.send(sibling, scope, request):
            return False
        self._relay.ended(t.what, "handed_off", 0.0, stream=t.long_lived)
        log.info("replica_handed_off", replica=t.replica[:200], owned=t.what, http_method=t.method)
        return True


def _answer_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [
        (k.lower().encode("latin-1"), v.encode("latin-1"))
        for k, v in headers
        if k.lower() not in _NOT_RELAYED
    ]


@dataclass(frozen=True, slots=True)
class Replicas:
    """This process among the replicas: its name, its seal, its relay."""

    me: str  # advertised base URL, or local:<random> (reachable by nobody)
    sealer: Sealer  # MCP_SHIM_STATE_KEY: requestState and owned ids
    relay: ReplicaRelay
    ids: OwnedIds

    async def aclose(self) -> None:
        await self.relay.aclose()


def build_replicas(settings: Settings) -> Replicas:
    # Checked at load (app/settings/rules.py).
    keys = None if settings.state_key is None else parse_keys(settings.state_key.get_secret_value())
    if keys is None:
        keys = [generate_key()]
        log.warning(
            "mrtr_state_key_generated",
            consequence="requestState and session ids cannot be opened after a restart or by "
            "another replica; set MCP_SHIM_STATE_KEY (the same on every replica)",
        )
    advertised = str(settings.advertise_url).rstrip("/") if settings.advertise_url else None
    if advertised is not None and settings.state_key is None:
        log.warning(
            "mrtr_advertise_without_key",
            consequence="other replicas cannot open this replica's requestState or session ids",
        )
    sealer = Sealer(keys)
    me = advertised or f"local:{secrets.token_hex(8)}"
    relay = ReplicaRelay(
        connect_timeout_s=settings.connect_timeout_s,
        request_timeout_s=settings.request_timeout_s,
    )
    return Replicas(me=me, sealer=sealer, relay=relay, ids=OwnedIds(sealer, me))


def header_items(headers: Mapping[str, str] | Any) -> list[tuple[str, str]]:
    """Every header line of a Starlette `Headers` (repeated ones too), or a mapping's items."""
    multi = getattr(headers, "multi_items", None)
    items: list[tuple[str, str]] = list(multi() if multi is not None else headers.items())
    return items
