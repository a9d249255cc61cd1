"""app/upstream/httpclient/sse_decoder.py against golden streams.

The rules are WHATWG HTML's "Interpreting an event stream" (9.2.6): "Lines
must be separated by either a U+000D CARRIAGE RETURN U+000A LINE FEED (CRLF)
character pair, a single U+000A LINE FEED (LF) character, or a single U+000D
CARRIAGE RETURN (CR) character"; the stream is decoded with "UTF-8 decode",
which drops one leading BOM and replaces invalid sequences; "If the line
starts with a U+003A COLON character (:) Ignore the line"; "If the line
contains a U+003A COLON character ... If value starts with a U+0020 SPACE
character, remove it from value"; "Otherwise, the string is not empty but does
not contain a U+003A COLON character ... using the whole line as the field
name, and the empty string as the field value"; `id`: "If the field value
does not contain U+0000 NULL, then set the last event ID buffer to the field
value. Otherwise, ignore the field"; `retry`: "If the field value consists of
only ASCII digits ... Otherwise, ignore the field"; dispatch: "If the data
buffer is an empty string, set the data buffer and the event type buffer to
the empty string and return" (after the last event ID is set), "If the data
buffer's last character is a U+000A LINE FEED (LF) character, then remove the
last character", the type is "message" unless the event type buffer says
otherwise; "Once the end of the file is reached, any pending data must be
discarded."
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.upstream.httpclient import sse_decoder
from app.upstream.httpclient.sse_decoder import Event, SSEDecoder

M = "message"

# (stream, events as (type, data, id), last event ID at the end)
GOLDEN: list[tuple[bytes, list[tuple[str, str, str]], str]] = [
    (b"data: hello\n\n", [(M, "hello", "")], ""),
    (b"event: ping\r\ndata: a\r\n\r\n", [("ping", "a", "")], ""),
    (b"data: a\rdata: b\r\r", [(M, "a\nb", "")], ""),
    (b"data: a\r\ndata: b\rdata: c\n\n", [(M, "a\nb\nc", "")], ""),
    (b"data: a\ndata:\ndata:  b\n\n", [(M, "a\n\n b", "")], ""),
    (b"data:x\n\n", [(M, "x", "")], ""),
    (b"data: a:b: c\n\n", [(M, "a:b: c", "")], ""),
    # comments, alone and before an event
    (b": keep-alive\n\n", [], ""),
    (b":\ndata: x\n: more\n\n", [(M, "x", "")], ""),
    # a field with no colon: the whole line is the name, the value is empty
    (b"data\n\n", [(M, "", "")], ""),
    (b"data\ndata\n\n", [(M, "\n", "")], ""),
    (b"event\ndata: x\n\n", [(M, "x", "")], ""),
    # unknown fields are ignored
    (b"foo: bar\nDATA: no\ndata: x\n\n", [(M, "x", "")], ""),
    # id: kept for the next events, a NUL makes it ignored, empty resets it
    (b"id: 7\ndata: x\n\ndata: y\n\n", [(M, "x", "7"), (M, "y", "7")], "7"),
    (b"id: 1\n\nid: a\x00b\ndata: x\n\n", [(M, "x", "1")], "1"),
    (b"id: 1\ndata: x\n\nid\ndata: y\n\n", [(M, "x", "1"), (M, "y", "")], ""),
    # an event with an id and no data is not dispatched, its id is the last one
    (b"id: 42\n\n", [], "42"),
    (b"id: 42\ndata:\n\n", [(M, "", "42")], "42"),
    # an id is the last event ID only once its event is dispatched
    (b"data: x\n\nid: 9\ndata: y\n", [(M, "x", "")], ""),
    # the event type is per event
    (b"event: e\ndata: 1\n\ndata: 2\n\n", [("e", "1", ""), (M, "2", "")], ""),
    (b"event: e\n\ndata: 2\n\n", [(M, "2", "")], ""),
    (b"event: endpoint\ndata: /messages?s=1\n\n", [("endpoint", "/messages?s=1", "")], ""),
    # one leading BOM is dropped, a second one is part of the field name
    (b"\xef\xbb\xbfdata: x\n\n", [(M, "x", "")], ""),
    (b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n", [], ""),
    (b"data: \xef\xbb\xbfx\n\n", [(M, "\ufeffx", "")], ""),
    # invalid UTF-8 is replaced, valid UTF-8 kept
    (b"data: \xff\xc3\xa9\n\n", [(M, "\ufffd\u00e9", "")], ""),
    # the end of the stream discards an unfinished event and an unfinished line
    (b"data: x\n", [], ""),
    (b"data: x\n\ndata: y", [(M, "x", "")], ""),
    (b"", [], ""),
    # CR then CRLF is two line ends (an empty line), not one
    (b"data: a\r\r\n", [(M, "a", "")], ""),
    (b"data: a\n\r\n\r\r\n", [(M, "a", "")], ""),
]


def _decode(chunks: list[bytes]) -> tuple[list[Event], str, SSEDecoder]:
    decoder = SSEDecoder()
    events: list[Event] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events, decoder.last_event_id, decoder


@pytest.mark.parametrize(("stream", "expected", "last_id"), GOLDEN)
def test_golden_whole(stream: bytes, expected: list[tuple[str, str, str]], last_id: str) -> None:
    events, last, _ = _decode([stream])
    assert [tuple(e) for e in events] == expected
    assert last == last_id


@pytest.mark.parametrize(("stream", "expected", "last_id"), GOLDEN)
def test_golden_split_at_every_offset(
    stream: bytes, expected: list[tuple[str, str, str]], last_id: str
) -> None:
    for cut in range(len(stream) + 1):
        events, last, _ = _decode([stream[:cut], stream[cut:]])
        assert [tuple(e) for e in events] == expected, cut
        assert last == last_id, cut
    for first in range(len(stream) + 1):
        for second in range(first, len(stream) + 1):
            parts = [stream[:first], stream[first:second], stream[second:]]
            events, last, _ = _decode(parts)
            assert [tuple(e) for e in events] == expected, (first, second)


@pytest.mark.parametrize(("stream", "expected", "last_id"), GOLDEN)
def test_golden_byte_by_byte(
    stream: bytes, expected: list[tuple[str, str, str]], last_id: str
) -> None:
    events, last, _ = _decode([stream[i : i + 1] for i in range(len(stream))])
    assert [tuple(e) for e in events] == expected
    assert last == last_id


@pytest.mark.parametrize(
    ("stream", "retry"),
    [
        (b"retry: 3000\n\n", 3000),
        (b"retry:0\n\n", 0),
        (b"retry: 30x\n\n", None),
        (b"retry: -1\n\n", None),
        (b"retry: +5\n\n", None),
        (b"retry:  5\n\n", None),
        (b"retry\n\n", None),
        (b"retry: \xd9\xa1\n\n", None),  # ARABIC-INDIC DIGIT ONE: not an ASCII digit
        (b"retry: 10\n\nretry: x\n\n", 10),
    ],
)
def test_retry_is_only_ascii_digits(stream: bytes, retry: int | None) -> None:
    _, _, decoder = _decode([stream])
    assert decoder.retry == retry


def test_events_arrive_when_their_empty_line_does() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 1\ndata: {}\n") == []
    assert decoder.last_event_id == ""
    assert decoder.feed(b"\n") == [Event(M, "{}", "1")]
    assert decoder.last_event_id == "1"


async def test_events_of_chunks_and_the_chunks_closed_with_them() -> None:
    closed: list[bool] = []

    async def chunks() -> AsyncIterator[bytes]:
        try:
            yield b"data: one\n\nda"
            yield b"ta: two\n\n"
            yield b"data: never read\n\n"
        finally:
            closed.append(True)

    stream = sse_decoder.events(chunks())
    assert [e.data async for e in _first(stream, 2)] == ["one", "two"]
    await stream.aclose()
    assert closed == [True]  # stopped early: the chunks' generator is closed too


async def _first(stream: AsyncIterator[Event], n: int) -> AsyncIterator[Event]:
    for _ in range(n):
        yield await anext(stream)


# -- long data lines kept as bytes (long_data) -------------------------------------

_LONG = b"x" * (sse_decoder.LONG_LINE + 100)
LONG_STREAMS = [
    b"event: message\r\ndata: " + _LONG + b"\r\n\r\n",
    b"id: 7\ndata:" + _LONG + b"\n\ndata: small\n\n",
    b"data: " + _LONG + b"\ndata: second line\n\n",  # two data lines: joined, decoded
    b": comment " + _LONG + b"\rdata: after\r\r",
    b"data: " + _LONG + b"\xff\xfe\n\n",  # not UTF-8: decoded with replacement
    b"event: " + _LONG[:300_000] + b"\ndata: d\n\n",
]


def _decoded(events: list[Event]) -> list[tuple[str, str, str]]:
    out = []
    for event in events:
        if isinstance(event, sse_decoder.LongEvent):
            out.append((event.event, str(event.raw, "utf-8", "replace"), event.id))
        else:
            out.append((event.event, event.data, event.id))
    return out


@pytest.mark.parametrize("stream", LONG_STREAMS, ids=range(len(LONG_STREAMS)))
@pytest.mark.parametrize("piece", [1000, 65536, 200_000, 300_000, 10**7])
def test_long_lines_kept_as_bytes_mean_what_the_decoded_ones_mean(
    stream: bytes, piece: int
) -> None:
    plain, long = SSEDecoder(), SSEDecoder(long_data=True)
    expected: list[Event] = []
    got: list[Event] = []
    for at in range(0, len(stream), piece):
        expected += plain.feed(stream[at : at + piece])
        got += long.feed(stream[at : at + piece])
    assert _decoded(got) == _decoded(expected)
    assert long.last_event_id == plain.last_event_id
    # A data line that came in pieces past LONG_LINE is handed over as bytes.
    if piece < len(stream) and stream.startswith((b"event: message", b"id: 7")):
        assert isinstance(got[0], sse_decoder.LongEvent)


def test_a_long_line_counts_against_the_event_bound() -> None:
    decoder = SSEDecoder(sse_decoder.LONG_LINE * 2, long_data=True)
    with pytest.raises(sse_decoder.EventTooLarge):
        for at in range(0, 3 * sse_decoder.LONG_LINE, 65536):
            decoder.feed(b"data: " + b"x" * 65536 if at == 0 else b"x" * 65536)
