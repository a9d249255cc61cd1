"""The HTTP/1.1 protocol the gateway serves on: uvicorn's httptools protocol,
plus the connection limits uvicorn does not have.

uvicorn times out only idle keep-alive connections: a client that sends half
its headers, drips them byte by byte, or connects and sends nothing, keeps a
socket open for ever, and `limit_concurrency` is only checked once headers
are complete, so such sockets are never refused. Enough of them exhaust the
process's file descriptors and every new client is locked out. And uvicorn
waits for the transport to drain only *before* a write that finds it already
paused: an answer to a client that never reads goes whole into the
transport's buffer, and the graceful close after it waits for that buffer to
flush, for ever. Here, per connection:

- the headers of each request must arrive within MCP_SHIM_READ_TIMEOUT_S of
  its first byte (of the connection, for the first request): else 408 and
  close;
- a body still incomplete after that time is the route's to refuse (408,
  `app/routes/edge.py`); the connection is closed shortly after if it did not, or
  at once if the route answered without reading it;
- a transport whose write buffer stays above its high-water mark for
  MCP_SHIM_WRITE_TIMEOUT_S is aborted: the client read nothing for that long;
- at most MCP_SHIM_MAX_CONNECTIONS connections are open: a new one beyond it
  takes the place of the oldest connection that is not being answered (idle
  keep-alive, or still sending its request), or gets 503 if every one is.

When a bound is hit, one structured log line per kind and period says so,
with how many times since the last one.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import structlog
from uvicorn.protocols.http.httptools_impl import (
    HttpToolsProtocol,
)

from app import jsonio, write_coalescer
from app.connection.busy import RateLimitedLog, server_busy
from app.connection.link import LINK, ConnectionLink
from app.rejections import INVALID_REQUEST, Rejection

log = structlog.get_logger("mcp_shim.connections")

# After the read timeout, a route still reading a body gets this long to send
# its own 408 before the connection is closed under it.
_BODY_GRACE_S = 2.0


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int
    read_timeout_s: float
    write_timeout_s: float


def _raw_response(status: int, rejection: Rejection) -> bytes:
    body = jsonio.dumps(rejection.to_message())
    reason = {408: b"Request Timeout", 503: b"Service Unavailable"}[status]
    return b"".join(
        [
            b"HTTP/1.1 %d %s\r\n" % (status, reason),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
            body,
        ]
    )


class Taker(Protocol):
    def take(self, connection: GuardedHttpToolsProtocol, data: bytes) -> bool:
        """Hand `connection` to a sibling worker with `data`, the first bytes of
        its next request; False: it stays here."""
        ...


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """Use `protocol_class(limits)`: uvicorn builds protocols from a class."""

    limits: ClassVar[ConnectionLimits]
    events: ClassVar[RateLimitedLog]
    # This worker's balancer while it wants connections moved (app/serving/balance.py):
    # asked at the first read of a request on a connection; None otherwise.
    mover: ClassVar[Taker | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._opened_at = time.monotonic()
        self._read_timer: asyncio.TimerHandle | None = None
        # The read timeout the request being read needs if this read ends with
        # it unfinished: armed after the parser has taken the whole read, so a
        # request that comes in one read (the common call) arms no timer.
        self._pending_read: Callable[[], None] | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._link: ConnectionLink | None = None
        # A sibling's connection handed over (app/serving/handoff.py): the bytes of its
        # request that sibling read, for connection_made; None: accepted here.
        self._adopted: bytes | None = None

    # -- connection bound ----------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # Every write of the connection (answers, 100 Continue, uvicorn's own
        # 400s and closes) through the loop's coalescer, in order: a call's
        # answer goes out with the iteration's others (app/write_coalescer.py).
        writes = write_coalescer.for_loop(self.loop)
        super().connection_made(write_coalescer.CoalescedTransport(transport, writes))
        if len(self.connections) > self.limits.max_connections and not self._evict_one():
            self.events.event(
                "connection_limit_reached",
                action="refused",
                limit=self.limits.max_connections,
                setting="MCP_SHIM_MAX_CONNECTIONS",
            )
            transport.write(_raw_response(503, server_busy("too many open connections")))
            transport.close()
            return
        self._arm_read(self._headers_timed_out, self.limits.read_timeout_s)
        adopted, self._adopted = self._adopted, None
        if adopted:
            self.data_received(adopted)
        elif adopted is not None:
            self.adopted_idle()

    def _evictable(self) -> bool:
        # Not answering anything: between requests, or still receiving one
        # (headers or body, nothing answered yet); and not flushing an answer
        # to a slow reader. A flood of partial requests can then never hold
        # every slot: the oldest of them makes room for the newcomer.
        cycle = self.cycle
        receiving = (
            cycle is None
            or cycle.response_complete
            or (cycle.more_body and not cycle.response_started)
        )
        return receiving and not self.pipeline and not self.flow.write_paused

    def _evict_one(self) -> bool:
        victims = [
            conn
            for conn in self.connections
            if conn is not self
            and isinstance(conn, GuardedHttpToolsProtocol)
            and not conn.transport.is_closing()
            and conn._evictable()
        ]
        if not victims:
            return False
        oldest = min(victims, key=lambda conn: conn._opened_at)
        self.events.event(
            "connection_limit_reached",
            action="closed_oldest_unanswered",
            limit=self.limits.max_connections,
            setting="MCP_SHIM_MAX_CONNECTIONS",
        )
        oldest.transport.abort()
        return True

    # -- read timeouts -------------------------------------------------------

    def _arm_read(self, callback: Any, delay: float) -> None:
        self._cancel_read()
        self._read_timer = self.loop.call_later(delay, callback)

    def _cancel_read(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def data_received(self, data: bytes) -> None:
        mover = self.mover
        if mover is not None and self.between_requests() and mover.take(self, data):
            return  # the connection and these bytes are a sibling worker's now
        super().data_received(data)
        # The first request's clock started at connection_made; a later one's
        # at the read that began it (the keep-alive timeout covers the wait).
        pending = self._pending_read
        if pending is not None and self._read_timer is None and not self.transport.is_closing():
            self._arm_read(pending, self.limits.read_timeout_s)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._pending_read = self._headers_timed_out

    def on_headers_complete(self) -> None:
        if self._read_timer is not None:
            self._cancel_read()
        self._pending_read = self._body_timed_out
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:  # this request's cycle
            extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
            self._link = extensions[LINK] = ConnectionLink(self.flow, cycle)
        else:
            self._link = None

    def on_message_complete(self) -> None:
        self._pending_read = None
        if self._read_timer is not None:
            self._cancel_read()
        super().on_message_complete()
        if self._link is not None:
            self._link.body_complete = True
            self._link = None

    def _headers_timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        self.events.event(
            "request_read_timeout",
            phase="headers",
            timeout_s=self.limits.read_timeout_s,
            setting="MCP_SHIM_READ_TIMEOUT_S",
        )
        refusal = Rejection(
            INVALID_REQUEST,
            f"Request timeout: the request headers did not arrive within "
            f"{self.limits.read_timeout_s:g} s (MCP_SHIM_READ_TIMEOUT_S)",
            status=408,
        )
        self.transport.write(_raw_response(408, refusal))
        self.transport.close()

    def _body_timed_out(self, grace_used: bool = False) -> None:
        self._read_timer = None
        if self.transport.is_closing() or self.cycle is None or not self.cycle.more_body:
            return
        if not self.cycle.response_started and not grace_used:
            # The route reads the body under the same timeout and answers 408 itself.
            self._arm_read(lambda: self._body_timed_out(grace_used=True), _BODY_GRACE_S)
            return
        self.events.event(
            "request_read_timeout",
            phase="body",
            timeout_s=self.limits.read_timeout_s,
            setting="MCP_SHIM_READ_TIMEOUT_S",
        )
        self.transport.abort()

    # -- write back-pressure -------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(
                self.limits.write_timeout_s, self._write_timed_out
            )

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel_write()

    def _cancel_write(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_timed_out(self) -> None:
        self._write_timer = None
        if self.transport.is_closing() and self.transport.get_write_buffer_size() == 0:
            return
        self.events.event(
            "client_stalled",
            timeout_s=self.limits.write_timeout_s,
            buffered_bytes=self.transport.get_write_buffer_size(),
            setting="MCP_SHIM_WRITE_TIMEOUT_S",
        )
        # close() would wait for the buffer to flush, which is what never happens.
        self.transport.abort()

    # -- handing the connection to another worker (app/serving/handoff.py) -------------

    def detach(self, scope: Any) -> int | None:
        """A duplicate of the socket, this connection's reading paused, when the
        request of `scope` is all that is under way on it (its body read, nothing
        pipelined after it, nothing answered, nothing left to write); else None."""
        cycle = self.cycle
        if (
            cycle is None
            or cycle.scope is not scope
            or cycle.more_body
            or cycle.response_started
            or self.pipeline
            or self._pending_read is not None  # a next request has begun
            or not isinstance(self.transport, write_coalescer.CoalescedTransport)
            or self.transport.is_closing()
        ):
            return None
        return self.detach_idle()

    def movable(self, port: int, settled_before: float, sessions_anywhere: bool) -> bool:
        """Whether this connection may go to a sibling worker (app/serving/balance.py): a
        client's (accepted on the shared `port`, not a sibling's relay on this
        worker's own listener), here since before `settled_before`, open, and
        its last request pinned by no session (a legacy session's, unless any
        worker serves them; an HTTP+SSE channel's)."""
        if (
            self.server is None
            or self.server[1] != port
            or self._opened_at >= settled_before
            or self.transport.is_closing()
            or not isinstance(self.transport, write_coalescer.CoalescedTransport)
        ):
            return False
        if self.headers and not sessions_anywhere:
            if any(name == b"mcp-session-id" for name, _ in self.headers):
                return False
        url = getattr(self, "url", b"")  # set by the first request's parse
        return b"session_id=" not in url

    def between_requests(self) -> bool:
        """Nothing of a request under way: none being read, answered (its task
        finished), pipelined or left to write."""
        cycle = self.cycle
        if cycle is not None:
            if not cycle.response_complete:
                return False
            link = cycle.scope.get("extensions", {}).get(LINK)
            if isinstance(link, ConnectionLink) and link.watched:
                return False
        return not (self.pipeline or self._pending_read is not None or self.flow.write_paused)

    def detach_idle(self) -> int | None:
        """A duplicate of the socket, its reading paused, for a sibling worker;
        None when it cannot be (something is left to write)."""
        assert isinstance(self.transport, write_coalescer.CoalescedTransport)
        raw = self.transport.flush_queued()  # the previous answer's last bytes
        sock = raw.get_extra_info("socket")
        if sock is None or raw.get_write_buffer_size():
            return None
        raw.pause_reading()  # from here on the socket's bytes are the sibling's
        try:
            return os.dup(sock.fileno())
        except OSError:
            raw.resume_reading()
            return None

    def adopt(self, data: bytes) -> None:
        """Before connection_made: this is a sibling's connection handed over,
        with `data`, the bytes of its request the sibling read (empty: it came
        between requests). connection_made parses them before the socket is
        first read: the rest of that request may already be waiting there,
        and uvloop reads the socket as soon as connection_made returns, before
        the code that adopted the socket runs again. Parsed after that read,
        a request's body came before its headers: 400, a client's call lost."""
        self._adopted = data

    def adopted_idle(self) -> None:
        """A sibling's idle keep-alive connection, adopted: its next request may be
        a while coming, so it waits under the keep-alive timeout, as it did
        there, not under the read timeout of a new connection's first request."""
        self._cancel_read()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def reattach(self) -> None:
        """The handing over failed: this worker serves the connection after all."""
        self.transport.resume_reading()

    def handed_off(self) -> None:
        """The other worker has the socket: drop ours without a byte or a FIN (its
        descriptor keeps the connection open), and end this request's cycle quietly."""
        if self.cycle is not None:
            self.cycle.disconnected = True  # uvicorn then sends nor logs anything
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read()
        self._cancel_write()
        cycle = self.cycle
        super().connection_lost(exc)
        # The cycle uvicorn marks disconnected is the one whose answer a
        # receive() would end (`RequestResponseCycle.receive`).
        if cycle is not None and cycle.disconnected:
            link = cycle.scope.get("extensions", {}).get(LINK)
            if isinstance(link, ConnectionLink):
                link.connection_lost()


def connection_protocol(scope: Any) -> asyncio.BaseProtocol | None:
    """The protocol serving the connection of `scope`'s request, when it is the
    gateway's own (its ConnectionLink is in the scope)."""
    extensions = scope.get("extensions")
    link = extensions.get(LINK) if extensions else None
    if not isinstance(link, ConnectionLink):
        return None
    transport = getattr(link._flow, "_transport", None)
    return transport.get_protocol() if isinstance(transport, asyncio.BaseTransport) else None


def protocol_class(limits: ConnectionLimits) -> type[GuardedHttpToolsProtocol]:
    """A protocol class bound to these limits (uvicorn instantiates it per connection)."""
    return type(
        "GatewayHttpProtocol",
        (GuardedHttpToolsProtocol,),
        {"limits": limits, "events": RateLimitedLog()},
    )
