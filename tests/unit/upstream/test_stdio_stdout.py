"""A stdio server's stdout is split into lines in the pipe's own callback
(app/upstream/stdio/process.py, ServerPipes): every line whole and in order
however the pipe cuts it, what comes before the session is attached kept for
it, the last line without its end handed on, and a line past MAX_LINE_BYTES
ending the reading (and the process). The splitting is driven directly with
chosen chunks; the bounds and the end also with real processes (a shell)."""

from __future__ import annotations

import asyncio

import pytest

from app.upstream.stdio import process as stdio
from app.upstream.stdio.process import ServerPipes
from tests.unit.stdio_spawn import spawned
from tests.waiting import until


class _Lines:
    """What a session is told by its pipes: the lines, and why reading stopped."""

    pid = 0

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.unreadable: list[str] = []

    def stdout_line(self, line: bytes) -> None:
        self.lines.append(line)

    def stdout_unreadable(self, reason: str) -> None:
        self.unreadable.append(reason)


def _pipes() -> tuple[ServerPipes, _Lines]:
    pipes = ServerPipes(asyncio.get_running_loop())
    seen = _Lines()
    pipes.attach(seen)  # type: ignore[arg-type]
    return pipes, seen


CHUNKINGS = [
    pytest.param([b'{"a":1}\n{"b":2}\n{"c":3}\n'], id="all-in-one-read"),
    pytest.param([b'{"a":1}\n{"b"', b":2}\n", b'{"c":3}\n'], id="a-line-across-two-reads"),
    pytest.param([bytes([b]) for b in b'{"a":1}\n{"b":2}\n{"c":3}\n'], id="a-byte-per-read"),
    pytest.param([b'{"a":1}', b"\n", b'{"b":2}\n{"c', b'":3}', b"\n"], id="ends-read-alone"),
]


@pytest.mark.parametrize("chunks", CHUNKINGS)
async def test_every_line_arrives_whole_and_in_order(chunks: list[bytes]) -> None:
    pipes, seen = _pipes()
    for chunk in chunks:
        pipes.pipe_data_received(1, chunk)
    assert seen.lines == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert not pipes.stdout_ended.done()


async def test_what_comes_before_the_session_is_kept_for_it() -> None:
    pipes = ServerPipes(asyncio.get_running_loop())
    pipes.pipe_data_received(1, b"banner\n{")
    pipes.pipe_data_received(1, b'"a":1}\n{"b"')
    seen = _Lines()
    pipes.attach(seen)  # type: ignore[arg-type]
    pipes.pipe_data_received(1, b":2}\n")
    assert seen.lines == [b"banner", b'{"a":1}', b'{"b":2}']


async def test_what_ended_before_the_session_came_is_handed_on_whole() -> None:
    pipes = ServerPipes(asyncio.get_running_loop())
    pipes.pipe_data_received(1, b'{"a":1}\n{"b":2}')
    pipes.pipe_connection_lost(1, None)
    seen = _Lines()
    pipes.attach(seen)  # type: ignore[arg-type]
    assert seen.lines == [b'{"a":1}', b'{"b":2}']
    assert pipes.stdout_ended.done() and pipes.unreadable is None


async def test_the_last_line_without_its_end_is_handed_on_at_the_end() -> None:
    pipes, seen = _pipes()
    pipes.pipe_data_received(1, b'{"a":1}\n{"b":2}')
    assert seen.lines == [b'{"a":1}']
    pipes.pipe_connection_lost(1, None)
    assert seen.lines == [b'{"a":1}', b'{"b":2}']
    assert pipes.stdout_ended.done() and pipes.unreadable is None


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param([b"x" * 40 + b"\n"], id="in-one-read"),
        pytest.param([b"x" * 20, b"x" * 20, b"\n"], id="gathered-without-end"),
        pytest.param([b"x" * 20, b"x" * 20 + b"\nok\n"], id="ended-in-a-later-read"),
    ],
)
async def test_a_line_past_the_bound_stops_the_reading(
    monkeypatch: pytest.MonkeyPatch, chunks: list[bytes]
) -> None:
    monkeypatch.setattr(stdio, "MAX_LINE_BYTES", 32)
    pipes, seen = _pipes()
    pipes.pipe_data_received(1, b"short\n")
    for chunk in chunks:
        pipes.pipe_data_received(1, chunk)
    pipes.pipe_data_received(1, b"after\n")
    assert seen.lines == [b"short"]  # nothing of it, nothing after it
    assert seen.unreadable == ["it wrote a line longer than 32 bytes"]
    assert pipes.stdout_ended.done()


async def test_a_fault_while_reading_stops_the_reading_and_is_logged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Faulty(_Lines):
        def stdout_line(self, line: bytes) -> None:
            raise RuntimeError("a defect")

    pipes = ServerPipes(asyncio.get_running_loop())
    seen = Faulty()
    pipes.attach(seen)  # type: ignore[arg-type]
    pipes.pipe_data_received(1, b'{"a":1}\n')
    assert seen.unreadable == ["the gateway failed to read its stdout"]
    assert pipes.stdout_ended.done()
    assert "upstream_stdout_failed" in capsys.readouterr().out


async def test_a_server_writing_past_the_bound_is_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stdio, "MAX_LINE_BYTES", 1000)
    transport, session = await spawned(
        ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x; sleep 30"], grace_s=0.2
    )
    try:
        await until(lambda: session.gone is not None, timeout_s=10, what="the session's end")
        assert session.gone is not None
        assert "longer than 1000 bytes" in session.gone.message
    finally:
        await transport.aclose()


async def test_lines_of_a_real_pipe_reach_the_routes_and_its_end_stops_the_session() -> None:
    answer = '{"jsonrpc":"2.0","id":7,"result":{}}'
    transport, session = await spawned(
        ["sh", "-c", f"read line; printf 'not json\\n{answer}'; exec sleep 30 >&-"],
        grace_s=0.2,
    )
    try:
        session.initialized = True
        exchange = await session.request({"jsonrpc": "2.0", "id": 7, "method": "ping"})
        got = [message async for message in exchange]
        assert got == [{"jsonrpc": "2.0", "id": 7, "result": {}}]  # its last line had no end
        assert session.not_json == 1
        # stdout closed while the process runs on: the server ended the session.
        await until(lambda: session.gone is not None, timeout_s=10, what="the session's end")
        assert session.gone is not None and "closed its stdout" in session.gone.message
    finally:
        await transport.aclose()
