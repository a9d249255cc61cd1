"""A lean HTTP/1.1 client for the hot path: a session's POSTs to its upstream.

One asyncio Protocol per connection, httptools' response parser (llhttp, the
parser uvicorn already runs for the gateway's own clients), one request at a
time per connection, a pool of idle keep-alive connections per origin and
credential. It costs a fraction of aiohttp's CPU per POST (bench/upstream_post.py;
the figures are in bench/README.md, "A lean HTTP/1.1 client for the session
POSTs"). It serves
the POSTs, the one-off requests and the GETs when it is the POSTs' stack
(app/upstream/http/h1_adapter.py, its adapter to the answer interface of
app/upstream/http/interface.py); long-lived streams and the modern pass-through
go to httpx over aiohttp.

Bounds: `max_connections` open connections (idle or busy) per client, a free
one waited for at most the pool timeout, and at most half of them for one
credential (`Origin` is per credential: below); idle connections expire after
`keepalive_s` and are dropped once the peer closed them; a response head over
8 KiB per line or 64 KiB in all is refused (as aiohttp's parser refuses long
lines) so an upstream cannot grow the gateway's memory; a body is read at the
consumer's pace (reading pauses above `_HIGH_WATER` buffered bytes), and an
answer of a request made with `whole=True` (a POST's: one call's answer) is
refused past `max_answer_bytes` decoded bytes, a gzip or deflate body
inflated no further than that (`AnswerTooLarge`).

One connection, one credential: every connection belongs to an `Origin`
keyed by scheme, host, port and the SHA-256 of the `Authorization` it
carries, and is reused only for that key. A byte after an answer's end (a
second response in the same write, a 204 with a body) makes the connection
unusable and it is closed, but a stray response that only arrives once the
connection carries the next request cannot be told from that request's
answer by any HTTP/1.1 client: it can then only reach a caller of the same
credential, who could see it anyway.

Timeouts: the read timeout runs between reads from the request's write to the
answer's end, on one loop timer per connection re-armed lazily (a read only
stamps the time), never a task per request.

Errors are this module's own classes; `h1_adapter.upstream_error` turns them
into the gateway's, as each other adapter does its library's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import zlib
from collections import deque
from typing import Any, cast

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from app import write_coalescer

# aiohttp's parser refuses a status or header line over 8190 bytes; the whole
# head is bounded too (aiohttp bounds the number of headers instead).
MAX_LINE = 8190
MAX_HEAD = 65536
# Buffered body bytes above which the connection stops reading until the
# consumer takes them (a slow caller cannot make the gateway hold a stream).
_HIGH_WATER = 262144
# MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES' default: the stdio line limit's 64 MiB.
DEFAULT_MAX_ANSWER_BYTES = 64 * 1024 * 1024


class H1Error(Exception):
    """Any failure of an exchange on this client."""


class ConnectFailed(H1Error):
    """No connection could be made (refused, unreachable, name or TLS failure)."""


class ConnectionLost(H1Error):
    """The connection closed or broke before the answer was complete."""


class StaleConnection(ConnectionLost):
    """A reused connection closed before any byte of the answer: the server
    may have closed it idle just as the request went out (resendable POSTs)."""


class H1Timeout(H1Error):
    """One of the timeouts ran out."""


class ConnectTimeout(H1Timeout):
    pass


class PoolTimeout(H1Timeout):
    """No connection of the bounded pool came free in time."""


class ReadTimeout(H1Timeout):
    pass


class MalformedAnswer(H1Error):
    """What came is not an HTTP/1.1 answer (or its head is over the bounds)."""


class AnswerTooLarge(H1Error):
    """The answer's decoded body is over `max_answer_bytes`; its connection is closed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the upstream answer exceeded {limit} bytes")
        self.limit = limit


class _PastTheEnd(Exception):
    """Raised in the parser's callback when a second message starts on a
    connection whose answer is complete: parsing stops there."""


