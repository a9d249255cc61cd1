"""A large upstream answer parsed without its large strings, and written back
around them: the answer's bytes are held once, not three or four times.

The translators change a result near its top (`resultType` added, `_meta`
members, a content block dropped); none of them reads the text of a large
string (a file, an image's base64). So a body of at least `MIN_BODY` bytes is
parsed as its *skeleton*: the same JSON text with every string value of at
least `MIN_STRING` bytes replaced by a short marker (`Spliced`, a `str` whose
value names the string and which holds the answer's bytes of it). The
skeleton is small; it is parsed by orjson, translated like any message, and
serialised by orjson; the markers in that output are then replaced by the
original strings' bytes, which are valid JSON as they came (the checks below
are the parser's). The answer writer sends the pieces as they are
(`dumps_chunks`, memoryviews of the upstream's bytes); `dumps` joins them for
every other use (a task's stored result, a relay), so a marker never leaves
the process.

What the skeleton cannot take is parsed whole, as before: a string that could
not be checked here (an escaped surrogate, invalid JSON: the parser says why),
a body of too many strings (the walk is in Python), one with no large string.

The answer's bytes stay alive as long as a `Spliced` of them does; the bytes
of answers in flight are bounded across callers by `AnswerRoom`
(MCP_SHIM_MAX_ANSWER_BYTES_IN_FLIGHT), released when those bytes are freed.
bench/answers.py measures the peak RSS and CPU per MB this gives.
"""

from __future__ import annotations

import asyncio
import codecs
import re
import secrets
import weakref
from collections.abc import Iterator
from typing import Any

import orjson

# Bodies below this are parsed whole: the walk would cost more than the copies.
MIN_BODY = 1024 * 1024
# String values at least this long (their JSON bytes) stay in the answer's bytes.
MIN_STRING = 64 * 1024
# The walk visits every string of the body in Python: past this many, the
# body is parsed whole (a list of many small items gains nothing from it).
MAX_STRINGS = 20_000

# A marker's value: NUL (escaped by every JSON writer, never in a key the
# translators look for), a per-process nonce an upstream cannot guess, an index.
_NONCE = secrets.token_hex(12)
_MARK = "\x00mcp-shim-splice:" + _NONCE + ":"
# The marker as orjson writes it (NUL as \u0000), up to its index.
_MARK_JSON = b'"\\u0000mcp-shim-splice:' + _NONCE.encode() + b":"

# One JSON string, checked as the parser would check it (no raw control
# character, only the escapes JSON has), its bytes otherwise taken as they
# are (UTF-8 is checked apart, for the large ones only). Possessive: a string
# is matched in one pass, and one that fails, fails at once.
_STRING = re.compile(
    rb'"[^"\\\x00-\x1f]*+(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*+)*+"'
)
_QUOTE_OR_END = re.compile(rb'[^"]*+"')
_SPACE_COLON = re.compile(rb"[ \t\n\r]*+:")
# A \uD800..\uDFFF escape: orjson refuses an unpaired one; such a string is
# left to the parser.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_UTF8_PIECE = 1024 * 1024

Buffer = bytes | bytearray | memoryview


class Spliced(str):
    """A large string of an answer, still in the answer's bytes: its `str`
    value is the marker, `raw` the string's JSON bytes, quotes included."""

    raw: memoryview
    holder: _Held

    def __repr__(self) -> str:
        return f"<Spliced {len(self.raw)} bytes>"


class _Held:
    """The answer's bytes, alive while one of its `Spliced` strings is: the
    room they take in `AnswerRoom` is given back when this is freed."""

    __slots__ = ("__weakref__", "data")

    def __init__(self, data: Buffer) -> None:
        self.data = data


def loads(body: Buffer, *, min_body: int = MIN_BODY, min_string: int = MIN_STRING) -> Any:
    """`orjson.loads(body)`, with a large body's large strings left in it
    (`Spliced`). Raises orjson.JSONDecodeError where orjson.loads would."""
    if len(body) < min_body:
        return orjson.loads(body)
    found = _large_strings(body, min_string)
    if not found:
        return orjson.loads(body)
    held = _Held(body)
    view = memoryview(body)
    pieces: list[Buffer] = []
    start = 0
    for index, (begin, end) in enumerate(found):
        pieces.append(view[start:begin])
        pieces.append(b'"' + _MARK_JSON[1:] + str(index).encode() + b'"')
        start = end
    pieces.append(view[start:])
    skeleton = orjson.loads(b"".join(pieces))
    spans = [view[begin:end] for begin, end in found]
    return _with_spliced(skeleton, spans, held)


def hold(value: Any, release: Any) -> bool:
    """Call `release()` once the answer's bytes behind `value` are freed;
    False (nothing held, `release` not called): `value` holds no `Spliced`."""
    for item in _spliced_in(value):
        weakref.finalize(item.holder, release)
        return True
    return False


