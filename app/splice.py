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
original strings' bytes, which are valid JSON as they came (orjson checks
each of them, a piece at a time). The answer writer sends the pieces as they are
(`dumps_chunks`, memoryviews of the upstream's bytes); `dumps` joins them for
every other use (a task's stored result, a relay), so a marker never leaves
the process.

What the skeleton cannot take is parsed whole, as before: a string the
parser's check refuses (invalid JSON: the parser says why on the whole body;
a surrogate pair cut between two pieces), a body with too many quotes (the
walk steps from quote to quote in Python: JSON written as text), one with no
large string.

The answer's bytes stay alive as long as a `Spliced` of them does; the bytes
of answers in flight are bounded across callers by `AnswerRoom`
(MCP_SHIM_MAX_ANSWER_BYTES_IN_FLIGHT), released when those bytes are freed.
bench/answers.py measures the peak RSS and CPU per MB this gives.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import weakref
from collections.abc import Iterator
from typing import Any

import orjson

# Bodies below this are parsed whole: their copies are small.
MIN_BODY = 512 * 1024
# String values at least this long (their JSON bytes) stay in the answer's bytes.
MIN_STRING = 64 * 1024
# The walk visits every string of the body in Python (about 1 us each): past
# one per this many bytes, the body is parsed whole (a list of many small
# items gains nothing from it), the walk having cost at most a third of
# orjson's parse of it.
BYTES_PER_STRING = 1024

# A marker's value: NUL (escaped by every JSON writer, never in a key the
# translators look for), a per-process nonce an upstream cannot guess, an index.
_NONCE = secrets.token_hex(12)
_MARK = "\x00mcp-shim-splice:" + _NONCE + ":"
# The marker as orjson writes it (NUL as \u0000), up to its index.
_MARK_JSON = b'"\\u0000mcp-shim-splice:' + _NONCE.encode() + b":"

# After a string: a colon makes it a key (keys are never left in the bytes).
_SPACE_COLON = re.compile(rb"[ \t\n\r]*+:")
# A long string is checked by the parser itself, a piece at a time (each piece
# copied twice and decoded once: small, so a 1 MB answer is not held 3 times).
_PIECE = 64 * 1024
# Backslashes before a quote counted this far: a longer run is the parser's.
_MAX_RUN = 64

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


def loads(
    body: bytes | bytearray, *, min_body: int = MIN_BODY, min_string: int = MIN_STRING
) -> Any:
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


def _large_strings(body: bytes | bytearray, min_string: int) -> list[tuple[int, int]]:
    """The spans (quotes included) of the string values of at least
    `min_string` bytes, each checked as the parser would check it; [] when
    the body is left to the parser whole. The walk finds each string's end as
    a JSON lexer does (the next quote after an even run of backslashes), at
    C speed between quotes; every quote it meets (a string's, an escaped one)
    counts against its budget, one per BYTES_PER_STRING bytes."""
    found: list[tuple[int, int]] = []
    pos, size = 0, len(body)
    budget = max(size // BYTES_PER_STRING, 64)
    while pos < size:
        begin = body.find(b'"', pos)
        if begin == -1:
            break
        end = begin
        while True:
            budget -= 1
            end = body.find(b'"', end + 1)
            if budget < 0 or end == -1:
                return []
            run = _backslashes(body, end, begin + 1)
            if run < 0:
                return []
            if run % 2 == 0:
                break
        end += 1
        if end - begin >= min_string and not _SPACE_COLON.match(body, end):
            if not _valid(body, begin + 1, end - 1):
                return []
            found.append((begin, end))
        pos = end
    return found


def _backslashes(body: bytes | bytearray, at: int, floor: int) -> int:
    """How many backslashes come right before `at` (not before `floor`); -1:
    more than _MAX_RUN (left to the parser)."""
    run = 0
    while at - run > floor and body[at - run - 1] == 0x5C:
        run += 1
        if run > _MAX_RUN:
            return -1
    return run


def _valid(body: bytes | bytearray, start: int, stop: int) -> bool:
    """The string's content `body[start:stop]` is what the parser takes (its
    escapes, no raw control character, UTF-8): the parser checks it, a piece
    at a time, never whole. A piece ends before an escape (escapes are at
    most 6 bytes, a surrogate pair 12), so no escape is cut; a pair cut
    anyway reads as invalid, and the body is parsed whole."""
    view = memoryview(body)
    while start < stop:
        cut = min(start + _PIECE, stop)
        if cut < stop:
            first = body.find(b"\\", max(start, cut - 12), cut)
            if first != -1:
                cut = first - _backslashes(body, first, start)
                if cut <= start or cut > first:
                    return False
        try:
            orjson.loads(b'"' + view[start:cut].tobytes() + b'"')
        except orjson.JSONDecodeError:
            return False
        start = cut
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
