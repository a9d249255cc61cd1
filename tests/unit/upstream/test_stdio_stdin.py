"""A stdio server's stdin takes the lines of one loop iteration as one write at
the next (app/upstream/stdio/session.py over app/write_coalescer.py): over a
real pipe, the lines keep the order they were written in, none is lost (a
close sends what is queued first) and none is cut or merged with another,
whatever their sizes and however many tasks write at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app import jsonio
from app.upstream.stdio.process import StdioProcessExited
from app.write_coalescer import SMALL_WRITE, for_loop
from tests.unit.stdio_spawn import spawned
from tests.waiting import clock_marks, one_turn, until


@contextlib.asynccontextmanager
async def pipe() -> AsyncIterator[tuple[asyncio.WriteTransport, int]]:
    """The write end as an event-loop transport (as a server's stdin is), and
    the read end as a non-blocking descriptor."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(write_fd, "wb"))
    try:
        yield transport, read_fd
    finally:
        transport.close()
        os.close(read_fd)


def read_now(fd: int) -> bytes:
    """What the pipe holds at this moment (b"" when nothing)."""
    out = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def line(n: int, size: int) -> bytes:
    message = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"t": "x" * size}}
    return jsonio.dumps(message) + b"\n"


async def test_one_iterations_lines_reach_the_pipe_together_at_the_next() -> None:
    async with pipe() as (transport, fd):
        writes = for_loop(asyncio.get_running_loop())
        lines = [line(n, 10 * n) for n in range(40)]
        for data in lines:
            writes.write(transport, data)
        assert read_now(fd) == b"", "a small line went out before the loop came round"
        await one_turn()  # the next iteration is the behaviour under test
        # One write: a single read finds every line, in order.
        assert read_now(fd) == b"".join(lines)


async def test_concurrent_writers_of_any_size_keep_order_and_whole_lines() -> None:
    rng = random.Random(23)
    sent: list[bytes] = []

    async def writer(k: int, transport: asyncio.WriteTransport) -> None:
        writes = for_loop(asyncio.get_running_loop())
        for i in range(30):
            # Small lines and some past the coalescer's bound (those go at once).
            size = rng.choice([1, 50, 700, SMALL_WRITE - 200, SMALL_WRITE + 1, 3 * SMALL_WRITE])
            data = line(k * 1000 + i, size)
            sent.append(data)
            writes.write(transport, data)
            if rng.random() < 0.5:
                await one_turn()  # the other writers' turn: their lines interleave

    got = bytearray()
    loop = asyncio.get_running_loop()

    async with pipe() as (transport, fd):
        # The pipe holds 64 KiB: read as the writers go, or the large lines stall.
        loop.add_reader(fd, lambda: got.extend(read_now(fd)))
        try:
            await asyncio.gather(*(writer(k, transport) for k in range(8)))
            total = sum(len(data) for data in sent)
            await until(lambda: len(got) >= total, what=f"the {total} bytes written")
        finally:
            loop.remove_reader(fd)
    # Exactly the lines written, in the order of the write calls: none lost,
    # none merged into another or cut.
    received = bytes(got).split(b"\n")
    assert received[-1] == b""
    assert [r + b"\n" for r in received[:-1]] == sent
    assert all(json.loads(r)["jsonrpc"] == "2.0" for r in received[:-1])


async def test_a_sessions_lines_wait_for_the_next_iteration_and_go_out_as_one() -> None:
    # A server that reads nothing: what its stdin holds is read here, through
    # the pipe's other end in /proc.
    transport, session = await spawned(["sleep", "30"], grace_s=0.2)
    fd = os.open(f"/proc/{session.pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK)
    try:
        messages = [{"jsonrpc": "2.0", "method": "notifications/x", "n": n} for n in range(5)]
        for message in messages:
            await session.notify(message)
        assert read_now(fd) == b"", "each line woke the server on its own"
        await one_turn()  # the next iteration is the behaviour under test
        assert read_now(fd) == b"".join(jsonio.dumps(m) + b"\n" for m in messages)
    finally:
        os.close(fd)
        await session.close()
        await transport.aclose()


async def test_the_end_of_input_comes_after_the_lines_still_queued() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "stdin"
        transport, session = await spawned(["sh", "-c", f"cat > {out}"], grace_s=2.0)
        try:
            messages = [{"jsonrpc": "2.0", "method": "notifications/x", "n": n} for n in range(7)]
            for message in messages:
                await session.notify(message)
            # The same iteration: the lines are still queued when input ends.
            session.close_stdin()
            assert await asyncio.wait_for(asyncio.shield(session.exited), 10) == 0
        finally:
            await transport.aclose()
        assert out.read_bytes() == b"".join(jsonio.dumps(m) + b"\n" for m in messages)


async def test_a_server_that_stops_reading_its_stdin_is_still_stopped() -> None:
    # Queued lines still meet the pipe's flow control: once the pipe and the
    # transport's buffer are full, the next write waits, and after the liveness
    # time the process is stopped rather than the gateway's memory filling.
    transport, session = await spawned(["sleep", "30"], grace_s=0.2)
    fired, marks = clock_marks(15)
    try:
        with pytest.raises(StdioProcessExited, match="stopped reading its stdin"):
            for n in range(1000):  # 8 MB at most, far past the pipe and the buffer
                await session.notify({"jsonrpc": "2.0", "method": "x", "n": n, "p": "x" * 8000})
        assert session.gone is not None
    finally:
        await session.close()
        await transport.aclose()
        marks[0].cancel()
    assert fired == [], "stopped within the liveness time and the graces"
