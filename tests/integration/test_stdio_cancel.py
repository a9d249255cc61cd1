"""MCP_SHIM_STDIO_CANCEL: cancelling an abandoned call on a stdio server that
dies of it.

The server is the gateway's legacy fixture on the official Python SDK 1.x
(`--stdio`), which has that flaw: a `notifications/cancelled` that races the
answer to its request ends the server's session, and the process exits at the
next line it reads (python-sdk issue 2610). Through the gateway, a caller that
disconnects the instant it called makes the gateway send just that, and the
process then fails every other caller's call on it. Here the transport the
gateway runs writes each call and its cancellation in one loop iteration, as
when a caller goes at once, against real processes of that server:

- "auto" (the default) sends cancellations until a process exits after one
  with nothing written after it answered; from then on it withholds them, and
  a new process takes any number of abandoned calls and serves on;
- one worker's stop stops every worker's (a flag in the table the supervisor
  shares with them), so a gateway loses one process to it, not one a worker;
- a process that answered after a cancellation and exits later for another
  reason does not stop them;
- "never" never sends one, "always" keeps sending them.

Cancellation is optional for a legacy server (2025-11-25 basic/utilities/
cancellation: "optional cancellation of in-progress requests"), and the
gateway ends an abandoned call's exchange itself whether it sends one or not.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from structlog.testing import capture_logs

from app.serving.load_board import CANCELS_WITHHELD, LoadBoard
from app.upstream.errors import UpstreamError
from app.upstream.stdio.process import child_environment
from app.upstream.stdio.session import StdioSession
from app.upstream.stdio.transport import StdioTransport
from tests import procs

pytestmark = pytest.mark.peers

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "mcp-shim-tests", "version": "0"},
    },
}
# Call-and-cancel pairs written back to back: enough to end the fixture's
# process in each of 28 runs here.
PAIRS = 200


def echo(rid: Any, tool: str = "echo", **arguments: Any) -> dict[str, Any]:
    arguments.setdefault("text", f"text-{rid}")
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


def cancel(rid: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": rid, "reason": "the caller went away"},
    }


@asynccontextmanager
async def fixture_transport(mode: str) -> AsyncIterator[StdioTransport]:
    command = [str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE), "--stdio"]
    transport = StdioTransport(
        command,
        env=child_environment(os.environ, []),
        max_processes=2,
        start_timeout_s=30,
        slot_wait_s=30,
        request_timeout_s=30,
        liveness_s=30,
        cancel=mode,
    )
    try:
        yield transport
    finally:
        await transport.aclose()


async def answer(session: StdioSession, message: dict[str, Any]) -> dict[str, Any]:
    exchange = await session.request(message)
    try:
        async with asyncio.timeout(30):
            async for received in exchange:
                if "method" not in received:
                    return received
    finally:
        await exchange.aclose()
    raise AssertionError(f"no answer to {message['id']}")


async def abandon(session: StdioSession, pairs: int, prefix: str) -> int:
    """`pairs` calls, each cancelled at once; how many were written before
    the process was gone."""
    for n in range(pairs):
        if session.gone is not None:
            return n
        try:
            await session.request(echo(f"{prefix}-{n}"))
            await session.notify(cancel(f"{prefix}-{n}"))
        except UpstreamError:
            return n
        await asyncio.sleep(0)
    return pairs


async def settle(session: StdioSession) -> None:
    """Long enough for a process that is dying to be seen gone."""
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.5):
            await asyncio.shield(session.exited)


async def test_auto_stops_cancelling_once_a_process_dies_of_it() -> None:
    async with fixture_transport("auto") as transport:
        first, _ = await transport.open_session(INITIALIZE, {})
        assert transport.cancels
        with capture_logs() as logs:
            await abandon(first, PAIRS, "a")
            code = await asyncio.wait_for(asyncio.shield(first.exited), 10)
        assert code != 0
        exits = [line for line in logs if line["event"] == "upstream_process_exited"]
        assert exits and exits[0]["after_cancellation"] is True, logs
        stopped = [line for line in logs if line["event"] == "upstream_cancellation_stopped"]
        assert len(stopped) == 1 and stopped[0]["setting"] == "MCP_SHIM_STDIO_CANCEL"
        assert not transport.cancels

        second, _ = await transport.open_session({**INITIALIZE, "id": "init-2"}, {})
        assert await abandon(second, PAIRS, "b") == PAIRS
        await settle(second)
        result = await answer(second, echo("after", text="still here"))
        assert result["result"]["content"][0]["text"] == "still here"


async def test_one_worker_s_stop_stops_its_siblings() -> None:
    # Two workers' transports sharing the supervisor's table (app/serving/load_board.py).
    fd = LoadBoard.create(2)
    boards = [LoadBoard(fd, 2), LoadBoard(os.dup(fd), 2)]
    try:
        async with fixture_transport("auto") as dying, fixture_transport("auto") as sibling:
            dying.share_cancel_stop(boards[0].flag(CANCELS_WITHHELD))
            sibling.share_cancel_stop(boards[1].flag(CANCELS_WITHHELD))
            theirs, _ = await sibling.open_session(INITIALIZE, {})
            assert sibling.cancels
            first, _ = await dying.open_session(INITIALIZE, {})
            await abandon(first, PAIRS, "a")
            await asyncio.wait_for(asyncio.shield(first.exited), 10)
            assert not sibling.cancels
            # Its own process, cancelled nothing, serves on.
            assert await abandon(theirs, PAIRS, "s") == PAIRS
            await settle(theirs)
            result = await answer(theirs, echo("after", text="still here"))
            assert result["result"]["content"][0]["text"] == "still here"
    finally:
        for board in boards:
            board.close()
        os.close(fd)


async def test_a_process_that_answered_after_a_cancellation_does_not_stop_them() -> None:
    async with fixture_transport("auto") as transport:
        session, _ = await transport.open_session(INITIALIZE, {})
        # Cancelled mid-call, well after it started: the fixture survives that.
        slow = await session.request(echo("slow", tool="slow_echo", ms=5000, steps=5))
        await asyncio.sleep(0.3)
        await session.notify(cancel("slow"))
        await slow.aclose()
        assert (await answer(session, {"jsonrpc": "2.0", "id": "p", "method": "ping"}))["id"] == "p"
        with capture_logs() as logs:
            os.kill(session.pid, signal.SIGKILL)
            await asyncio.wait_for(asyncio.shield(session.exited), 10)
        exits = [line for line in logs if line["event"] == "upstream_process_exited"]
        assert exits and "after_cancellation" not in exits[0], logs
        assert transport.cancels
        assert not [line for line in logs if line["event"] == "upstream_cancellation_stopped"]


async def test_never_sends_one_and_the_process_serves_on() -> None:
    async with fixture_transport("never") as transport:
        assert not transport.cancels
        session, _ = await transport.open_session(INITIALIZE, {})
        assert await abandon(session, PAIRS, "n") == PAIRS
        await settle(session)
        result = await answer(session, echo("after", text="still here"))
        assert result["result"]["content"][0]["text"] == "still here"


async def test_always_keeps_sending_them() -> None:
    async with fixture_transport("always") as transport:
        session, _ = await transport.open_session(INITIALIZE, {})
        with capture_logs() as logs:
            await abandon(session, PAIRS, "w")
            await asyncio.wait_for(asyncio.shield(session.exited), 10)
        assert [line for line in logs if line.get("after_cancellation")], logs
        assert not [line for line in logs if line["event"] == "upstream_cancellation_stopped"]
        assert transport.cancels
