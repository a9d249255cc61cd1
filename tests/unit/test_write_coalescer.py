"""app/write_coalescer.py: the small writes of one loop iteration go out
together at the start of the next, in order, one write per transport; large
ones go at once; close sends what is queued, abort drops it; and an answer's
bytes leave before the call's bookkeeping (CallAnswer)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import pytest

from app.connection.link import LINK, ConnectionLink
from app.fronts.modern.gateway import Outgoing
from app.fronts.shared.answer import CallAnswer
from app.write_coalescer import SMALL_WRITE, CoalescedTransport, WriteCoalescer, for_loop

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class Recorder(asyncio.Transport):
    """Stands in for the socket's transport: what was written, in which calls."""

    def __init__(self, log: list[tuple[str, bytes]] | None = None, name: str = "t") -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.fail = False
        self._log = log
        self._name = name

    def write(self, data: Any) -> None:
        if self.fail:
            raise RuntimeError("the socket failed")
        self.writes.append(bytes(data))
        if self._log is not None:
            self._log.append((self._name, bytes(data)))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 7


async def test_one_iterations_writes_to_a_transport_go_out_as_one_write_at_the_next() -> None:
    recorder = Recorder()
    writes = WriteCoalescer(asyncio.get_running_loop())
    writes.write(recorder, HEAD)
    writes.write(recorder, b"{}")
    assert recorder.writes == []  # held for the rest of this iteration
    await asyncio.sleep(0)
    assert recorder.writes == [HEAD + b"{}"]
    await asyncio.sleep(0)
    assert recorder.writes == [HEAD + b"{}"]  # nothing written twice


async def test_transports_are_written_in_the_order_they_first_wrote() -> None:
    log: list[tuple[str, bytes]] = []
    first, second = Recorder(log, "first"), Recorder(log, "second")
    writes = WriteCoalescer(asyncio.get_running_loop())
    writes.write(first, b"a")
    writes.write(second, b"b")
    writes.write(first, b"c")
    await asyncio.sleep(0)
    assert log == [("first", b"ac"), ("second", b"b")]


async def test_a_large_write_goes_at_once_after_what_is_queued_before_it() -> None:
    recorder = Recorder()
    writes = WriteCoalescer(asyncio.get_running_loop())
    large = b"x" * SMALL_WRITE
    writes.write(recorder, large)
    assert recorder.writes == [large]  # the transport's flow control sees it now
    writes.write(recorder, HEAD)
    writes.write(recorder, large)
    assert recorder.writes == [large, HEAD + large]
    await asyncio.sleep(0)
    assert recorder.writes == [large, HEAD + large]


async def test_queued_bytes_stay_under_the_bound() -> None:
    recorder = Recorder()
    writes = WriteCoalescer(asyncio.get_running_loop())
    piece = b"e" * (SMALL_WRITE // 4)
    for _ in range(3):
        writes.write(recorder, piece)
    assert recorder.writes == []
    assert writes.queued_bytes(recorder) == 3 * len(piece)
    writes.write(recorder, piece)  # reaches the bound: out with the others
    assert recorder.writes == [piece * 4]
    assert writes.queued_bytes(recorder) == 0


async def test_a_transport_closed_before_the_flush_gets_nothing_and_others_still_do() -> None:
    gone, failing, fine = Recorder(), Recorder(), Recorder()
    writes = WriteCoalescer(asyncio.get_running_loop())
    for recorder in (gone, failing, fine):
        writes.write(recorder, b"answer")
    gone.closed = True
    failing.fail = True
    await asyncio.sleep(0)  # no exception reaches the loop
    assert gone.writes == [] and failing.writes == []
    assert fine.writes == [b"answer"]


async def test_the_connection_transport_closes_after_sending_what_is_queued() -> None:
    recorder = Recorder()
    transport = CoalescedTransport(recorder, WriteCoalescer(asyncio.get_running_loop()))
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    transport.write(HEAD)
    assert transport.get_write_buffer_size() == 7 + len(HEAD) + 25
    transport.close()
    assert recorder.writes == [b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD]
    assert recorder.closed
    await asyncio.sleep(0)
    assert len(recorder.writes) == 1


async def test_the_connection_transport_abort_drops_what_is_queued() -> None:
    recorder = Recorder()
    transport = CoalescedTransport(recorder, WriteCoalescer(asyncio.get_running_loop()))
    transport.write(HEAD)
    transport.abort()
    await asyncio.sleep(0)
    assert recorder.writes == [] and recorder.aborted


async def test_each_loop_has_its_own_coalescer() -> None:
    loop = asyncio.get_running_loop()
    assert for_loop(loop) is for_loop(loop)
    other = asyncio.new_event_loop()
    try:
        assert for_loop(other) is not for_loop(loop)
    finally:
        other.close()


@pytest.mark.parametrize("sse", [False, True])
async def test_an_answer_leaves_before_the_calls_bookkeeping(sse: bool) -> None:
    # A call's log line and metrics (on_done) and the upstream exchange's close
    # come after the answer's bytes reached the socket, not before: at c1 that
    # work would otherwise be added to every answer's latency.
    recorder = Recorder()
    transport = CoalescedTransport(recorder, WriteCoalescer(asyncio.get_running_loop()))
    seen_at_done: list[list[bytes]] = []
    closed_after: list[list[bytes]] = []

    async def events() -> AsyncGenerator[Outgoing, None]:
        try:
            if sse:
                yield Outgoing({"jsonrpc": "2.0", "method": "notifications/progress"})
            yield Outgoing({"jsonrpc": "2.0", "id": 1, "result": {}}, final=True)
        finally:
            closed_after.append(list(recorder.writes))

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            transport.write(HEAD)
        else:
            transport.write(message.get("body", b""))

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    answer = CallAnswer(
        events(),
        accepts_sse=sse,
        accepts_json=True,
        on_done=lambda status, ending: seen_at_done.append(list(recorder.writes)),
    )
    # The gateway's own protocol's link: no watcher task whose end would step
    # aside for the answer anyway.
    link = ConnectionLink(SimpleNamespace(write_paused=False))
    await answer({"type": "http", "extensions": {LINK: link}}, receive, send)
    assert recorder.writes, "the answer was written"
    assert b"".join(seen_at_done[0]) == b"".join(recorder.writes)
    assert b"".join(closed_after[0]) == b"".join(recorder.writes)
