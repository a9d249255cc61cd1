"""CallAnswer at the ASGI level: the JSON/SSE choice and the write timeout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from app.answer import CallAnswer
from app.gateway import Outgoing

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
