"""The response head goes out with the body's first write (one send instead of
two, app/http_protocol.py `_HeadWithBody`), and never waits longer than the
loop iteration it was written in: a stream that starts its answer and then
waits for its first event must not keep the client from seeing the head."""

from __future__ import annotations

import asyncio
from typing import Any

from app.http_protocol import _HeadWithBody

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class Recorder:
    """Stands in for the asyncio transport: what was written, in which calls."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def _joined(recorder: Recorder) -> Any:
    return _HeadWithBody(recorder, asyncio.get_running_loop())  # type: ignore[arg-type]


async def test_head_and_body_of_one_iteration_are_one_write() -> None:
    recorder = Recorder()
    transport = _joined(recorder)
    transport.write(HEAD)
    transport.write(b"{}")
    assert recorder.writes == [HEAD + b"{}"]
    await asyncio.sleep(0)  # the scheduled flush finds nothing held
    assert recorder.writes == [HEAD + b"{}"]


async def test_a_head_alone_goes_out_at_the_end_of_its_iteration() -> None:
    recorder = Recorder()
    transport = _joined(recorder)
    transport.write(HEAD)
    assert recorder.writes == []
    await asyncio.sleep(0)
    assert recorder.writes == [HEAD]
    transport.write(b"data: 1\n\n")
    assert recorder.writes == [HEAD, b"data: 1\n\n"]


async def test_100_continue_is_not_held_and_is_not_the_head() -> None:
    recorder = Recorder()
    transport = _joined(recorder)
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert recorder.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    transport.write(HEAD)
    transport.write(b"{}")
    assert recorder.writes[1:] == [HEAD + b"{}"]


async def test_a_body_that_looks_like_a_head_is_written_as_it_is() -> None:
    recorder = Recorder()
    transport = _joined(recorder)
    transport.write(HEAD)
    transport.write(b"HTTP/1.1 200 OK")  # a body's bytes, whatever they say
    transport.write(b"!")
    assert recorder.writes == [HEAD + b"HTTP/1.1 200 OK", b"!"]


async def test_close_sends_a_held_head_first() -> None:
    recorder = Recorder()
    transport = _joined(recorder)
    transport.write(HEAD)
    transport.close()
    assert recorder.writes == [HEAD]
    assert recorder.closed
    await asyncio.sleep(0)
    assert recorder.writes == [HEAD]
