"""app/splice.py: a large answer parsed as its skeleton, translated, and written
back around its large strings means what parsing it whole and serialising it
again means, byte for byte once parsed, on every shape; what it cannot take
is parsed whole; and the room of answers in flight is bounded and given back."""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

import orjson
import pytest

from app import jsonio, splice
from tests.waiting import until
from translators.registry import get_version
from translators.translate import error as translate_error
from translators.translate import result as translate_result

SMALL = {"min_body": 64, "min_string": 16}
BIG = "x" * 40


def _roundtrip(body: bytes, **sizes: int) -> Any:
    parsed = splice.loads(body, **(sizes or SMALL))
    return parsed, b"".join(splice.dumps_chunks(parsed))


SHAPES: list[Any] = [
    {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": BIG}]}},
    # keys in any order, the result before the id, a large string first and last
    {"result": {"z": BIG, "a": 1, "content": [{"text": BIG + "!", "type": "text"}]}, "id": "r"},
    # unicode, escaped quotes, backslashes, control escapes, a string of them only
    {"id": 2, "result": {"t": "é☃𝄞 " * 10, "q": '"quoted" \\ back\n\t' * 5, "e": '\\"' * 20}},
    {"id": 3, "result": {"blob": "\u0000\u001f" * 10, "small": "s", "n": [1.5, -0, 1e3, None]}},
    # a result that is not an object, an error response, a batch, a bare string
    {"jsonrpc": "2.0", "id": 4, "result": [BIG, BIG]},
    {"jsonrpc": "2.0", "id": 5, "error": {"code": -32002, "message": BIG, "data": {"d": BIG}}},
    [{"id": 6, "result": {"text": BIG}}, {"id": 7, "result": {"text": BIG * 2}}],
    BIG * 3,
    # large keys stay keys; a marker-like text from the upstream is only text
    {"id": 8, "result": {BIG: BIG, "t": "\u0000mcp-shim-splice:abc:0" + BIG}},
    {"id": 9, "result": {"deep": [[[{"text": BIG}]]], "empty": "", "obj": {}}},
]


@pytest.mark.parametrize("shape", SHAPES, ids=range(len(SHAPES)))
@pytest.mark.parametrize("form", ["compact", "spaced", "ascii"])
def test_a_large_answer_means_what_its_bytes_mean(shape: Any, form: str) -> None:
    if form == "compact":
        body = json.dumps(shape, ensure_ascii=False, separators=(",", ":")).encode()
    else:
        body = json.dumps(shape, indent=1 if form == "spaced" else None).encode()
    parsed, written = _roundtrip(body)
    assert orjson.loads(written) == orjson.loads(body)
    # Byte for byte what parsing and serialising it whole gives, for input
    # written as orjson writes (a large string's own escapes are kept as sent).
    if form == "compact":
        assert written == orjson.dumps(orjson.loads(body))
    assert jsonio.dumps(parsed) == written


def test_only_long_strings_are_left_in_the_bytes_and_small_bodies_not_at_all() -> None:
    body = json.dumps({"id": 1, "result": {"text": BIG, "type": "text"}}).encode()
    parsed = splice.loads(body, **SMALL)
    assert isinstance(parsed["result"]["text"], splice.Spliced)
    assert type(parsed["result"]["type"]) is str
    assert type(splice.loads(body)["result"]["text"]) is str  # under MIN_BODY


@pytest.mark.parametrize(
    "text",
    [
        '"\\ud83d\\ude00' + "x" * 40 + '"',  # an escaped surrogate pair: the parser's
        '"\\ud83d' + "x" * 40 + '"',  # a lone one: the parser refuses it
        '"' + "x" * 40 + '\\x"',  # an escape JSON has not
        '"' + "x" * 40 + '\u0001"',  # a raw control character
        '"' + "x" * 40,  # unterminated
    ],
)
def test_what_the_walk_cannot_check_is_the_parsers(text: str) -> None:
    body = ('{"id": 1, "result": {"text": ' + text + "}}").encode()
    try:
        expected: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        with pytest.raises(orjson.JSONDecodeError):
            splice.loads(body, **SMALL)
        return
    _, written = _roundtrip(body)
    assert orjson.loads(written) == expected


def test_invalid_utf8_in_a_long_string_is_refused_as_the_parser_refuses_it() -> None:
    body = b'{"id": 1, "result": {"text": "' + b"x" * 40 + b'\xff"}}'
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(body)
    with pytest.raises(orjson.JSONDecodeError):
        splice.loads(body, **SMALL)


def test_invalid_json_around_long_strings_is_refused() -> None:
    body = b'{"id": 1, "result": {"text": "' + b"x" * 40 + b'" "b": 2}}'
    with pytest.raises(orjson.JSONDecodeError):
        splice.loads(body, **SMALL)


@pytest.mark.parametrize(
    ("src", "dst"),
    [("2025-11-25", "2026-07-28"), ("2025-06-18", "2026-07-28"), ("2025-06-18", "2024-11-05")],
)
def test_the_translators_work_on_the_skeleton(src: str, dst: str) -> None:
    """Upward: `resultType` added at the top; downward: content blocks dropped
    inside the list (audio has no 2024-11-05 form). Both as on the whole answer."""
    result = {
        "content": [
            {"type": "audio", "data": BIG, "mimeType": "audio/wav"},
            {"type": "text", "text": BIG + 'é"\\'},
        ],
        "structuredContent": {"big": BIG},
        "_meta": {"k": BIG},
    }
    message = {"jsonrpc": "2.0", "id": 1, "result": result}
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
    source, target = get_version(src), get_version(dst)
    assert source is not None and target is not None
    whole = orjson.loads(body)
    expected = {**whole, "result": translate_result(whole["result"], "tools/call", source, target)}
    parsed = splice.loads(body, **SMALL)
    parsed = {
        **parsed,
        "result": translate_result(parsed["result"], "tools/call", source, target),
    }
    assert b"".join(splice.dumps_chunks(parsed)) == orjson.dumps(expected)


def test_errors_translate_on_the_skeleton() -> None:
    body = json.dumps({"id": 1, "error": {"code": -32002, "message": BIG}}).encode()
    source, target = get_version("2025-11-25"), get_version("2026-07-28")
    assert source is not None and target is not None
    parsed = splice.loads(body, **SMALL)
    error = translate_error(parsed["error"], source, target)
    expected = translate_error(orjson.loads(body)["error"], source, target)
    assert orjson.loads(splice.dumps({"error": error})) == {"error": expected}


def test_the_writer_gets_the_upstreams_bytes_not_a_copy() -> None:
    body = bytearray(json.dumps({"id": 1, "result": {"text": BIG}}).encode())
    chunks = splice.dumps_chunks(splice.loads(body, **SMALL))
    views = [c for c in chunks if isinstance(c, memoryview) and c.obj is body]
    assert [bytes(v) for v in views] == [b'"' + BIG.encode() + b'"']


@pytest.mark.parametrize(
    ("line", "left_in_bytes"),
    [
        # Escapes on every line, a quote now and then: the walk takes it.
        ("a line of text\twith tabs\\ and é ☃ " * 60 + '"quoted"\n', True),
        # A quote every few bytes (JSON in text): each one is a step of the
        # walk in Python, so it is parsed whole, as fast as before.
        ('{"k": "v", "n": 1}\n', False),
    ],
)
def test_a_large_string_on_the_real_thresholds(line: str, left_in_bytes: bool) -> None:
    text = line * (2 * 1024 * 1024 // len(line))
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"text": text}]}})
    assert len(body) >= splice.MIN_BODY
    parsed = splice.loads(body)
    assert isinstance(parsed["result"]["content"][0]["text"], splice.Spliced) is left_in_bytes
    assert splice.dumps(parsed) == body