def _large_strings(body: Buffer, min_string: int) -> list[tuple[int, int]]:
    """The spans (quotes included) of the string values of at least
    `min_string` bytes that the parser would take; [] when the body is left
    to the parser whole."""
    found: list[tuple[int, int]] = []
    pos, seen, size = 0, 0, len(body)
    while pos < size:
        quote = _QUOTE_OR_END.match(body, pos)
        if quote is None:
            break
        begin = quote.end() - 1
        string = _STRING.match(body, begin)
        seen += 1
        if string is None or seen > MAX_STRINGS:
            # Not a string the parser takes: it says why, on the whole body.
            return []
        end = string.end()
        if end - begin >= min_string and not _SPACE_COLON.match(body, end):
            if not _checked(body, begin + 1, end - 1):
                return []
            found.append((begin, end))
        pos = end
    return found


def _checked(body: Buffer, begin: int, end: int) -> bool:
    """The string's bytes are UTF-8 and hold no escaped surrogate (left to the
    parser, which knows the pairs); checked a piece at a time, never whole."""
    view = memoryview(body)[begin:end]
    if _SURROGATE.search(view):
        return False
    decode = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        for at in range(0, len(view), _UTF8_PIECE):
            piece = view[at : at + _UTF8_PIECE].tobytes()
            # ASCII (most large strings: base64, text) is UTF-8: no decoding.
            if not (piece.isascii() and decode.getstate()[0] == b""):
                decode.decode(piece)
        decode.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _with_spliced(skeleton: Any, spans: list[memoryview], held: _Held) -> Any:
    """The skeleton with its markers made `Spliced` (in place: it is ours)."""
    cut = len(_MARK)

    def spliced(value: Any) -> Any:
        if isinstance(value, str) and value.startswith(_MARK):
            item = Spliced(value)
            item.raw = spans[int(value[cut:])]
            item.holder = held
            return item
        return value

    if isinstance(skeleton, str):
        return spliced(skeleton)
    stack = [skeleton]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, dict | list):
                    stack.append(value)
                elif isinstance(value, str):
                    node[key] = spliced(value)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                if isinstance(value, dict | list):
                    stack.append(value)
                elif isinstance(value, str):
                    node[i] = spliced(value)
    return skeleton


def _spliced_in(value: Any) -> Iterator[Spliced]:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, Spliced):
            yield node
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def dumps_chunks(value: Any) -> list[Buffer]:
    """`value` as JSON, in pieces: the large strings as the upstream's own
    bytes (memoryviews, no copy), orjson's output around them."""
    out = orjson.dumps(value)
    if _MARK_JSON not in out:
        return [out]
    raws = {item.encode("utf-8"): item.raw for item in _spliced_in(value)}
    view = memoryview(out)
    chunks: list[Buffer] = []
    start = 0
    prefix = len(_MARK_JSON)
    while (at := out.find(_MARK_JSON, start)) != -1:
        close = out.index(b'"', at + prefix)
        index = out[at + prefix : close]
        raw = raws.get(_MARK.encode() + index)
        if raw is None:
            # Not one of ours (cannot be: the nonce is this process's).
            continue_at = close + 1
            chunks.append(view[start:continue_at])
            start = continue_at
            continue
        if at > start:
            chunks.append(view[start:at])
        chunks.append(raw)
        start = close + 1
    if start < len(out):
        chunks.append(view[start:])
    return chunks


def dumps(value: Any) -> bytes:
    """`value` as one JSON text, large strings included."""
    chunks = dumps_chunks(value)
    return chunks[0] if len(chunks) == 1 and isinstance(chunks[0], bytes) else b"".join(chunks)


# -- the bytes of answers in flight -----------------------------------------------


class AnswerRoom:
    """The bytes of large answers in flight, across all callers, at most
    `limit`: an answer waits for room (at most `wait_s`), and one larger than
    `limit` is let in alone (nothing else in flight), never refused for its
    size (MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES bounds that)."""

    def __init__(self, limit: int, wait_s: float = 5.0) -> None:
        self.limit = limit
        self.wait_s = wait_s
        self.in_flight = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def _fits(self, size: int) -> bool:
        return self.in_flight == 0 or self.in_flight + size <= self.limit

    async def take(self, size: int) -> bool:
        """Room for `size` bytes; False if none came within `wait_s`."""
        if not self._waiters and self._fits(size):
            self.in_flight += size
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(self.wait_s):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                # Let in as the wait ended: the room goes to the next one.
                self.give(size)
            if isinstance(exc, TimeoutError):
                return False
            raise
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)
        return True

    def refusal(self, size: int) -> str:
        return (
            f"no room for a {size}-byte upstream answer: {self.in_flight} bytes of answers "
            f"are in flight (MCP_SHIM_MAX_ANSWER_BYTES_IN_FLIGHT={self.limit})"
        )

    def give(self, size: int) -> None:
        self.in_flight -= size
        # First come, first served: the head waits until it fits.
        while self._waiters:
            size_next, waiter = self._waiters[0]
            if waiter.done():
                self._waiters.pop(0)
                continue
            if not self._fits(size_next):
                break
            self._waiters.pop(0)
            self.in_flight += size_next
            waiter.set_result(None)


# The process's bound (app/upstream/choice.py sets it from the settings).
ROOM = AnswerRoom(256 * 1024 * 1024)
