"""A lean HTTP/1.1 client for the hot path: a session's POSTs to its upstream.

One asyncio Protocol per connection, httptools' response parser (llhttp, the
parser uvicorn already runs for the gateway's own clients), one request at a
time per connection, a pool of idle keep-alive connections per origin and
credential. It costs a fraction of aiohttp's CPU per POST (bench/upstream_post.py).
It serves
the POSTs, the one-off requests and the GETs when it is the POSTs' stack
(app/upstream/httpclient/h1_adapter.py, its adapter to the answer interface of
app/upstream/httpclient/interface.py); long-lived streams and the modern pass-through
go to httpx over aiohttp.

This module is the pool and the answers; one connection, its parser, its
bounds and its read timer are h1_connection.py's, the exceptions h1_errors.py's.

Bounds: `max_connections` open connections (idle or busy) per client, a free
one waited for at most the pool timeout, and at most half of them for one
credential (`Origin` is per credential: below); idle connections expire after
`keepalive_s` and are dropped once the peer closed them.

One connection, one credential: every connection belongs to an `Origin`
keyed by scheme, host, port and the SHA-256 of the `Authorization` it
carries, and is reused only for that key. A byte after an answer's end (a
second response in the same write, a 204 with a body) makes the connection
unusable and it is closed, but a stray response that only arrives once the
connection carries the next request cannot be told from that request's
answer by any HTTP/1.1 client: it can then only reach a caller of the same
credential, who could see it anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque

from multidict import CIMultiDict, CIMultiDictProxy

from app.upstream.httpclient.h1_connection import H1Connection, Origin
from app.upstream.httpclient.h1_errors import (
    ConnectFailed,
    ConnectionLost,
    ConnectTimeout,
    PoolTimeout,
    StaleConnection,
)

# MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES' default: the stdio line limit's 64 MiB.
DEFAULT_MAX_ANSWER_BYTES = 64 * 1024 * 1024


class H1Answer:
    """An answer, with the part of `httpx.Response`'s interface the readers of
    an answer use (`streamable_http.Answer`): `status_code`, `headers` (a
    case-insensitive multidict, as aiohttp's: every field of a repeated
    header), `is_closed`, `aread`, `aiter_bytes`, `aclose`."""

    __slots__ = ("__weakref__", "_client", "_conn", "headers", "is_closed", "status_code")

    def __init__(self, conn: H1Connection, client: H1Client) -> None:
        self._conn: H1Connection | None = conn
        self._client = client
        self.status_code = conn.status
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict(conn.headers))
        self.is_closed = False

    async def aread(self) -> bytes | bytearray:
        conn = self._conn
        if conn is None:
            return b""
        # The body's chunks taken as they come: left in the connection, more
        # than `_HIGH_WATER` of them would pause reading before the end came.
        # Into one growing buffer (a large one grows in place, mremap), not
        # pieces joined at the end: one copy of a large body, not two.
        body: bytes | bytearray
        if conn.complete:
            body = conn.take()
        else:
            grown = bytearray()
            while not conn.complete:
                if conn.chunks:
                    grown += conn.take()
                await conn.wait()
            grown += conn.take()
            body = grown
        self._end(reusable=True)
        return body

    def aiter_bytes(self) -> _Chunks:
        return _Chunks(self)

    async def _next(self) -> bytes | None:
        conn = self._conn
        while conn is not None:
            if conn.chunks:
                return conn.take()
            if conn.complete:
                self._end(reusable=True)
                return None
            await conn.wait()
            conn = self._conn
        return None

    def _end(self, reusable: bool) -> None:
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        self.is_closed = True
        self._client.release(conn, reusable and conn.complete and conn.error is None)

    async def aclose(self) -> None:
        # An answer read to its end (or whose end already came) leaves its
        # connection to the pool; one closed early closes the connection.
        self._end(reusable=True)

    def __del__(self) -> None:
        # An answer dropped without aclose still gives its connection back.
        if self._conn is not None:
            with contextlib.suppress(Exception):  # nothing may be raised from __del__
                self._end(reusable=False)


class _Chunks:
    """The body's chunks as they arrive: an iterator object, not a generator
    (an abandoned generator would be finalized later by the event loop)."""

    __slots__ = ("_answer",)

    def __init__(self, answer: H1Answer) -> None:
        self._answer = answer

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._answer._next()
        if chunk is None:
            raise StopAsyncIteration
        return chunk


class H1Client:
    """The pool: at most `max_connections` open connections over every origin
    and credential, at most half of them (`share`) for one credential, so one
    caller's load always leaves room for the others'."""

    def __init__(
        self,
        *,
        max_connections: int,
        keepalive_s: float,
        ssl_context: ssl.SSLContext | None,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self._limit = max_connections
        self.share = max(1, max_connections // 2)
        self._keepalive_s = keepalive_s
        self._ssl = ssl_context
        self.max_answer_bytes = max_answer_bytes
        self._origins: dict[tuple[str, str, int, str], Origin] = {}
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def open_connections(self) -> int:
        return self._open

    def origin(self, scheme: str, host: str, port: int | None, credential: str = "-") -> Origin:
        """`credential`: the caller's credential hash (`pool.credential_hash`)."""
        tls = scheme == "https"
        key = (scheme, host, port or (443 if tls else 80), credential)
        found = self._origins.get(key)
        if found is None:
            ssl_context = self._ssl if tls else None
            if tls and ssl_context is None:
                ssl_context = ssl.create_default_context()
            found = Origin(key, ssl_context)
            self._origins[key] = found
        return found

    def _registered(self, origin: Origin) -> Origin:
        # An origin is forgotten when it holds no connection (`_forget`), but a
        # session's poster keeps its own: the one registered for its key counts.
        found = self._origins.get(origin.key)
        if found is None:
            self._origins[origin.key] = origin
            return origin
        return found

    def _forget(self, origin: Origin) -> None:
        """Bounds the origins to the credentials that hold connections."""
        if origin.open <= 0 and not origin.idle and not origin.waiters:
            if self._origins.get(origin.key) is origin:
                del self._origins[origin.key]

    async def request(
        self,
        origin: Origin,
        payload: bytes,
        *,
        connect_timeout: float | None,
        read_timeout: float | None,
        pool_timeout: float | None,
        fresh: bool = False,
        whole: bool = False,
    ) -> H1Answer:
        """Writes `payload` (a whole request) and returns once the answer's head
        came. `fresh`: on a new connection, closed after this exchange. `whole`:
        the answer is one message (a POST's), capped at `max_answer_bytes`."""
        conn = await self._acquire(origin, connect_timeout, pool_timeout, fresh)
        try:
            conn.start(read_timeout, whole)
            if fresh:
                conn.pooled = False
            transport = conn.transport
            if transport is None or transport.is_closing():
                lost = StaleConnection if conn.served else ConnectionLost
                raise lost("the connection closed before the request")
            # With the iteration's other requests to this upstream: it is woken
            # once for them (app/write_coalescer.py).
            conn.writes.write(transport, payload)
            while not conn.head_done:
                await conn.wait()
        except BaseException:
            self.release(conn, False)
            raise
        return H1Answer(conn, self)

    async def _acquire(
        self, origin: Origin, connect_timeout: float | None, pool_timeout: float | None, fresh: bool
    ) -> H1Connection:
        if self._closed:
            raise ConnectFailed("the client is closed")
        loop = asyncio.get_running_loop()
        deadline = None if pool_timeout is None else loop.time() + pool_timeout
        while True:
            origin = self._registered(origin)
            if not fresh:
                idle = origin.idle
                now = loop.time()
                while idle:
                    conn = idle.pop()
                    if conn.usable(now, self._keepalive_s):
                        return conn
                    self._drop(conn)
            if origin.open >= self.share:
                # This credential holds its share: it waits for one of its own.
                await self._wait_slot(loop, deadline, origin.waiters)
            elif self._open < self._limit or self._evict_one():
                break
            else:
                await self._wait_slot(loop, deadline, self._waiters)
        self._open += 1
        origin.open += 1
        try:
            return await self._connect(loop, origin, connect_timeout)
        except BaseException:
            self._open -= 1
            origin.open -= 1
            self._wake(origin)
            self._forget(origin)
            raise

    async def _connect(
        self, loop: asyncio.AbstractEventLoop, origin: Origin, connect_timeout: float | None
    ) -> H1Connection:
        limit = self.max_answer_bytes
        try:
            async with asyncio.timeout(connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: H1Connection(loop, limit),
                    origin.host,
                    origin.port,
                    ssl=origin.ssl,
                    server_hostname=origin.host if origin.ssl is not None else None,
                )
        except TimeoutError:
            raise ConnectTimeout(f"no connection within {connect_timeout} s") from None
        except OSError as exc:
            raise ConnectFailed(f"{type(exc).__name__}") from exc
        conn.origin = origin
        return conn

    async def _wait_slot(
        self,
        loop: asyncio.AbstractEventLoop,
        deadline: float | None,
        waiters: deque[asyncio.Future[None]],
    ) -> None:
        waiter: asyncio.Future[None] = loop.create_future()
        waiters.append(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
        except TimeoutError:
            raise PoolTimeout("no upstream connection came free in time") from None
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                _wake_first(waiters)  # the slot we were given goes to the next one
            raise
        finally:
            if not waiter.done():
                waiter.cancel()
            try:
                waiters.remove(waiter)
            except ValueError:
                pass

    def _wake(self, origin: Origin | None) -> None:
        """A connection came back or closed: the first waiter of its credential
        (its share or its idle connection), then the first of all (a slot)."""
        if origin is not None:
            _wake_first(origin.waiters)
        _wake_first(self._waiters)

    def _evict_one(self) -> bool:
        """At the bound: close the least recently used idle connection of any
        origin (the caller's origin had none usable, or wants a fresh one) to
        make room."""
        oldest: Origin | None = None
        for origin in self._origins.values():
            if not origin.idle:
                continue
            if oldest is None or origin.idle[0].idle_since < oldest.idle[0].idle_since:
                oldest = origin
        if oldest is None:
            return False
        self._drop(oldest.idle.pop(0))
        self._forget(oldest)
        return True

    def _drop(self, conn: H1Connection) -> None:
        conn.close()
        self._open -= 1
        if conn.origin is not None:
            conn.origin.open -= 1

    def release(self, conn: H1Connection, reusable: bool) -> None:
        """A connection back from an exchange: pooled if its answer was read to
        the end and neither side said close, else closed."""
        conn.busy = False
        conn.chunks = []
        origin = conn.origin
        if (
            reusable
            and conn.keep_alive
            and conn.pooled
            and not self._closed
            and not conn.lost
            and conn.transport is not None
            and not conn.transport.is_closing()
        ):
            conn.served += 1
            loop = conn._loop
            conn.idle_since = loop.time()
            assert origin is not None
            origin.idle.append(conn)
            if self._sweeper is None:
                self._sweeper = loop.call_later(self._keepalive_s, self._sweep)
        else:
            self._drop(conn)
        self._wake(origin)
        if origin is not None:
            self._forget(origin)

    def _sweep(self) -> None:
        """Close idle connections past the keep-alive time (oldest first in each list)."""
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        left = False
        for origin in list(self._origins.values()):
            idle = origin.idle
            expired = 0
            while expired < len(idle) and not idle[expired].usable(now, self._keepalive_s):
                expired += 1
            for conn in idle[:expired]:
                self._drop(conn)
            del idle[:expired]
            left = left or bool(idle)
            self._forget(origin)
        if left:
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(self._keepalive_s / 2, self._sweep)

    async def aclose(self) -> None:
        """Closes every pooled connection; a busy one is closed when released."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for origin in list(self._origins.values()):
            for conn in origin.idle:
                self._drop(conn)
            origin.idle.clear()
            _refuse_all(origin.waiters)
            self._forget(origin)
        _refuse_all(self._waiters)


def _wake_first(waiters: deque[asyncio.Future[None]]) -> None:
    while waiters:
        waiter = waiters.popleft()
        if not waiter.done():
            waiter.set_result(None)
            return


def _refuse_all(waiters: deque[asyncio.Future[None]]) -> None:
    while waiters:
        waiter = waiters.popleft()
        if not waiter.done():
            waiter.set_exception(ConnectFailed("the client is closed"))