def test_a_piece_never_cuts_an_escape() -> None:
    """Escapes (a surrogate pair among them) across every piece boundary of
    the parser's check: all taken as the parser takes them."""
    spliced = 0
    for shift in range(14):
        text = "x" * (splice._PIECE - 8 + shift) + '\\"é\u0001😀\n' * 3 + "y" * 600_000
        body = json.dumps({"id": 1, "result": {"text": text}}).encode()
        parsed = splice.loads(body)
        spliced += isinstance(parsed["result"]["text"], splice.Spliced)
        assert orjson.loads(splice.dumps(parsed)) == orjson.loads(body)
    # Only where a surrogate pair is cut is the body parsed whole.
    assert spliced >= 10


# -- the room of answers in flight ---------------------------------------------


def test_the_room_is_given_back_when_the_answer_is_freed() -> None:
    released: list[int] = []
    body = json.dumps({"id": 1, "result": {"text": BIG}}).encode()
    parsed = splice.loads(body, **SMALL)
    assert splice.hold(parsed, lambda: released.append(1))
    assert not splice.hold({"plain": "x"}, lambda: released.append(2))
    del parsed
    gc.collect()
    assert released == [1]


async def test_answers_wait_for_room_and_one_too_large_is_served_alone() -> None:
    room = splice.AnswerRoom(100, wait_s=0.2)
    assert await room.take(60)
    # Over the bound with 60 in flight: waits, and gets room when it is given back.
    waiting = asyncio.ensure_future(room.take(60))
    await until(lambda: room._waiters, what="the second answer waiting for room")
    assert not waiting.done()
    room.give(60)
    assert await waiting
    assert room.in_flight == 60
    # No room within the wait: refused, and nothing is counted for it.
    assert not await room.take(50)
    assert room.in_flight == 60
    assert "MCP_SHIM_MAX_ANSWER_BYTES_IN_FLIGHT" in room.refusal(50)
    room.give(60)
    # Larger than the whole bound: let in alone.
    assert await room.take(500)
    assert room.in_flight == 500
    room.give(500)
    assert room.in_flight == 0


async def test_a_caller_that_goes_while_waiting_takes_no_room() -> None:
    room = splice.AnswerRoom(100, wait_s=5)
    assert await room.take(100)
    waiting = asyncio.ensure_future(room.take(10))
    await until(lambda: room._waiters, what="the caller waiting for room")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    room.give(100)
    assert room.in_flight == 0
