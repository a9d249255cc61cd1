"""An incremental decoder of `text/event-stream` bytes: pure, no I/O.

WHATWG HTML, "Server-sent events", section 9.2.6 "Interpreting an event
stream": lines end with CRLF, LF or CR; one leading U+FEFF (BOM) is dropped;
a line starting with a colon is a comment; a line without a colon is a field
with an empty value; one space after the colon is dropped; `data` lines are
joined with LF; an `id` containing NUL is ignored; `retry` is only ASCII
digits; an empty line dispatches the event, and an event whose data buffer is
empty is not dispatched (its `id` still becomes the last event ID); at the end
of the stream an unfinished event is discarded.

Bytes are split into lines before decoding (the line ends are ASCII, so a
UTF-8 sequence is never cut), and a line is decoded as UTF-8 with invalid
sequences replaced, as the standard's "UTF-8 decode" does.

Fed chunk by chunk as they arrive (`feed`), it holds what it has seen of an
unfinished line and event, at most `max_event_bytes` of them (`EventTooLarge`
beyond: an upstream cannot grow the gateway's memory with one endless event);
one decoder reads one stream.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import NamedTuple

_BOM = b"\xef\xbb\xbf"


class EventTooLarge(ValueError):
    """An unfinished event (its data and the line being read) over the bound."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"an event of the stream exceeded {limit} bytes")
        self.limit = limit


class Event(NamedTuple):
    """One dispatched event. `id` is the last event ID as of this event (the
    stream's, not only this event's own field): what a reconnect would send."""

    event: str
    data: str
    id: str = ""


class LongEvent(Event):
    """An event of a decoder made with `long_data` whose data is one long line:
    its bytes undecoded in `raw` (`data` is empty), one copy of a large answer
    where joining, splitting and decoding made four."""

    raw: bytearray


# A line this long, of a decoder made with `long_data`, grows in one buffer
# (in place, mremap), not in pieces joined, split and decoded at its end
# (bench/answers.py measures the peak RSS of a large answer on SSE).
LONG_LINE = 256 * 1024


class SSEDecoder:
    __slots__ = (
        "_data",
        "_data_size",
        "_event",
        "_id",
        "_long",
        "_long_ok",
        "_max",
        "_partial",
        "_partial_size",
        "_skip_lf",
        "_start",
        "last_event_id",
        "retry",
    )

    def __init__(self, max_event_bytes: int | None = None, *, long_data: bool = False) -> None:
        self._max = max_event_bytes
        self._long_ok = long_data
        # A long line being read (`long_data`): its bytes so far, in one buffer.
        self._long: bytearray | None = None
        self._data_size = 0  # bytes of the data lines buffered for the event
        # An unfinished line (or the first bytes, for the BOM), in the pieces it
        # came in: a long line is joined once, when it ends, not at every chunk.
        self._partial: list[bytes] = []
        self._partial_size = 0
        self._skip_lf = False  # the previous chunk ended with CR: a leading LF is its CRLF
        self._start = True  # nothing of the stream seen yet: a BOM may come
        self._data: list[str | bytearray] = []
        self._event = ""
        self._id = ""  # the last event ID buffer
        # The reconnection time the stream asked for (`retry`, milliseconds).
        self.retry: int | None = None
        # The last event ID string: set at each dispatch (an empty line), even of
        # an event with no data (2025-11-25 servers prime a stream so).
        self.last_event_id = ""

    def feed(self, chunk: bytes) -> list[Event]:
        """The events `chunk` completes, in order."""
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if self._long is not None:
            return self._feed_long(chunk)
        if self._partial:
            self._partial.append(chunk)
            self._partial_size += len(chunk)
            if self._long_ok and not self._start and self._partial_size >= LONG_LINE:
                # A long line from here on, whether or not this chunk ends it.
                self._partial.pop()
                self._partial_size -= len(chunk)
                self._long = bytearray()
                for piece in self._partial:
                    self._long += piece
                self._partial = []
                return self._feed_long(chunk)
            if not self._start and b"\n" not in chunk and b"\r" not in chunk:
                self._check_size()  # the line goes on
                return []
            chunk = b"".join(self._partial)
            self._partial = []
            self._partial_size = 0
        if self._start:
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
                self._partial = [chunk]  # maybe a BOM cut across chunks
                self._partial_size = len(chunk)
                return []
            self._start = False
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
        if not chunk:
            return []
        lines = chunk.splitlines()
        last = chunk[-1]
        if last == 0x0D:  # CR: the line is over, and an LF may follow in the next chunk
            self._skip_lf = True
        elif last != 0x0A:
            rest = lines.pop()
            self._partial = [rest]
            self._partial_size = len(rest)
        events: list[Event] = []
        for line in lines:
            if not line:
                event = self._dispatch()
                if event is not None:
                    events.append(event)
            elif line[0] != 0x3A:  # ':' starts a comment
                self._field(line)
        self._check_size()
        return events

    def _feed_long(self, chunk: bytes) -> list[Event]:
        """A chunk of a long line: appended up to the line's end, if it has one."""
        assert self._long is not None
        ends = [at for at in (chunk.find(b"\n"), chunk.find(b"\r")) if at != -1]
        if not ends:
            self._long += chunk
            self._partial_size += len(chunk)
            self._check_size()
            return []
        cut = min(ends)
        self._long += chunk[:cut]
        self._partial_size += cut
        self._check_size()
        line, self._long = self._long, None
        self._partial_size = 0
        self._long_field(line)
        rest = chunk[cut:]
        if rest.startswith(b"\r\n"):
            rest = rest[2:]
        elif rest == b"\r":
            self._skip_lf = True
            return []
        else:
            rest = rest[1:]
        return self.feed(rest)

    def _long_field(self, line: bytearray) -> None:
        """A long line: a data line's value kept as bytes (the rest as any line)."""
        if line.startswith(b":"):
            return
        if not line.startswith(b"data:"):
            self._field(bytes(line))
            return
        # In place: a bytearray drops its first bytes without moving the rest.
        del line[: 6 if line[5:6] == b" " else 5]
        self._data.append(line)
        self._data_size += len(line)

    def _check_size(self) -> None:
        if self._max is not None and self._partial_size + self._data_size > self._max:
            raise EventTooLarge(self._max)

    def _field(self, line: bytes) -> None:
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
            self._data_size += len(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._id = value.decode("utf-8", "replace")
        elif name == b"retry":
            if value and value.isdigit():  # bytes.isdigit: ASCII digits only
                self.retry = int(value)

    def _dispatch(self) -> Event | None:
        self.last_event_id = self._id
        data = self._data
        event = self._event
        self._event = ""
        if not data:
            return None
        self._data = []
        self._data_size = 0
        if len(data) == 1 and isinstance(data[0], bytearray):
            long = LongEvent(event or "message", "", self._id)
            long.raw = data[0]
            return long
        text = [d if isinstance(d, str) else str(d, "utf-8", "replace") for d in data]
        return Event(event or "message", "\n".join(text), self._id)


async def events(
    chunks: AsyncIterator[bytes], max_event_bytes: int | None = None
) -> AsyncGenerator[Event, None]:
    """The events of a stream's chunks, as they complete. The chunks' iterator
    is closed with this one (an httpx body generator left open would be
    finalized later by the event loop, keeping its response alive till then)."""
    decoder = SSEDecoder(max_event_bytes)
    try:
        async for chunk in chunks:
            for event in decoder.feed(chunk):
                yield event
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
