"""One upstream task the gateway follows: its pinned session, its questions,
its payload.

A 2025-11-25 server delivers a task's questions (`elicitation/create`,
`sampling/createMessage`, `roots/list` with the related-task `_meta`) only on
an open `tasks/result` stream, and its payload as that request's response. The
watcher holds one such stream open for the task's whole life (re-opened if the
upstream or a proxy cuts it), files each question under a key of the
gateway's choosing, and keeps the payload once it comes. The task's session is
leased from the pool for as long as the task lives: a 2025-11-25 task id is
valid only on the session that created it, and a leased session is never
reclaimed or reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from app import jsonio
from app.mrtr import capabilities as mrtr_capabilities
from app.mrtr import results as mrtr_results
from app.mrtr.keys import KeyAssigner
from app.tasks.upstream import request_message
from app.upstream.base import Message
from app.upstream.errors import SessionExpired, UpstreamError
from app.upstream.listener import default_answer
from app.upstream.pool import PooledSession
from translators._base import INPUT_REQUEST_METHODS
from translators.registry import Version

log = structlog.get_logger("mcp_shim.tasks")

# A task's questions waiting for an answer at once; more are refused upstream
# (-32603), so that one task cannot grow the gateway's memory without bound.
MAX_QUESTIONS = 32
# Between two tasks/result streams after one was cut (not after an answer).
REOPEN_PAUSE_S = 0.5
# tasks/result streams one task may open before it is given up as lost.
MAX_REOPENS = 100


@dataclass
class Question:
    request: Message  # the upstream's JSON-RPC request
    shown: Message  # the InputRequest as the client sees it


@dataclass(eq=False)
class LiveTask:
    task_id: str  # the sealed id the client sees
    owner: str  # the caller's credential hash: the store's owner
    upstream_id: str
    pooled: PooledSession
    client_version: Version
    deadline: float  # monotonic: the task's TTL
    max_payload_bytes: int
    client_capabilities: Mapping[str, Any]  # of the call that created the task
    questions: dict[str, Question] = field(default_factory=dict)
    keys: KeyAssigner = field(default_factory=KeyAssigner)
    payload: Message | None = None  # the tasks/result response
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    watcher: asyncio.Task[None] | None = None
    released: bool = False
    # Set while the task's first question is an input round the client has not
    # answered yet (the task not shown to it): the round's deadline, monotonic.
    hidden_until: float | None = None
    # The id of the tasks/result request whose stream is open, if any.
    _stream_id: int | None = None
    # Told of every change the client may see (a question, an answer, the end).
    on_change: Callable[[], None] | None = None
    # Told once the payload is in: the gateway keeps it and lets the session go.
    on_settled: Callable[[], None] | None = None

    def changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def input_requests(self) -> dict[str, Message]:
        return {key: q.shown for key, q in self.questions.items()}

    def pending(self) -> dict[str, tuple[Message, Message]]:
        """Each unanswered question: the upstream's request, what the client sees."""
        return {key: (q.request, q.shown) for key, q in self.questions.items()}

    @property
    def pooled_version(self) -> Version:
        return self.pooled.version

    async def watch(self) -> None:
        """Hold the task's tasks/result stream until its payload arrives."""
        for _ in range(MAX_REOPENS):
            try:
                if await self._one_stream():
                    return
            except SessionExpired:
                self._settle_lost("the upstream session of this task expired")
                return
            except UpstreamError as exc:
                log.info("task_result_stream_cut", error=exc.message)
            await asyncio.sleep(REOPEN_PAUSE_S)
        self._settle_lost("the upstream's tasks/result stream kept failing")

    def _settle_lost(self, why: str) -> None:
        log.warning("task_lost", reason=why)
        self.payload = {"error": {"code": -32603, "message": f"Internal error: {why}"}}
        self.settled.set()
        self.changed()
        if self.on_settled is not None:
            self.on_settled()

    async def _one_stream(self) -> bool:
        message = request_message(self.pooled, "tasks/result", {"taskId": self.upstream_id})
        self._stream_id = message["id"]
        exchange = await self.pooled.session.request(message)
        answered = False
        try:
            async for reply in exchange:
                if "method" in reply:
                    if "id" in reply:
                        await self._question(reply)
                    continue
                if reply.get("id") == message["id"]:
                    answered = True
                    self._payload(reply)
                    return True
        finally:
            await exchange.aclose(drain=answered)
        return False

    def _payload(self, reply: Message) -> None:
        size = len(jsonio.dumps(reply.get("result") or reply.get("error")))
        if size > self.max_payload_bytes:
            log.warning("task_payload_too_large", limit=self.max_payload_bytes)
            reply = {
                "error": {
                    "code": -32603,
                    "message": "Internal error: the task's result exceeds "
                    f"{self.max_payload_bytes} bytes (MCP_SHIM_MAX_TASK_RESULT_BYTES)",
                }
            }
        self.payload = reply
        self.settled.set()
        self.changed()
        if self.on_settled is not None:
            self.on_settled()

    async def _question(self, request: Message) -> None:
        method = request.get("method")
        reply = unshown_reply(request, self.client_capabilities, len(self.questions))
        if reply is not None:
            with contextlib.suppress(UpstreamError):
                await self.pooled.session.respond(reply)
            return
        key = self.keys.assign(str(method), request.get("params"))
        shown = mrtr_results.input_request(request, self.pooled.version, self.client_version)
        self.questions[key] = Question(request, shown)
        self.asked.set()
        self.changed()

    async def answer(self, key: str, translated: Message) -> None:
        """Post the client's answer (in the upstream's version) to question `key`."""
        question = self.questions.pop(key, None)
        if question is not None:
            await self.pooled.session.respond(mrtr_results.response(question.request, translated))
            self.changed()

    async def stop(self) -> None:
        """Stop watching (the task is over for the gateway): the stream closes."""
        watcher, self.watcher = self.watcher, None
        if watcher is not None and not watcher.done():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            if self._stream_id is not None and self.payload is None:
                # The upstream stops waiting to deliver (the task itself goes on
                # or was cancelled apart: cancelling tasks/result does not cancel it).
                note = {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": self._stream_id, "reason": "no longer watched"},
                }
                with contextlib.suppress(UpstreamError):
                    await self.pooled.session.notify(note)
        for question in self.questions.values():
            with contextlib.suppress(UpstreamError):
                await self.pooled.session.respond(
                    mrtr_results.abandon_reply(question.request, timed_out=True)
                )
        self.questions.clear()


def unshown_reply(
    request: Message, capabilities: Mapping[str, Any], pending: int
) -> Message | None:
    """The gateway's own answer to a server request during a task, or None when
    it is a question for the client: `ping` and the like are answered, a
    question the caller declared no capability for is refused (as the MRTR
    bridge refuses it), and so is one beyond MAX_QUESTIONS pending."""
    method = request.get("method")
    if method not in INPUT_REQUEST_METHODS:
        return default_answer(request)
    missing = mrtr_capabilities.missing_for(method, request.get("params"), capabilities)
    if missing is not None:
        return mrtr_results.refusal_reply(request, missing)
    if pending >= MAX_QUESTIONS:
        return mrtr_results.error_response(
            request, -32603, f"too many questions pending for this task (at most {MAX_QUESTIONS})"
        )
    return None


def started(task: LiveTask) -> LiveTask:
    task.watcher = asyncio.get_running_loop().create_task(task.watch())
    return task


__all__ = ["LiveTask", "Question", "started"]