class _Connection(asyncio.Protocol):
    """One connection and the state of the answer it is reading. The answer
    (`H1Answer`) points here, never the other way: nothing per call makes a
    reference cycle. The parser and the protocol point at each other for the
    connection's life; `connection_lost` breaks that."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_answer_bytes: int) -> None:
        self._loop = loop
        self._max_answer = max_answer_bytes
        self.writes = write_coalescer.for_loop(loop)
        self.transport: asyncio.Transport | None = None
        self._parser: Any = httptools.HttpResponseParser(self)
        self.lost = False
        self.served = 0  # answers read to their end on it: more than 0 means reused
        self.idle_since = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._read_timeout: float | None = None
        self._last_io = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self.busy = False
        self.origin: Origin | None = None
        self.pooled = True  # False: closed after its one exchange (a resend's)
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self.head_done = False
        self.complete = False
        self.keep_alive = True
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.answered = False
        self.error: H1Error | None = None
        self._head_size = 0
        self._framed = False  # Content-Length or chunked: not read-until-close
        self._encoding = ""
        self._decoder: Any = None
        self._interim = False
        self._whole = False  # the answer's body is capped at _max_answer in all
        self.received = 0  # decoded body bytes of the answer so far

    def start(self, read_timeout: float | None, whole: bool = False) -> None:
        """A request is about to be written: a fresh answer state, the read timer.
        `whole`: the answer is one message, its body capped at `max_answer_bytes`."""
        self._reset()
        self._whole = whole
        self.busy = True
        self._read_timeout = read_timeout
        if read_timeout is not None:
            self._last_io = self._loop.time()
            if self._timer is None:
                self._timer = self._loop.call_at(self._last_io + read_timeout, self._on_timer)

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, same interface.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if not self.busy or self.complete:
            # Bytes nobody asked for: the peer is not speaking HTTP/1.1 with us.
            self._fail(MalformedAnswer("bytes after the answer"))
            return
        self.answered = True
        if self._read_timeout is not None:
            self._last_io = self._loop.time()
        if not self.head_done:
            self._head_size += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            self._callback_failed(exc)
            return
        except httptools.HttpParserUpgrade:
            self._fail(MalformedAnswer("an upgrade was not asked for"))
            return
        except httptools.HttpParserError as exc:
            self._fail(MalformedAnswer(str(exc)[:200]))
            return
        if not self.head_done and self._head_size > MAX_HEAD:
            self._fail(MalformedAnswer(f"answer head over {MAX_HEAD} bytes"))

    def _callback_failed(self, exc: httptools.HttpParserCallbackError) -> None:
        cause = exc.__context__
        if isinstance(cause, _PastTheEnd):
            # Bytes of another response after this one's end: the answer is
            # whole and stays its caller's, the connection is closed (release).
            self.keep_alive = False
            self.close()
        elif isinstance(cause, H1Error):
            self._fail(cause)
        else:
            self._fail(MalformedAnswer(str(exc)[:200]))

    def eof_received(self) -> bool:
        return False  # close: connection_lost ends a read-until-close body

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.busy and not self.complete and self.error is None:
            if self.head_done and not self._framed:
                self.keep_alive = False
                try:
                    self._finish_body()  # the body was "until the connection closes"
                except AnswerTooLarge as too_large:
                    self.error = too_large
            elif not self.answered and self.served:
                self.error = StaleConnection("the reused connection closed before any answer")
            else:
                self.error = ConnectionLost("the connection closed before the answer's end")
        self._parser = None  # the protocol <-> parser cycle
        self.transport = None
        self._wake()

    # httptools callbacks

    def on_message_begin(self) -> None:
        if self.complete:
            raise _PastTheEnd

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) + len(value) > MAX_LINE:
            raise MalformedAnswer(f"a header line over {MAX_LINE} bytes")
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        lower = key.lower()
        if lower == "content-length" or lower == "transfer-encoding":
            self._framed = True
        elif lower == "content-encoding":
            self._encoding = text.strip().lower()
        self.headers.append((key, text))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:
            # An interim answer (100 Continue, 103 Early Hints): the real one follows.
            self._interim = True
            self.headers = []
            self._framed = False
            self._encoding = ""
            return
        self.status = status
        if status == 204 or status == 304:
            self._framed = True
            # No body may follow (RFC 9110 sections 15.3.5 and 15.4.5); one that
            # announces a length or chunks may still send it, after this
            # answer's end: the connection is not reused. The gateway never
            # sends a conditional request, so a 304 is never an answer it
            # asked for either.
            if status == 304 or self._announces_body():
                self.keep_alive = False
        if self._encoding in ("gzip", "x-gzip", "deflate"):
            # The gateway offers gzip and deflate (httpx's Accept-Encoding, kept
            # so an upstream far away may compress big answers): decoded here,
            # as aiohttp and httpx did. 32 + MAX_WBITS reads a gzip or zlib header.
            self._decoder = zlib.decompressobj(32 + zlib.MAX_WBITS)
        self.head_done = True
        self._wake()

    def _announces_body(self) -> bool:
        for name, value in self.headers:
            lower = name.lower()
            if lower == "transfer-encoding" or (lower == "content-length" and value.strip() != "0"):
                return True
        return False

    def on_body(self, body: bytes) -> None:
        limit = self._max_answer
        if self._whole:
            limit -= self.received
        if self._decoder is not None:
            # Inflated no further than the cap allows (a small gzip body can
            # inflate a thousandfold): input left over means it is over.
            decoder = self._decoder
            body = decoder.decompress(body, limit + 1)  # zlib.error: a malformed answer
            if decoder.unconsumed_tail:
                raise AnswerTooLarge(self._max_answer)
            if not body:
                return
        if len(body) > limit:
            raise AnswerTooLarge(self._max_answer)
        self.received += len(body)
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            self._head_size = 0
            return
        self.keep_alive = self.keep_alive and bool(self._parser.should_keep_alive())
        self._finish_body()

    # the consumer's side

    def _finish_body(self) -> None:
        if self._decoder is not None:
            decoder = self._decoder
            self._decoder = None
            # on_body left no input behind (unconsumed_tail): only what zlib holds.
            rest = decoder.flush()
            if len(rest) > (self._max_answer - self.received if self._whole else self._max_answer):
                raise AnswerTooLarge(self._max_answer)
            if rest:
                self.received += len(rest)
                self.chunks.append(rest)
        self.complete = True
        self._wake()

    def take(self) -> bytes:
        """The body bytes that came since the last call."""
        chunks = self.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.chunks = []
        self.buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def wait(self) -> None:
        """Until something arrives (head, body bytes, the end, an error)."""
        if self.error is not None:
            raise self.error
        waiter = self._loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None
        if self.error is not None:
            raise self.error

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: H1Error) -> None:
        if self.error is None and not self.complete:
            self.error = error
        self.close()
        self._wake()

    def _on_timer(self) -> None:
        self._timer = None
        timeout = self._read_timeout
        if not self.busy or self.complete or timeout is None or self.lost:
            return
        now = self._loop.time()
        due = self._last_io + timeout
        if self._paused:
            due = now + timeout  # the consumer is behind, not the upstream
        if due > now:
            self._timer = self._loop.call_at(due, self._on_timer)
            return
        self._fail(ReadTimeout(f"no data for {timeout} s"))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.close()

    def usable(self, now: float, keepalive_s: float) -> bool:
        transport = self.transport
        return (
            not self.lost
            and transport is not None
            and not transport.is_closing()
            and now - self.idle_since < keepalive_s
        )


class Origin:
    """Where connections go (scheme, host, port) for one credential (`key`'s
    last member, the SHA-256 of the `Authorization` the requests carry, "-"
    without one): its idle connections, most recently used last, how many are
    open, and the requests waiting because that credential holds its share."""

    __slots__ = ("host", "idle", "key", "open", "port", "ssl", "waiters")

    def __init__(self, key: tuple[str, str, int, str], ssl_context: ssl.SSLContext | None) -> None:
        self.key = key
        self.host = key[1]
        self.port = key[2]
        self.ssl = ssl_context
        self.idle: list[_Connection] = []
        self.open = 0
        self.waiters: deque[asyncio.Future[None]] = deque()


class H1Answer:
    """An answer, with the part of `httpx.Response`'s interface the readers of
    an answer use (`streamable_http.Answer`): `status_code`, `headers` (a
    case-insensitive multidict, as aiohttp's: every field of a repeated
    header), `is_closed`, `aread`, `aiter_bytes`, `aclose`."""

    __slots__ = ("__weakref__", "_client", "_conn", "headers", "is_closed", "status_code")

    def __init__(self, conn: _Connection, client: H1Client) -> None:
        self._conn: _Connection | None = conn
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
    ) -> _Connection:
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
    ) -> _Connection:
        limit = self.max_answer_bytes
        try:
            async with asyncio.timeout(connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop, limit),
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
        origin (the caller's origin had none) to make room."""
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

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        self._open -= 1
        if conn.origin is not None:
            conn.origin.open -= 1

    def release(self, conn: _Connection, reusable: bool) -> None:
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
