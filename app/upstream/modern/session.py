"""A modern upstream behind the legacy seam: what a legacy client's session needs.

The legacy front (app/fronts/legacy) speaks to an upstream session: `initialize`, then
`request` / `notify` / `respond` / `listen` / `close`, in a legacy version.
`ModernTransport` gives it that session in front of a 2026-07-28 server, which
has no handshake and no session:

- `open_session` answers the gateway's `initialize` from the upstream's
  `server/discover` (capabilities and `serverInfo` translated down to the
  offered legacy version, `instructions` kept); nothing is opened upstream.
- `ModernSession.request` sends each request stateless: the legacy message
  upgraded to the modern version (`translate.request`), its `_meta` filled with
  the protocol version, the session's client capabilities and client info, the
  log level set with `logging/setLevel`; the standard headers derived from it.
  What comes back is translated down (`resultType`, `ttlMs`, `cacheScope`,
  modern `_meta` keys removed; 2026-only error codes mapped, the original in
  `data`).
- An `InputRequiredResult` becomes real server-to-client requests: each
  `inputRequests` entry is yielded on the call's exchange as
  `elicitation/create`, `sampling/createMessage` or `roots/list` with an id of
  the gateway's; the client's answers (`respond`) are gathered into
  `inputResponses` and the request is sent again with them and the
  `requestState`, for as many rounds as the server asks. The client sees one
  call. An input request of a kind the client did not declare, an error
  answer, or the exchange closed (the client went away) end the call: the
  upstream is not retried.
- A list (`tools/list`, `prompts/list`, `resources/list`,
  `resources/templates/list`) is served again from `ListCache` while the
  upstream's `ttlMs` says it is fresh: a legacy client has no such field, so
  the gateway honours it for it. Entries are per credential; a re-fetch after
  expiry that finds a different list sends `notifications/*/list_changed` to
  the credential's other legacy sessions, the one way a legacy client learns
  that the copy it keeps is stale.
- `ping` and `logging/setLevel` are answered here; `resources/subscribe` and
  `unsubscribe` change what the session's `listen` stream asks the upstream's
  `subscriptions/listen` for; `notifications/cancelled` closes the upstream
  request's stream (a modern server's cancellation).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import structlog

from app import jsonio
from app.headers.header_values import header_form
from app.headers.param_headers import HeaderPaths, annotated_paths
from app.upstream.base import Message
from app.upstream.era import Era, EraProbe, newest_common, probe_era
from app.upstream.errors import SessionExpired, UpstreamError, UpstreamProtocolError
from app.upstream.modern.upstream import ModernHttpUpstream, header_value, standard_headers
from app.upstream.pool import credential_hash
from app.upstream.streamable_http.transport import HttpExchange
from translators import translate, v2024_11_05
from translators._base import Context
from translators.registry import LATEST_MODERN, Version, get_version

log = structlog.get_logger("mcp_shim.modern_session")
_T = TypeVar("_T")

INPUT_METHODS = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
# At most this many input rounds for one call: a server that never stops
# asking ends the call instead of holding it forever.
MAX_ROUNDS = 32
# How long the tools' x-mcp-header annotations are trusted without a list_changed.
TOOLS_CACHE_S = 60.0
LISTEN_ID = "mcp-shim-listen"
_ANSWERED_HERE = {"ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}
# The cacheable lists (2026-07-28 server/utilities/caching "Cacheable Results";
# resources/read is left to the upstream), each with the member that holds its
# items and the notification that says it changed (the translators' table).
LISTS = {method: (item.member, item.changed) for method, item in v2024_11_05.LISTS.items()}
# Bound on the cached list pages (all credentials together), least recently used out first.
LIST_CACHE_ENTRIES = 256
_DROPPED_NOTES = {
    "notifications/initialized",
    "notifications/roots/list_changed",
    "notifications/progress",
}


def _error(call_id: Any, code: int, message: str, data: Any = None) -> Message:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": call_id, "error": error}


class _Canned:
    """An exchange whose answer the gateway gives itself."""

    last_event_id: str | None = None

    def __init__(self, message: Message) -> None:
        self._message = message

    async def _one(self) -> AsyncIterator[Message]:
        yield self._message

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._one()

    async def aclose(self, drain: bool = False) -> None:
        return None


CacheKey = tuple[str, str, str, str]  # credential hash, method, canonical params, modern version


class _Cached:
    __slots__ = ("digest", "fresh_until", "result")

    def __init__(self, result: Message, fresh_until: float, digest: bytes) -> None:
        self.result = result
        self.fresh_until = fresh_until
        self.digest = digest


class ListCache:
    """Modern list results kept as long as their `ttlMs` says (2026-07-28
    server/utilities/caching "Time-to-Live (TTL) Field": "If `ttlMs` is
    positive, the client SHOULD consider the result fresh for that many
    milliseconds after receiving the response"), for the legacy sessions,
    whose clients cannot see the field.

    Keyed by the caller's credential hash, the method, its parameters (the
    cursor: each page is its own entry, "Interaction with Pagination") and the
    modern version: callers with different credentials never share an entry,
    even for `cacheScope: "public"`, which would allow it. Nothing is
    refreshed in the background ("Clients SHOULD NOT treat TTL as a polling
    interval"); an expired entry stays until its key is fetched again, to say
    whether the list changed."""

    def __init__(
        self, size: int = LIST_CACHE_ENTRIES, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[CacheKey, _Cached] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(authorization: str | None, message: Message, modern: Version) -> CacheKey | None:
        method = message.get("method")
        if method not in LISTS:
            return None
        params = message.get("params")
        params = dict(params) if isinstance(params, dict) else {}
        params.pop("_meta", None)
        if "inputResponses" in params or "requestState" in params:
            return None  # "Cache Key": results of a multi round-trip retry MUST NOT be cached
        canonical = jsonio.dumps_sorted(params).decode()
        return (credential_hash(authorization), str(method), canonical, modern.name)

    def fresh(self, key: CacheKey) -> Message | None:
        entry = self._entries.get(key)
        if entry is None or self._clock() >= entry.fresh_until:
            return None
        self._entries.move_to_end(key)
        return entry.result

    def store(self, key: CacheKey, result: Message) -> bool:
        """Keep `result` for its `ttlMs`; True if it replaces an entry whose list differs."""
        member = LISTS[key[1]][0]
        digest = hashlib.sha256(
            jsonio.dumps_sorted([result.get(member), result.get("nextCursor")])
        ).digest()
        before = self._entries.pop(key, None)
        changed = before is not None and before.digest != digest
        ttl = result.get("ttlMs")
        # "If `ttlMs` is negative, clients SHOULD ignore it and treat it as `0`";
        # 0 is "immediately stale": nothing to serve, but the digest is kept, so a
        # later fetch still tells whether the list changed.
        ttl_s = ttl / 1000 if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0 else 0
        self._entries[key] = _Cached(result, self._clock() + ttl_s, digest)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return changed

    def invalidate(self, notification: str) -> None:
        """An upstream `list_changed`: "the notification **invalidates** the cached
        response and it should be considered immediately stale" ("Interaction
        with Notifications"), for every credential."""
        methods = {m for m, (_, note) in LISTS.items() if note == notification}
        for key, entry in self._entries.items():
            if key[1] in methods:
                entry.fresh_until = 0.0


class ModernTransport:
    def __init__(self, upstream: ModernHttpUpstream, probe: EraProbe | None = None) -> None:
        self._upstream = upstream
        self._probe = probe
        self.lists = ListCache()
        self.hub = ListenHub(upstream, self.lists)
        self._sessions: weakref.WeakSet[ModernSession] = weakref.WeakSet()

    async def open_session(
        self, initialize: Message, headers: Mapping[str, str]
    ) -> tuple[ModernSession, Message]:
        params = initialize.get("params") or {}
        offered = get_version(params.get("protocolVersion"))
        assert offered is not None
        authorization = headers.get("authorization")
        # A refusal that names no era raises `EraInconclusive`: the caller
        # learns the upstream's status, and the stored era stays as it is.
        era = await probe_era(self._upstream, LATEST_MODERN, authorization)
        result = era.discover
        if result is None:
            raise UpstreamProtocolError(
                f"upstream answered server/discover without a DiscoverResult ({era.name} era)"
            )
        modern = newest_common(result.get("supportedVersions"))
        if modern is None:
            raise UpstreamProtocolError(
                "upstream supports no modern protocol version this gateway knows: "
                f"{result.get('supportedVersions')!r}"
            )
        # The discover result in the legacy shape: an InitializeResult.
        legacy = translate.result(result, "server/discover", modern, offered)
        init: Message = {
            "protocolVersion": offered.name,
            "capabilities": legacy.get("capabilities") or {},
            "serverInfo": legacy.get("serverInfo") or {"name": "unknown", "version": "0"},
        }
        if isinstance(result.get("instructions"), str):
            init["instructions"] = result["instructions"]
        session = ModernSession(
            self._upstream,
            modern=modern,
            legacy=offered,
            client_capabilities=params.get("capabilities") or {},
            client_info=params.get("clientInfo"),
            authorization=authorization,
            server_capabilities=result.get("capabilities") or {},
            probe=self._probe,
            seen=self._probe.known if self._probe is not None else None,
            hub=self.hub,
            transport=self,
        )
        self._sessions.add(session)
        return session, init

    def announce(self, notification: str, credential: str, source: ModernSession) -> None:
        """A list changed under the sessions of `credential`: tell the others on
        their GET streams (`source` fetched the new list itself)."""
        note: Message = {"jsonrpc": "2.0", "method": notification}
        for session in list(self._sessions):
            if session is not source and credential_hash(session.authorization) == credential:
                session.announce(note)

    async def aclose(self) -> None:
        await self.hub.aclose()


class ModernSession:
    """One legacy client's session in front of a modern upstream; no upstream state."""

    session_id: str | None = None

    def __init__(
        self,
        upstream: ModernHttpUpstream,
        *,
        modern: Version,
        legacy: Version,
        client_capabilities: Mapping[str, Any],
        client_info: Mapping[str, Any] | None,
        authorization: str | None,
        server_capabilities: Mapping[str, Any],
        probe: EraProbe | None = None,
        seen: Era | None = None,
        hub: ListenHub | None = None,
        transport: ModernTransport | None = None,
    ) -> None:
        self._upstream = upstream
        self.hub = hub if hub is not None else ListenHub(upstream)
        self._transport = transport
        self._probe = probe
        self._seen = seen
        self.modern = modern
        self.version = legacy
        self._client_caps = dict(client_capabilities)  # in the legacy version's form
        self._client_info = dict(client_info) if client_info else None
        self.authorization = authorization
        self._server_caps = dict(server_capabilities)
        self.log_level: str | None = None
        self.subscribed: set[str] = set()
        self._calls: dict[Any, _Call] = {}  # by the client's request id
        self._asked: dict[Any, _Call] = {}  # by the id of our input request
        self._ids = itertools.count(1)
        self._listens: set[_Listen] = set()
        self._tool_paths: dict[str, HeaderPaths] | None = None
        self._tools_at = 0.0
        self._tools_lock = asyncio.Lock()

    # -- the seam ------------------------------------------------------------

    async def request(self, message: Message) -> _Canned | _Call:
        method = message.get("method")
        if method in _ANSWERED_HERE:
            return _Canned(self._answer_here(message))
        key = None
        if self._transport is not None:
            key = ListCache.key(self.authorization, message, self.modern)
            cached = self._transport.lists.fresh(key) if key is not None else None
            if cached is not None:
                result = translate.result(cached, str(method), self.modern, self.version)
                return _Canned({"jsonrpc": "2.0", "id": message.get("id"), "result": result})
        call = _Call(self, message, key)
        self._calls[message.get("id")] = call
        return call

    async def notify(self, message: Message) -> None:
        if message.get("method") == "notifications/cancelled":
            params = message.get("params") or {}
            call = self._calls.get(params.get("requestId"))
            if call is not None:
                await call.cancel()
        # Other client notifications have no modern counterpart (2026-07-28
        # defines none from client to server on this wire): dropped.

    async def respond(self, message: Message) -> None:
        call = self._asked.pop(message.get("id"), None)
        if call is not None:
            call.answered(message)

    async def listen(self, last_event_id: str | None = None) -> _Listen:
        stream = _Listen(self)
        self._listens.add(stream)
        return stream

    async def close(self) -> None:
        for call in list(self._calls.values()):
            await call.cancel()
        for stream in list(self._listens):
            await stream.aclose()

    # -- helpers -------------------------------------------------------------

    def listed(self, key: CacheKey, result: Message) -> None:
        """A list the upstream answered: cached for its ttlMs; if it differs from
        the expired entry it replaces, the credential's other sessions are told."""
        transport = self._transport
        if transport is not None and transport.lists.store(key, result):
            transport.announce(LISTS[key[1]][1], key[0], self)

    def announce(self, note: Message) -> None:
        for stream in list(self._listens):
            stream.offer(note)

    def _answer_here(self, message: Message) -> Message:
        method = message.get("method")
        params = message.get("params") or {}
        if method == "logging/setLevel":
            # Kept here and sent on each request (2026-07-28: per-request logLevel).
            self.log_level = params.get("level")
        elif method == "resources/subscribe" and isinstance(params.get("uri"), str):
            self.subscribed.add(params["uri"])
            self._refilter()
        elif method == "resources/unsubscribe":
            self.subscribed.discard(str(params.get("uri")))
            self._refilter()
        return {"jsonrpc": "2.0", "id": message.get("id"), "result": {}}

    def _refilter(self) -> None:
        for stream in self._listens:
            stream.refilter()

    def headers_for(self, message: Message) -> dict[str, str]:
        headers = standard_headers(message, self.modern.name)
        if self.authorization is not None:
            headers["authorization"] = self.authorization
        return headers

    async def param_headers(self, message: Message) -> dict[str, str]:
        """`Mcp-Param-*` for the annotated arguments of a tools/call (2026-07-28
        streamable-http "Custom Headers"): a legacy client sends none, and a
        modern server refuses the call without them. The annotations come from
        the upstream's tools/list, kept for TOOLS_CACHE_S or until a
        tools/list_changed."""
        params = message.get("params") or {}
        name = params.get("name")
        if not isinstance(name, str):
            return {}
        fresh = time.monotonic() - self._tools_at < TOOLS_CACHE_S
        if self._tool_paths is None or not fresh:
            async with self._tools_lock:
                if self._tool_paths is None or time.monotonic() - self._tools_at >= TOOLS_CACHE_S:
                    self._tool_paths = await self._list_tool_paths()
                    self._tools_at = time.monotonic()
        headers: dict[str, str] = {}
        arguments = params.get("arguments")
        for header, path in self._tool_paths.get(name, ()):
            value: Any = arguments
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            form = header_form(value) if value is not None else None
            if form is not None:
                headers[f"mcp-param-{header}"] = header_value(form)
        return headers

    def tools_changed(self) -> None:
        self._tool_paths = None

    async def _list_tool_paths(self) -> dict[str, HeaderPaths]:
        paths: dict[str, HeaderPaths] = {}
        cursor: Any = None
        for page in range(100):  # bounded: a server that pages forever is not followed
            listing: Message = {
                "jsonrpc": "2.0",
                "id": f"mcp-shim-tools-{page}",
                "method": "tools/list",
                "params": {} if cursor is None else {"cursor": cursor},
            }
            listing = self.upgrade(listing)
            exchange = await self._upstream.request(listing, self.headers_for(listing))
            result: Any = None
            try:
                async for reply in exchange:
                    if reply.get("id") == listing["id"]:
                        result = reply.get("result")
                        break
            finally:
                await exchange.aclose(drain=True)
            if not isinstance(result, dict):
                break
            for tool in result.get("tools") or []:
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    paths[tool["name"]] = annotated_paths(tool.get("inputSchema"))
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return paths

    def upgrade(self, message: Message) -> Message:
        ctx = Context(
            client_capabilities=self._client_caps,
            client_info=self._client_info,
            log_level=self.log_level,
        )
        return translate.request(message, self.version, self.modern, ctx)

    async def still_modern(
        self, exchange: HttpExchange, answer: Message | None, request_id: object, method: str
    ) -> None:
        """An error answer that says the upstream may be legacy again
        (`EraProbe.recheck`): if a new probe says so, the request never ran
        there: `SessionExpired`, and the caller opens a session of the new era."""
        probe = self._probe
        if probe is None or self._seen is None or exchange.status < 400:
            return
        authorization = self.authorization
        era = await probe.recheck(
            self._seen, exchange.status, answer, request_id, method, authorization
        )
        if era.name == "legacy":
            raise SessionExpired("the upstream now speaks the legacy era")

    def next_input_id(self, call: _Call) -> str:
        ident = f"mcp-shim-input-{next(self._ids)}"
        self._asked[ident] = call
        return ident

    def forget(self, call: _Call) -> None:
        if self._calls.get(call.client_id) is call:
            del self._calls[call.client_id]
        for key in [k for k, v in self._asked.items() if v is call]:
            del self._asked[key]

    def declared(self, method: str) -> bool:
        kind = INPUT_METHODS.get(method)
        return kind is not None and kind in self._client_caps

    def listen_filter(self) -> dict[str, Any]:
        caps = self._server_caps
        wanted: dict[str, Any] = {}
        for cap, flag in (
            ("tools", "toolsListChanged"),
            ("prompts", "promptsListChanged"),
            ("resources", "resourcesListChanged"),
        ):
            entry = caps.get(cap)
            if isinstance(entry, dict) and entry.get("listChanged"):
                wanted[flag] = True
        if self.subscribed:
            wanted["resourceSubscriptions"] = sorted(self.subscribed)
        return wanted


class _Call:
    """One legacy request sent stateless, and as many input rounds as it takes."""

    last_event_id: str | None = None

    def __init__(
        self, session: ModernSession, message: Message, cache_key: CacheKey | None = None
    ) -> None:
        self._session = session
        self._message = message
        self._cache_key = cache_key
        self.client_id = message.get("id")
        self._method = str(message.get("method"))
        self._exchange: HttpExchange | None = None
        self._answers: asyncio.Queue[Message] = asyncio.Queue()
        self._cancelled = False
        self._cancel = asyncio.Event()
        self._messages = self._run()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._messages

    async def cancel(self) -> None:
        self._cancelled = True
        self._cancel.set()

    async def _until_cancelled(self, exchange: HttpExchange) -> AsyncGenerator[Message, None]:
        """The exchange's messages until the client cancels: the read is raced
        against the cancellation, since closing a response another task reads
        does not wake that read. Leaving closes the upstream stream."""
        messages = aiter(exchange)
        while True:
            try:
                message = await self._or_cancelled(anext(messages))
            except StopAsyncIteration:
                return
            if message is None:
                return
            yield message

    async def _or_cancelled(self, step: Awaitable[_T]) -> _T | None:
        """`step`'s result, or None if the client cancels first (then `step` is
        cancelled, which closes the connection it was reading)."""
        task = asyncio.ensure_future(step)
        cancelled = asyncio.ensure_future(self._cancel.wait())
        try:
            await asyncio.wait({task, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        return None

    def answered(self, message: Message) -> None:
        self._answers.put_nowait(message)

    async def _send(self, params_extra: Mapping[str, Any]) -> HttpExchange:
        message = self._session.upgrade(self._message)
        if params_extra:
            message = {**message, "params": {**(message.get("params") or {}), **params_extra}}
        headers = self._session.headers_for(message)
        if self._method == "tools/call":
            headers.update(await self._session.param_headers(message))
        exchange = await self._session._upstream.request(message, headers)
        self._exchange = exchange
        return exchange

    def _down(self, message: Message) -> Message | None:
        session = self._session
        if "method" in message:
            return translate.notification(message, session.modern, session.version)
        if "error" in message:
            error = translate.error(message["error"], session.modern, session.version, self._method)
            return {"jsonrpc": "2.0", "id": self.client_id, "error": error}
        result = translate.result(
            message.get("result") or {}, self._method, session.modern, session.version
        )
        return {"jsonrpc": "2.0", "id": self.client_id, "result": result}

    async def _run(self) -> AsyncGenerator[Message, None]:
        extra: dict[str, Any] = {}
        try:
            async with contextlib.aclosing(self._rounds(extra)) as messages:
                async for message in messages:
                    yield message
        except UpstreamError:
            if not self._cancelled:
                raise
            # Cancelled by the client: its stream was closed under the read.
        finally:
            self._session.forget(self)

    async def _rounds(self, extra: dict[str, Any]) -> AsyncGenerator[Message, None]:
        for _ in range(MAX_ROUNDS):
            # A modern server may hold the answer's headers until it has
            # something to say: the send itself is raced against a cancel.
            exchange = await self._or_cancelled(self._send(extra))
            if exchange is None:
                return
            final: Message | None = None
            try:
                # Closed here when the answer ends the loop, not later by the
                # loop's finalizer hook in a task of its own.
                async with contextlib.aclosing(self._until_cancelled(exchange)) as messages:
                    async for message in messages:
                        if "method" in message and "id" not in message:
                            note = self._down(message)
                            if note is not None:
                                yield note
                        elif "method" not in message:
                            final = message
                            break
            finally:
                await exchange.aclose(drain=final is not None)
                self._exchange = None
            if self._cancelled:
                return
            await self._session.still_modern(exchange, final, self.client_id, self._method)
            if final is None:
                raise UpstreamProtocolError(
                    f"upstream closed the {self._method} stream without answering"
                )
            result = final.get("result")
            if not (isinstance(result, dict) and result.get("resultType") == "input_required"):
                if self._cache_key is not None and not extra and isinstance(result, dict):
                    self._session.listed(self._cache_key, result)
                answer = self._down(final)
                if answer is not None:
                    yield answer
                return
            # basic/patterns/mrtr: ask the client, gather, retry with the answers.
            gathered: dict[str, Any] = {}
            refusal: Message | None = None
            asked = self._ask(result.get("inputRequests") or {}, gathered)
            async with contextlib.aclosing(asked) as items:
                async for item in items:
                    if "error" in item and item.get("id") == self.client_id:
                        refusal = item
                        break
                    yield item
            if refusal is not None:
                yield refusal
                return
            extra = {"inputResponses": gathered}
            if isinstance(result.get("requestState"), str):
                extra["requestState"] = result["requestState"]
        yield _error(
            self.client_id,
            -32603,
            f"the upstream asked for input more than {MAX_ROUNDS} times; the call was ended",
        )

    async def _ask(
        self, requests: Mapping[str, Any], gathered: dict[str, Any]
    ) -> AsyncGenerator[Message, None]:
        """Yield the round's input requests as server requests, then wait for every
        answer; an error message for the client (with its id) ends the call."""
        session = self._session
        waiting: dict[str, str] = {}
        for key, request in requests.items():
            method = request.get("method") if isinstance(request, dict) else None
            if not isinstance(method, str) or not session.declared(method):
                kind = INPUT_METHODS.get(str(method), str(method))
                yield _error(
                    self.client_id,
                    -32603,
                    f"The upstream needs the client's {kind} capability to answer this request, "
                    "and the client did not declare it at initialize",
                    {"requiredCapability": kind},
                )
                return
            ident = session.next_input_id(self)
            waiting[ident] = key
            legacy = translate.request(
                {"jsonrpc": "2.0", "id": ident, "method": method, "params": request.get("params")},
                session.modern,
                session.version,
            )
            yield legacy
        while waiting:
            answer = await self._answers.get()
            key_of = waiting.pop(answer.get("id"), None)  # type: ignore[arg-type]
            if key_of is None:
                continue
            if "error" in answer or not isinstance(answer.get("result"), dict):
                err = answer.get("error") if isinstance(answer.get("error"), dict) else {}
                yield _error(
                    self.client_id,
                    -32603,
                    "The client answered the upstream's input request with an error; "
                    "the call was ended",
                    {"inputKey": key_of, "clientError": err},
                )
                return
            method = requests[key_of]["method"]
            gathered[key_of] = translate.result(
                answer["result"], method, session.version, session.modern
            )

    async def aclose(self, drain: bool = False) -> None:
        # The client went away or the front is done: nothing is retried.
        self._cancelled = True
        self._cancel.set()
        if self._exchange is not None:
            with contextlib.suppress(Exception):
                await self._exchange.aclose()
        with contextlib.suppress(Exception):
            await self._messages.aclose()
        self._session.forget(self)


ListenKey = tuple[str, str, str]  # credential hash, canonical filter, modern version


class ListenHub:
    """The upstream's `subscriptions/listen` streams behind legacy sessions' GET
    streams: one per credential and filter, shared by every session that wants
    exactly that, reference counted (the last one leaving closes it)."""

    def __init__(self, upstream: ModernHttpUpstream, lists: ListCache | None = None) -> None:
        self._upstream = upstream
        self.lists = lists
        self._streams: dict[ListenKey, _SharedListen] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def join(self, key: ListenKey, session: ModernSession, sink: Sink) -> _SharedListen:
        shared = self._streams.get(key)
        if shared is None:
            shared = _SharedListen(self, key, self._upstream, session)
            self._streams[key] = shared
        shared.sinks.append(sink)
        return shared

    def leave(self, shared: _SharedListen, sink: Sink) -> None:
        with contextlib.suppress(ValueError):
            shared.sinks.remove(sink)
        if not shared.sinks:
            if self._streams.get(shared.key) is shared:
                del self._streams[shared.key]
            shared.stop()

    async def aclose(self) -> None:
        for shared in list(self._streams.values()):
            shared.stop()
        self._streams.clear()


Sink = Callable[[Message], None]


class _SharedListen:
    """One upstream `subscriptions/listen`, its notifications offered to every
    sink (in the modern form: each session translates for its own version);
    opened again after a lost stream, with backoff."""

    def __init__(
        self, hub: ListenHub, key: ListenKey, upstream: ModernHttpUpstream, session: ModernSession
    ) -> None:
        self.key = key
        self.sinks: list[Sink] = []
        self._hub = hub
        self._upstream = upstream
        message = session.upgrade(
            {
                "jsonrpc": "2.0",
                "id": LISTEN_ID,
                "method": "subscriptions/listen",
                "params": {"notifications": jsonio.loads(key[1])},
            }
        )
        self._message = message
        self._headers = session.headers_for(message)
        self._task = asyncio.create_task(self._pump())

    def stop(self) -> None:
        self._task.cancel()

    async def _pump(self) -> None:
        backoff = 0.2
        while True:
            try:
                exchange = await self._upstream.request(
                    self._message, self._headers, long_lived=True
                )
            except UpstreamError as exc:
                log.info("modern_listen_failed", error=exc.message)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = 0.2
            try:
                async for message in exchange:
                    method = message.get("method")
                    if method is None or method == "notifications/subscriptions/acknowledged":
                        continue
                    if self._hub.lists is not None:
                        self._hub.lists.invalidate(str(method))
                    for sink in list(self.sinks):
                        sink(message)
            except UpstreamError as exc:
                log.info("modern_listen_lost", error=exc.message)
            finally:
                await exchange.aclose()
            await asyncio.sleep(backoff)


class _Listen:
    """The legacy session's GET stream: fed by the shared upstream listen
    stream for this session's credential and filter; when the session's
    subscriptions change it moves to the stream of its new filter."""

    last_event_id: str | None = None

    def __init__(self, session: ModernSession) -> None:
        self._session = session
        self._queue: asyncio.Queue[Message | None] = asyncio.Queue(maxsize=1024)
        self._shared: _SharedListen | None = None
        self._started = False
        self._closed = False

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._read()

    async def _read(self) -> AsyncIterator[Message]:
        self._started = True
        self.refilter()
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item

    def refilter(self) -> None:
        if not self._started or self._closed:
            return
        session = self._session
        wanted = session.listen_filter()
        key = (
            credential_hash(session.authorization),
            jsonio.dumps_sorted(wanted).decode(),
            session.modern.name,
        )
        if self._shared is not None and self._shared.key == key:
            return
        if self._shared is not None:
            session.hub.leave(self._shared, self._offer)
            self._shared = None
        if wanted:
            self._shared = session.hub.join(key, session, self._offer)

    def offer(self, message: Message) -> None:
        """A notification of the gateway's own (modern form) for this stream."""
        if not self._closed:
            self._offer(message)

    def _offer(self, message: Message) -> None:
        session = self._session
        if message.get("method") == "notifications/tools/list_changed":
            session.tools_changed()
        note = translate.notification(message, session.modern, session.version)
        if note is None:
            return
        try:
            self._queue.put_nowait(note)
        except asyncio.QueueFull:
            # A client that does not read its GET stream loses it, not the others.
            log.info("modern_listen_overflow")
            self._end()

    def _end(self) -> None:
        if self._shared is not None:
            self._session.hub.leave(self._shared, self._offer)
            self._shared = None
        self._closed = True
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    async def aclose(self, drain: bool = False) -> None:
        self._session._listens.discard(self)
        self._end()
