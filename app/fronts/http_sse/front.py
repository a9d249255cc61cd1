"""The deprecated HTTP+SSE transport (2024-11-05 basic/transports "HTTP with SSE").

A 2024-11-05 client opens `GET /sse`; the first event, `endpoint`, names where
it POSTs its messages (`/messages?session_id=...`); every message of the server
comes on that one stream. Behind it is the same machinery as for Streamable
HTTP clients (`LegacyService`, app/fronts/legacy/service.py, shared with the
legacy front: `initialize` and the gateway's own session with its own
upstream session, translation both ways); only the way back differs:
each POST is answered 202 and what it produces goes on the channel's stream.

The channel lives as long as its `GET /sse`: when the client goes away its
session ends on both sides. A channel takes one `initialize`, and must have it
within MCP_SHIM_SSE_INIT_TIMEOUT_S, or it is closed; an address holds at most
MCP_SHIM_MAX_UNINITIALIZED_SSE_PER_ADDRESS channels still waiting for theirs,
so idle streams cannot take every connection the gateway may hold. Its id
names the replica holding it, sealed like a session id (app/cluster/replicas.py): a
POST that reaches another replica is relayed there as it came.

Each request a POST brings runs on its own after the 202, so no connection
stays open for it: a channel counts the requests it has running or waiting
(for their turn: one request per id text upstream, app/fronts/legacy/turns.py)
and holds at most MCP_SHIM_MAX_CONNECTIONS of them, as many as a `POST /mcp`
client could have, each on a connection of its own. A POST that would bring
more is refused whole, as `POST /mcp` is at that bound (`server_busy`: 503,
-32603), and the channel goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncGenerator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import structlog
from starlette.responses import Response

from app import jsonio
from app.call import Message
from app.cluster.session import LegacySession, held_by
from app.connection.busy import RateLimitedLog, server_busy
from app.fronts.legacy import checks as front
from app.fronts.legacy import opening
from app.fronts.legacy.replies import guarded, refuse, session_not_found
from app.fronts.legacy.service import LegacyService
from app.fronts.legacy.stream import server_stream
from app.fronts.shared.answer import sse_event
from app.rejections import INTERNAL_ERROR, INVALID_REQUEST, Rejection
from app.upstream.sessions.pool import credential_hash

log = structlog.get_logger("mcp_shim.legacy.sse")

MESSAGES_PATH = "/messages"
# What a channel may hold for a client that reads slowly before calls wait.
_QUEUE_BOUND = 256
_KEEPALIVE = b":\n\n"

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


@dataclass(eq=False)
class Channel:
    id: str
    credentials: str
    # The client's address, while the channel counts among its uninitialized ones.
    address: str | None = None
    # By when (monotonic) an initialize must have come.
    deadline: float = math.inf
    outbox: asyncio.Queue[Message] = field(default_factory=lambda: asyncio.Queue(_QUEUE_BOUND))
    session: LegacySession | None = None
    # An initialize is under way: a second one is refused, as after it.
    initializing: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    # Requests running or waiting (their tasks are among `tasks`).
    requests: int = 0
    closed: bool = False


class HttpSseFront:
    def __init__(
        self,
        legacy: LegacyService,
        *,
        max_channels: int,
        keepalive_s: float,
        write_timeout_s: float,
        init_timeout_s: float = 10.0,
        max_uninitialized_per_address: int = 4,
        max_requests: int = 1024,
        messages_path: str = MESSAGES_PATH,
    ) -> None:
        # The legacy clients' sessions and calls, shared with app/fronts/legacy/front.py.
        self._legacy = legacy
        # Where the endpoint event sends a channel's POSTs: under /servers/NAME/
        # for one of many servers (app/servers).
        self._messages_path = messages_path
        self._sessions = legacy.sessions
        self._max = max_channels
        self._keepalive_s = keepalive_s
        self._write_timeout_s = write_timeout_s
        self._channels: dict[str, Channel] = {}
        self._init_timeout_s = init_timeout_s
        self._max_uninitialized = max_uninitialized_per_address
        # MCP_SHIM_MAX_CONNECTIONS: requests one channel may have running or waiting.
        self._max_requests = max_requests
        # Channels not initialized yet, by client address.
        self._uninitialized: dict[str, int] = {}
        self._events = RateLimitedLog()

    # -- GET /sse --------------------------------------------------------------

    def open(self, headers: Mapping[str, str], address: str | None = None) -> Response:
        unfit = front.check_header_values(headers)
        if unfit is not None:
            return refuse(unfit)
        address = address or ""
        waiting = self._uninitialized.get(address, 0)
        if waiting >= self._max_uninitialized:
            self._events.event("sse_channel_refused", reason="uninitialized_per_address")
            retry_after = str(max(1, math.ceil(self._init_timeout_s)))
            return refuse(
                Rejection(
                    INTERNAL_ERROR,
                    f"Too many HTTP+SSE channels from this address wait for initialize "
                    f"({self._max_uninitialized}, MCP_SHIM_MAX_UNINITIALIZED_SSE_PER_ADDRESS): "
                    "send initialize on the open ones, or retry later",
                    status=429,
                ),
                {"retry-after": retry_after},
            )
        if len(self._channels) >= self._max:
            return refuse(
                Rejection(
                    INTERNAL_ERROR,
                    f"all {self._max} legacy sessions are in use; raise "
                    "MCP_SHIM_MAX_LEGACY_SESSIONS or retry later",
                    status=503,
                )
            )
        credentials = credential_hash(headers.get("authorization"))
        channel = Channel(
            self._sessions.ids.mint(credentials),
            credentials,
            address=address,
            deadline=time.monotonic() + self._init_timeout_s,
        )
        self._uninitialized[address] = waiting + 1
        self._channels[channel.id] = channel
        log.info("sse_channel_opened", channels=len(self._channels))
        return _ChannelStream(self, channel, self._write_timeout_s)

    async def frames(self, channel: Channel) -> AsyncGenerator[bytes, None]:
        try:
            yield (
                b"event: endpoint\ndata: "
                + (f"{self._messages_path}?session_id={channel.id}".encode())
                + b"\n\n"
            )
            while True:
                wait_s = self._keepalive_s
                if channel.address is not None and not channel.initializing:
                    wait_s = min(wait_s, channel.deadline - time.monotonic())
                    if wait_s <= 0 and channel.outbox.empty():
                        self._events.event("sse_channel_not_initialized")
                        return
                try:
                    async with asyncio.timeout(max(wait_s, 0.0)):
                        message = await channel.outbox.get()
                except TimeoutError:
                    if wait_s >= self._keepalive_s:
                        yield _KEEPALIVE
                    continue
                yield sse_event(message)
        finally:
            await self._close(channel)

    def _initialized(self, channel: Channel) -> None:
        """The channel no longer counts among its address's uninitialized ones."""
        address, channel.address = channel.address, None
        if address is None:
            return
        left = self._uninitialized.get(address, 0) - 1
        if left > 0:
            self._uninitialized[address] = left
        else:
            self._uninitialized.pop(address, None)

    async def _close(self, channel: Channel) -> None:
        if channel.closed:
            return
        channel.closed = True
        self._channels.pop(channel.id, None)
        self._initialized(channel)  # or never will be: counted no more either way
        for task in list(channel.tasks):
            task.cancel()
        await asyncio.gather(*channel.tasks, return_exceptions=True)
        if channel.session is not None:
            channel.session.in_flight -= 1
            await self._sessions.end(channel.session, "sse_stream_closed")
        log.info("sse_channel_closed", channels=len(self._channels))

    # -- POST /messages ---------------------------------------------------------

    @guarded
    async def post(
        self,
        channel_id: str | None,
        body: bytes,
        headers: Mapping[str, str],
        *,
        gateway_url: str | None = None,
    ) -> Response:
        unfit = front.check_header_values(headers)
        if unfit is not None:
            return refuse(unfit)
        channel = self._channels.get(channel_id or "")
        if channel is None and channel_id is not None:
            # Opened on another replica (its id says which): relayed there, to
            # the path under the owner's URL, which names its server's route.
            relayed = self._legacy.relayed(
                "POST",
                f"{MESSAGES_PATH}?{urlencode({'session_id': channel_id})}",
                channel_id,
                headers,
                body,
                owned="sse_channel",
            )
            if relayed is not None:
                return relayed
        if channel is None or not held_by(channel.credentials, headers.get("authorization")):
            return refuse(session_not_found())
        try:
            parsed = jsonio.loads(body)
        except jsonio.JSONDecodeError:
            return refuse(front.parse_error())
        if jsonio.deeper_than(body, parsed, self._legacy.max_json_depth):
            return refuse(front.too_deep(parsed, self._legacy.max_json_depth))
        if isinstance(parsed, list):
            members = self._batch_members(channel, parsed)
            if isinstance(members, Rejection):
                return refuse(members)
        else:
            checked = front.check_message(parsed)
            if isinstance(checked, Rejection):
                return refuse(checked)
            members = [checked]
        calls = [m for m in members if isinstance(m, front.LegacyRequest)]
        busy = self._busy(channel, calls)
        if busy is not None:
            return refuse(busy)
        for member in members:
            refusal = await self._one(channel, member, headers.get("authorization"))
            if refusal is not None:
                return refuse(refusal)
        return Response(status_code=202)

    def _batch_members(
        self, channel: Channel, items: list[Any]
    ) -> list[front.LegacyMessage] | Rejection:
        """A batch on the channel, by the rules of every route (`LegacyService.batch_members`);
        its notifications and responses go first, as on `POST /mcp`. Each request
        then runs on its own and its answer is an event of its own: a 2024-11-05
        server's messages are single `JSONRPCMessage`s, one per SSE event."""
        session = channel.session
        if session is None or session.ended:
            if not front.holds_initialize(items):
                return session_not_found()
            session = None  # refused by the batch rules: initialize inside
        members = self._legacy.batch_members(items, session)
        if isinstance(members, Rejection):
            return members
        return sorted(members, key=lambda m: isinstance(m, front.LegacyRequest))

    async def _one(
        self, channel: Channel, member: front.LegacyMessage, authorization: str | None
    ) -> Rejection | None:
        if isinstance(member, front.LegacyRequest) and member.method == "initialize":
            return await self._initialize(channel, member, authorization)
        session = channel.session
        if session is None or session.ended:
            return session_not_found(getattr(member, "id", None))
        if isinstance(member, front.LegacyRequest):
            # Counted with the spawn, nothing awaited in between: checked again
            # here, as other POSTs may have come while this batch's notifications
            # were delivered.
            busy = self._busy(channel, [member])
            if busy is not None:
                return busy
            channel.requests += 1
            task = self._spawn(channel, self._relay_call(channel, session, member))
            task.add_done_callback(lambda _: _one_less(channel))
            return None
        return await self._legacy.calls.deliver(session, member)

    def _busy(self, channel: Channel, calls: list[front.LegacyRequest]) -> Rejection | None:
        """The refusal of `calls` when the channel cannot take them all (`initialize`
        is not counted: the channel takes one, and nothing runs before it)."""
        count = sum(1 for call in calls if call.method != "initialize")
        if count == 0 or channel.requests + count <= self._max_requests:
            return None
        self._events.event(
            "sse_request_refused",
            reason="channel_busy",
            limit=self._max_requests,
            setting="MCP_SHIM_MAX_CONNECTIONS",
        )
        busy = server_busy(
            f"{channel.requests} requests are running or waiting on this HTTP+SSE channel, "
            f"at most {self._max_requests}"
        )
        return busy.with_id(calls[0].id if len(calls) == 1 else None)

    async def _initialize(
        self, channel: Channel, request: front.LegacyRequest, authorization: str | None
    ) -> Rejection | None:
        # Taken before the first await: every initialize that came during the
        # upstream's would otherwise open a session too, and the channel ends
        # only the one it holds.
        if channel.session is not None or channel.initializing:
            return Rejection(
                INVALID_REQUEST,
                "Invalid request: this session is initialized already (one initialize per "
                "HTTP+SSE channel)",
                request.id,
            )
        channel.initializing = True
        try:
            opened = await opening.open_session(
                self._sessions, self._legacy.offered, request, authorization
            )
        finally:
            channel.initializing = False
        if isinstance(opened, Rejection):
            await channel.outbox.put(opened.to_message())
            return None
        opened_session, answer = opened
        if channel.closed:
            # The stream went away during initialize: nothing would ever end it.
            await self._sessions.end(opened_session, "sse_stream_closed")
            return None
        opened_session.in_flight += 1  # held while the channel's stream is open
        channel.session = opened_session
        self._initialized(channel)
        await channel.outbox.put(answer)
        self._spawn(channel, self._relay_server_stream(channel, opened_session))
        return None

    async def _relay_call(
        self, channel: Channel, session: LegacySession, request: front.LegacyRequest
    ) -> None:
        calls = self._legacy.calls.call(session, request, resumable=False)
        async with contextlib.aclosing(calls) as events:
            async for out in events:
                if not out.keepalive:
                    await channel.outbox.put(out.message)

    async def _relay_server_stream(self, channel: Channel, session: LegacySession) -> None:
        """What the upstream sends outside any call (its GET stream), on the channel."""
        legacy = self._legacy
        served = server_stream(self._sessions, session, None, legacy.keepalive_s)
        stream = legacy.calls.for_client(served, None)
        async with contextlib.aclosing(stream) as events:
            async for out in events:
                if out.final:
                    log.info("sse_channel_no_server_stream", status=out.status)
                    return
                if not out.keepalive:
                    await channel.outbox.put(out.message)

    def _spawn(self, channel: Channel, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        channel.tasks.add(task)
        task.add_done_callback(channel.tasks.discard)
        return task

    async def aclose(self) -> None:
        for channel in list(self._channels.values()):
            await self._close(channel)


def _one_less(channel: Channel) -> None:
    channel.requests -= 1


class _ChannelStream(Response):
    """The `GET /sse` answer: the channel's frames until the client goes away."""

    def __init__(self, owner: HttpSseFront, channel: Channel, write_timeout_s: float) -> None:
        super().__init__(status_code=200)
        self._owner = owner
        self._channel = channel
        self._write_timeout_s = write_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        frames = self._owner.frames(self._channel)
        main = asyncio.current_task()
        assert main is not None
        gone = asyncio.Event()

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone.set()
                    main.cancel()
                    return

        watcher = asyncio.create_task(watch())
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-cache"),
                        (b"x-accel-buffering", b"no"),
                    ],
                }
            )
            async for frame in frames:
                async with asyncio.timeout(self._write_timeout_s):
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
            # The gateway closed the channel (no initialize in time).
            async with asyncio.timeout(self._write_timeout_s):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except TimeoutError:
            log.info("sse_channel_stalled")
        except asyncio.CancelledError:
            if not gone.is_set():
                raise
            main.uncancel()
        except Exception:
            # The stream has started: its last event says what happened (never a cut).
            log.exception("call_failed", era="legacy", route="sse")
            failure = Rejection(
                INTERNAL_ERROR, "Internal error: the gateway failed to serve the stream", status=500
            )
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self._write_timeout_s):
                    # Written here: what failed may be the event writer itself.
                    last = b"event: message\ndata: " + jsonio.dumps(front.error_message(failure))
                    last += b"\n\n"
                    await send({"type": "http.response.body", "body": last, "more_body": False})
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await frames.aclose()
