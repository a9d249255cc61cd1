"""A modern upstream behind the legacy seam: what a legacy client's session needs.

The legacy front (app/fronts/legacy) speaks to an upstream session: `initialize`, then
`request` / `notify` / `respond` / `listen` / `close`, in a legacy version.
`ModernTransport` (app/upstream/modern/transport.py) gives it a `ModernSession`
in front of a 2026-07-28 server, which has no handshake and no session:

- `ModernSession.request` sends each request stateless: the legacy message
  upgraded to the modern version (`translate.request`), its `_meta` filled with
  the protocol version, the session's client capabilities and client info, the
  log level set with `logging/setLevel`; the standard headers derived from it.
  What comes back is translated down (`resultType`, `ttlMs`, `cacheScope`,
  modern `_meta` keys removed; 2026-only error codes mapped, the original in
  `data`). The call and its input rounds are `CallRounds` (rounds.py).
- A list still fresh in the `ListCache` (list_cache.py) is answered from it.
- A 2025-11-25 client's tasks (a `task` param on `tools/call`, `tasks/*`) go
  to `LegacyTasks` (tasks.py) when the upstream offers the tasks extension.
- `ping` and `logging/setLevel` are answered here; `resources/subscribe` and
  `unsubscribe` change what the session's `listen` stream asks the upstream's
  `subscriptions/listen` for (listen.py); `notifications/cancelled` closes the
  upstream request's stream (a modern server's cancellation).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from app.call import Message
from app.headers.header_values import header_form
from app.headers.param_headers import HeaderPaths, annotated_paths
from app.upstream.errors import SessionExpired
from app.upstream.modern.list_cache import LISTS, CacheKey, ListCache
from app.upstream.modern.listen import ListenHub, ListenStream
from app.upstream.modern.rounds import INPUT_METHODS, Asking, CallRounds
from app.upstream.modern.tasks import LegacyTasks, TaskCall, TaskRequest
from app.upstream.modern.upstream import ModernHttpUpstream, header_value, standard_headers
from app.upstream.sessions.era import Era, EraProbe
from app.upstream.streamable_http.transport import HttpExchange
from translators import legacy_tasks, translate
from translators._base import Context
from translators.registry import Version

# How long the tools' x-mcp-header annotations are trusted without a list_changed.
TOOLS_CACHE_S = 60.0
_ANSWERED_HERE = {"ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}


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


class SharedLists(Protocol):
    """What the sessions of one upstream share (`ModernTransport`,
    app/upstream/modern/transport.py): the list cache, and the way to tell the
    credential's other sessions that a list changed."""

    lists: ListCache

    def announce(self, notification: str, credential: str, source: ModernSession) -> None: ...


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
        transport: SharedLists | None = None,
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
        self._calls: dict[Any, Asking] = {}  # by the client's request id
        self._asked: dict[Any, Asking] = {}  # by the id of our input request
        self._ids = itertools.count(1)
        self._listens: set[ListenStream] = set()
        self._tool_paths: dict[str, HeaderPaths] | None = None
        self._tools_at = 0.0
        self._tools_lock = asyncio.Lock()
        # A 2025-11-25 client's tasks, when the upstream offers the extension.
        self._tasks: LegacyTasks | None = None
        extensions = self._server_caps.get("extensions")
        if isinstance(extensions, dict) and legacy_tasks.EXTENSION in extensions:
            self._tasks = LegacyTasks(self, upstream, upstream.legacy_tasks_per_session)

    # -- the seam ------------------------------------------------------------

    async def request(self, message: Message) -> _Canned | CallRounds | TaskRequest:
        method = message.get("method")
        if method in _ANSWERED_HERE:
            return _Canned(self._answer_here(message))
        if self._tasks is not None and self._tasks.handles(message):
            task_call: TaskCall | TaskRequest = self._tasks.request(message)
            self._calls[message.get("id")] = task_call
            return task_call
        key = None
        if self._transport is not None:
            key = ListCache.key(self.authorization, message, self.modern)
            cached = self._transport.lists.fresh(key) if key is not None else None
            if cached is not None:
                result = translate.result(cached, str(method), self.modern, self.version)
                return _Canned({"jsonrpc": "2.0", "id": message.get("id"), "result": result})
        call = CallRounds(self, self._upstream, message, key)
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

    async def listen(self, last_event_id: str | None = None) -> ListenStream:
        stream = ListenStream(self)
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

    def listen_closed(self, stream: ListenStream) -> None:
        self._listens.discard(stream)

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

    def next_input_id(self, call: Asking) -> str:
        ident = f"mcp-shim-input-{next(self._ids)}"
        self._asked[ident] = call
        return ident

    def forget(self, call: Asking) -> None:
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
