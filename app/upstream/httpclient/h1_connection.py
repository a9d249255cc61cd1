"""One connection of the gateway's own HTTP/1.1 client (h1.py): an asyncio
Protocol with httptools' response parser (llhttp, the parser uvicorn already
runs for the gateway's own clients), one request at a time, and where it goes
(`Origin`: scheme, host, port and credential).

Bounds: a header line over 8 KiB, or a response head still without its end
after 64 KiB received, is refused (as aiohttp's parser refuses long lines) so
an upstream cannot grow the gateway's memory; a body is read at the
consumer's pace (reading pauses above `_HIGH_WATER` buffered bytes), and an
answer of a request made with `whole=True` (a POST's: one call's answer) is
refused past `max_answer_bytes` decoded bytes, a gzip or deflate body
inflated no further than that (`AnswerTooLarge`).

Timeouts: the read timeout runs between reads from the request's write to the
answer's end, on one loop timer per connection re-armed lazily (a read only
stamps the time), never a task per request.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections import deque
from typing import Any, cast

import httptools

from app import write_coalescer
from app.upstream.httpclient.h1_errors import (
    AnswerTooLarge,
    ConnectionLost,
    H1Error,
    MalformedAnswer,
    ReadTimeout,
    StaleConnection,
)

# aiohttp's parser refuses a status or header line over 8190 bytes; the whole
# head is bounded too (aiohttp bounds the number of headers instead).
MAX_LINE = 8190
MAX_HEAD = 65536
# Buffered body bytes above which the connection stops reading until the
# consumer takes them (a slow caller cannot make the gateway hold a stream).
_HIGH_WATER = 262144


class _PastTheEnd(Exception):
    """Raised in the parser's callback when a second message starts on a
    connection whose answer is complete: parsing stops there."""


class H1Connection(asyncio.Protocol):
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
        self.idle: list[H1Connection] = []
        self.open = 0
        self.waiters: deque[asyncio.Future[None]] = deque()
