"""A stdio server's stderr is read continuously and logged within bounds
(app/upstream/stdio/process.py, read_stderr): a chatty server never blocks
on a full pipe, and never floods the gateway's log. Driven with real processes
writing to stderr (a shell), since what is checked is the pipe, not MCP."""

from __future__ import annotations

import asyncio

import pytest

from app.upstream.stdio.process import STDERR_BURST, STDERR_LINE_CHARS, STDERR_LINES_PER_S
from app.upstream.stdio.session import StdioSession
from app.upstream.stdio.transport import StdioTransport
from tests.unit.stdio_spawn import spawned
from tests.waiting import until


async def _session(script: str) -> tuple[StdioTransport, StdioSession]:
    return await spawned(["sh", "-c", script], grace_s=0.2)


async def test_a_flood_of_lines_is_logged_at_a_bounded_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 200,000 lines (2.4 MB, far beyond a pipe's 64 KiB), then a last one.
    transport, session = await _session(
        "yes 'chatty server line' | head -n 200000 >&2; echo last-line >&2; sleep 30"
    )
    started = asyncio.get_running_loop().time()
    try:
        # The writer finished: its pipe was drained all along.
        await until(
            lambda: "last-line" in session.stderr_tail,
            timeout_s=20,
            what="the process's last stderr line",
        )
    finally:
        await session.close()
        await transport.aclose()
    elapsed = asyncio.get_running_loop().time() - started
    out = capsys.readouterr().out.splitlines()
    logged = [line for line in out if "chatty server line" in line or "last-line" in line]
    assert len(logged) <= STDERR_BURST + STDERR_LINES_PER_S * (elapsed + 1)
    assert any("upstream_stderr_dropped" in line for line in out)


async def test_a_line_without_end_stays_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    # 3 MB without a newline, then a short line.
    transport, session = await _session(
        "head -c 3000000 /dev/zero | tr '\\000' x >&2; echo >&2; echo after >&2; sleep 30"
    )
    try:
        await until(
            lambda: "after" in session.stderr_tail,
            timeout_s=20,
            what="the process's last stderr line",
        )
    finally:
        await session.close()
        await transport.aclose()
    assert all(len(line) <= STDERR_LINE_CHARS for line in session.stderr_tail)
    assert any(line.startswith("x" * 100) for line in session.stderr_tail)


async def test_stdout_lines_that_are_not_json_rpc_are_skipped_and_logged_sparingly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    transport, session = await _session(
        "yes 'Server banner, not JSON' | head -n 3000; echo done >&2; sleep 30"
    )
    try:
        await until(
            lambda: "done" in session.stderr_tail,
            timeout_s=20,
            what="the process's last stderr line",
        )
        await until(
            lambda: session.not_json == 3000, timeout_s=5, what="3000 lines counted as not JSON"
        )
        assert session.gone is None  # still a usable session
    finally:
        await session.close()
        await transport.aclose()
    noted = [line for line in capsys.readouterr().out.splitlines() if "not_json" in line]
    assert len(noted) == 5 + 3  # the first five, then every thousandth
