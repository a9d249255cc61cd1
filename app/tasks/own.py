"""Tasks the gateway runs itself, for a legacy server without tasks.

`MCP_SHIM_TASK_TOOLS` names tools (globs) whose calls a modern client that
declares the extension gets as tasks even though the upstream knows no tasks:
the gateway sends the ordinary `tools/call` on a lane of the multi round-trip
bridge (app/mrtr/lanes.py: a session carrying this call alone, whose GET
stream's requests are this call's), answers `CreateTaskResult` at once and
holds the call in a `LiveExchange` (app/mrtr/exchange.py) whose pump reads
the answer stream while nobody waits on it. The server's requests mid-call
become the task's `inputRequests`; `tasks/update` answers them, `tasks/cancel`
abandons the call (`notifications/cancelled`, the questions answered), and
every end of the task releases the lane.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from app.call import Message, upstream_sent
from app.mrtr import results as mrtr_results
from app.mrtr.exchange import LiveExchange, Question, ServerRequest, StreamEnded
from app.mrtr.lanes import Lane, Lanes
from app.tasks.bounds import Hold
from app.tasks.live import unshown_reply
from app.upstream.errors import UpstreamError
from translators.registry import Version

log = structlog.get_logger("mcp_shim.tasks")


def matches(patterns: tuple[str, ...], name: Any) -> bool:
    """Whether a tool name is one of MCP_SHIM_TASK_TOOLS' globs (case-sensitive)."""
    return isinstance(name, str) and any(fnmatch.fnmatchcase(name, p) for p in patterns)


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass(eq=False)
class OwnTask:
    """One call the gateway holds as a task."""

    task_id: str
    owner: str  # the caller's credential hash
    lanes: Lanes
    lane: Lane
    exchange: LiveExchange
    client_version: Version
    deadline: float  # monotonic: the task's TTL
    client_capabilities: Mapping[str, Any]  # of the call that created the task
    hold: Hold  # its lane and two connections, against the tasks' bounds
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    status: str = "working"
    payload: Message | None = None  # the call's response, or an error standing for it
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None
    released: bool = False
    # Told of every change the client may see (a question, an answer, the end).
    on_change: Callable[[], None] | None = None
    # Told once the call's answer is in: the gateway keeps it and lets the lane go.
    on_settled: Callable[[], None] | None = None

    def changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    @property
    def pooled_version(self) -> Version:
        return self.exchange.pooled.version

    def input_requests(self) -> dict[str, Message]:
        return {key: q.input_request for key, q in self.exchange.pending.items()}

    def pending(self) -> dict[str, tuple[Message, Message]]:
        """Each unanswered question: the upstream's request, what the client sees."""
        return {key: (q.request, q.input_request) for key, q in self.exchange.pending.items()}

    def fields(self, poll_ms: int, ttl_ms: int) -> Message:
        """The extension's Task fields of this task."""
        return {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.updated_at,
            "ttlMs": ttl_ms,
            "pollIntervalMs": poll_ms,
        }

    async def run(self) -> None:
        """Read the call's events until its response: questions are kept for
        the client, anything else the gateway answers itself."""
        ex = self.exchange
        while True:
            event = await ex.events.get()
            if isinstance(event, ServerRequest):
                await self._question(event)
                continue
            if isinstance(event, StreamEnded):
                why = event.error or "the upstream closed the stream without answering"
                self._settle("failed", {"error": {"code": -32603, "message": why}})
                return
            if "method" not in event and event.get("id") == ex.upstream_id:
                ex.upstream_finished()
                failed = isinstance(event.get("error"), dict)
                self._settle("failed" if failed else "completed", event)
                return

    async def _question(self, event: ServerRequest) -> None:
        method = event.message.get("method")
        pending = len(self.exchange.pending)
        reply = unshown_reply(event.message, self.client_capabilities, pending)
        if reply is not None:
            with contextlib.suppress(UpstreamError):
                await event.reply(reply)
            return
        key = self.exchange.keys.assign(str(method), event.message.get("params"))
        shown = mrtr_results.input_request(event.message, self.pooled_version, self.client_version)
        self.exchange.pending[key] = Question(key, event.message, shown, event.reply)
        self.updated_at = now_iso()
        self.changed()

    def _settle(self, status: str, payload: Message) -> None:
        self.status = status
        self.payload = payload
        self.updated_at = now_iso()
        self.settled.set()
        self.changed()
        if self.on_settled is not None:
            self.on_settled()

    async def answer(self, key: str, translated: Message) -> None:
        question = self.exchange.pending.pop(key, None)
        if question is None or question.reply is None:
            return
        upstream_sent()
        await question.reply(mrtr_results.response(question.request, translated))
        self.updated_at = now_iso()
        self.changed()

    async def cancel(self) -> None:
        if self.settled.is_set():
            return
        await self.exchange.abandon("the client cancelled the task", cancel_first=True)
        self._settle("cancelled", {})

    async def release(self) -> None:
        """The end of the task for the gateway, on every path: the call abandoned
        if still running, the lane given back (reusable only after an answer)."""
        if self.released:
            return
        self.released = True
        runner, self.runner = self.runner, None
        if runner is not None and not runner.done():
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        answered = self.status == "completed" or (
            self.status == "failed" and self.payload is not None and "id" in self.payload
        )
        try:
            if not self.exchange.ended:
                await self.exchange.abandon("the task expired or the gateway stopped")
            else:
                await self.exchange.close_stream(answered=answered)
        finally:
            self.hold.release()
            await self.lanes.release(self.lane, reusable=answered)


async def send(lane: Lane, exchange: LiveExchange, outbound: Message) -> None:
    """Send the call on the lane and start pumping its answer stream."""
    upstream_id = lane.pooled.next_id()
    message = {**outbound, "id": upstream_id}
    params = message.get("params")
    if isinstance(params, dict) and isinstance(params.get("_meta"), dict):
        # A progress token belongs to the client's request, which ends at once.
        meta = {k: v for k, v in params["_meta"].items() if k != "progressToken"}
        message["params"] = {**params, "_meta": meta} if meta else _without_meta(params)
    upstream_sent()
    stream = await lane.pooled.session.request(message)
    exchange.attach(upstream_id, stream)


def _without_meta(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k != "_meta"}


def start(task: OwnTask) -> OwnTask:
    task.runner = asyncio.get_running_loop().create_task(task.run())
    log.info("task_started_by_gateway")
    return task
