"""CallAnswer at the ASGI level: the JSON/SSE choice and the write timeout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

from app.connection.held import ClientHeld
from app.connection.link import LINK, ConnectionLink
from app.fronts.modern.gateway import Outgoing
from app.fronts.shared.answer import CallAnswer

NOTE = {
    "jsonrpc": "2.0",
    "method": "notifications/progress",
    "params": {"progressToken": 1, "progress": 1},
}
FINAL = {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete"}}


async def _never_disconnects() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_answer_first_gives_json_with_its_status() -> None:
    sent: list[dict[str, Any]] = []

    async def events() -> AsyncGenerator[Outgoing, None]:
        yield Outgoing(FINAL, final=True, status=200)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    done: list[tuple[int, str | None]] = []
    answer = CallAnswer(
        events(), accepts_sse=True, accepts_json=True, on_done=lambda s, d: done.append((s, d))
    )
    await answer({}, _never_disconnects, send)
    assert sent[0]["type"] == "http.response.start"
    assert dict(sent[0]["headers"])[b"content-type"] == b"application/json"
    assert done == [(200, None)]


async def test_error_answer_keeps_its_status_for_a_client_that_accepts_only_sse() -> None:
    # Found by the fuzzer (docs/fuzzing.md): with `Accept: text/event-stream`
    # alone an upstream -32602 came as HTTP 200, as JSON it is 400. The status
    # follows the error (app/rejections.py), not the Accept header: 2026-07-28
    # streamable-http "Protocol Version Header" asks for 404 with -32601
    # whatever the client accepts.
    for accepts_json in (True, False):
        sent: list[dict[str, Any]] = []
        error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "nope"}}

        async def events() -> AsyncGenerator[Outgoing, None]:
            yield Outgoing(error, final=True, status=404)  # noqa: B023

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)  # noqa: B023

        done: list[tuple[int, bool]] = []
        answer = CallAnswer(
            events(),
            accepts_sse=True,
            accepts_json=accepts_json,
            on_done=lambda s, d: done.append((s, d)),  # noqa: B023
        )
        await answer({}, _never_disconnects, send)
        assert sent[0]["status"] == 404, accepts_json
        assert done == [(404, None)]


async def test_notification_first_gives_sse() -> None:
    sent: list[dict[str, Any]] = []

    async def events() -> AsyncGenerator[Outgoing, None]:
        yield Outgoing(NOTE)
        yield Outgoing(FINAL, final=True)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    answer = CallAnswer(events(), accepts_sse=True, accepts_json=True, on_done=lambda s, d: None)
    await answer({}, _never_disconnects, send)
    assert dict(sent[0]["headers"])[b"content-type"] == b"text/event-stream"
    bodies = b"".join(m.get("body", b"") for m in sent[1:])
    assert bodies.index(b"notifications/progress") < bodies.index(b'"id":1')


async def test_client_that_stops_reading_is_closed_and_the_call_ends() -> None:
    closed = asyncio.Event()

    async def events() -> AsyncGenerator[Outgoing, None]:
        try:
            while True:
                yield Outgoing(NOTE)
        finally:
            closed.set()

    writes = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal writes
        if message["type"] == "http.response.body":
            writes += 1
            if writes > 2:  # the socket buffer is full: the write never completes
                await asyncio.Event().wait()

    done: list[tuple[int, str | None]] = []
    answer = CallAnswer(
        events(),
        accepts_sse=True,
        accepts_json=True,
        on_done=lambda s, d: done.append((s, d)),
        write_timeout_s=0.05,
    )
    await asyncio.wait_for(answer({}, _never_disconnects, send), 2.0)
    assert closed.is_set()
    assert done == [(200, "client_stalled")]


# The gateway's HTTP protocol links each answer to its connection
# (app/connection/link.py ConnectionLink): a disconnect is a callback, not a
# task per call awaiting receive(), and a write is timed only when it can wait.


def _linked(*, paused: bool = False, lost: bool = False) -> tuple[dict[str, Any], ConnectionLink]:
    link = ConnectionLink(SimpleNamespace(write_paused=paused))
    link.lost = lost
    return {"extensions": {LINK: link}}, link


async def _slow_call(
    started: asyncio.Event, closed: asyncio.Event
) -> AsyncGenerator[Outgoing, None]:
    try:
        started.set()
        await asyncio.Event().wait()
        yield Outgoing(FINAL, final=True)
    finally:
        closed.set()


async def test_a_linked_answer_runs_without_a_watcher_task_and_a_disconnect_cancels_it() -> None:
    started, closed = asyncio.Event(), asyncio.Event()
    done: list[tuple[int, str | None]] = []
    answer = CallAnswer(
        _slow_call(started, closed),
        accepts_sse=True,
        accepts_json=True,
        on_done=lambda s, d: done.append((s, d)),
    )
    scope, link = _linked()

    async def sends(_message: dict[str, Any]) -> None:
        raise AssertionError("nothing is answered to a client that left")

    before = len(asyncio.all_tasks())
    call = asyncio.create_task(answer(scope, _never_disconnects, sends))
    await asyncio.wait_for(started.wait(), 2.0)
    # The call's own task and nothing else: no task per call watching receive().
    assert len(asyncio.all_tasks()) == before + 1
    link.connection_lost()
    await asyncio.wait_for(call, 2.0)  # ends quietly: no CancelledError out of the answer
    assert closed.is_set()
    assert done == [(200, "client_disconnected")]
    assert not call.cancelled()


async def test_a_client_gone_before_the_answer_began_cancels_it() -> None:
    started, closed = asyncio.Event(), asyncio.Event()
    done: list[tuple[int, str | None]] = []
    answer = CallAnswer(
        _slow_call(started, closed),
        accepts_sse=True,
        accepts_json=True,
        on_done=lambda s, d: done.append((s, d)),
    )
    scope, _ = _linked(lost=True)

    async def sends(_message: dict[str, Any]) -> None:
        raise AssertionError("nothing is answered to a client that left")

    await asyncio.wait_for(answer(scope, _never_disconnects, sends), 2.0)
    assert done == [(200, "client_disconnected")]


async def test_a_write_to_a_paused_transport_is_timed() -> None:
    async def events() -> AsyncGenerator[Outgoing, None]:
        yield Outgoing(FINAL, final=True)

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            await asyncio.Event().wait()  # the client reads nothing

    done: list[tuple[int, str | None]] = []
    answer = CallAnswer(
        events(),
        accepts_sse=True,
        accepts_json=True,
        on_done=lambda s, d: done.append((s, d)),
        write_timeout_s=0.05,
    )
    scope, _ = _linked(paused=True)
    await asyncio.wait_for(answer(scope, _never_disconnects, send), 2.0)
    assert done == [(200, "client_stalled")]


async def test_a_client_gone_before_a_body_that_never_waits_cancels_nothing_after_it() -> None:
    scope, _ = _linked(lost=True)
    held = ClientHeld(_never_disconnects, scope)
    async with held:
        pass  # the body ends without an await: the cancel is never delivered there
    # The request is over: nothing of its disconnect may cancel what follows.
    await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    assert held.disconnected.is_set()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
