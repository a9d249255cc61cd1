"""One upstream task the gateway follows: its pinned session, its questions,
its payload.

A 2025-11-25 server delivers a task's questions (`elicitation/create`,
`sampling/createMessage`, `roots/list` with the related-task `_meta`) only on
an open `tasks/result` stream, and its payload as that request's response.
Such a stream holds an upstream connection for as long as it is open, so the
watcher holds one only when it is needed: it polls `tasks/get` at the
upstream's `pollInterval` (kept within MIN_POLL_S..MAX_POLL_S) while the task
works, and opens `tasks/result` once the task is `input_required` (then held,
re-opened if cut, until the payload) or terminal (answered at once). A
`required` tool whose caller can answer is watched on a stream from the start,
as it will ask at once (the input round before the task, app/tasks/bridge.py).
Streams held for questions count against the tasks' connection bound
(app/tasks/bounds.py); without room the task is polled until there is some.

The task's session is leased from the pool for as long as the task lives: a
2025-11-25 task id is valid only on the session that created it (the spec
binds a task to its authorization context and lets a server bind it more
narrowly; the Python SDK 1.x binds it to the session), and a leased session is
never reclaimed or reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from app import jsonio
from app.call import Message
from app.mrtr import capabilities as mrtr_capabilities
from app.mrtr import results as mrtr_results
from app.mrtr.keys import KeyAssigner
from app.tasks.bounds import Hold, TaskBounds
from app.tasks.upstream import ask, request_message
from app.upstream.errors import SessionExpired, UpstreamError
from app.upstream.sessions.listener import default_answer
from app.upstream.sessions.pool import PooledSession
from translators._base import INPUT_REQUEST_METHODS
from translators.registry import Version

log = structlog.get_logger("mcp_shim.tasks")

# A task's questions waiting for an answer at once; more are refused upstream
# (-32603), so that one task cannot grow the gateway's memory without bound.
MAX_QUESTIONS = 32
# Between two tasks/result streams after one was cut (not after an answer).
REOPEN_PAUSE_S = 0.5
# tasks/result streams one task may open (or polls that may fail) before it is
# given up as lost.
MAX_REOPENS = 100
# The poll interval an upstream may ask for, bounded: no faster (a poll costs a
# request), no slower (the client's own tasks/get also wakes the watcher).
MIN_POLL_S = 0.05
MAX_POLL_S = 5.0
TERMINAL = frozenset({"completed", "failed", "cancelled"})


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
    hold: Hold  # its pin on the session, against the tasks' bounds
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
    # Where the stream held for questions is counted; None: not counted.
    bounds: TaskBounds | None = None
    poll_s: float = 1.0  # the upstream's pollInterval, bounded
    stream_at_once: bool = False  # watched on a stream from the start
    # Set to poll at once (a client's tasks/get saw the task move on).
    wake: asyncio.Event = field(default_factory=asyncio.Event)

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
        """Follow the task until its payload arrives: polled while it works, on a
        tasks/result stream while it has questions or once it is over."""
        stream = self.stream_at_once
        failures = 0
        while failures < MAX_REOPENS:
            try:
                no_room = False
                if stream:
                    done = await self._stream_if_room(counted=True)
                    if done:
                        return
                    no_room = done is None
                    if done is False:  # cut: polled again before another stream
                        failures += 1
                        await asyncio.sleep(REOPEN_PAUSE_S)
                status = await self._poll()
                if status is None:
                    self._settle_lost("the upstream no longer knows this task")
                    return
                if status in TERMINAL:
                    # Answered at once: a request like the poll itself, not counted.
                    if await self._stream_if_room(counted=False):
                        return
                    failures += 1
                    await asyncio.sleep(REOPEN_PAUSE_S)
                    continue
                stream = status == "input_required"
                if not stream or no_room:
                    await self._pause()
            except SessionExpired:
                self._settle_lost("the upstream session of this task expired")
                return
            except UpstreamError as exc:
                log.info("task_poll_failed", error=exc.message)
                failures += 1
                await asyncio.sleep(REOPEN_PAUSE_S)
        self._settle_lost("the upstream's tasks/get and tasks/result kept failing")

    async def _stream_if_room(self, *, counted: bool) -> bool | None:
        """The payload read on a tasks/result stream: True once in, False if the
        stream was cut, None if the tasks' connection bound left no room."""
        bounds = self.bounds if counted else None
        if bounds is not None and bounds.take_connections(self.owner) is not None:
            return None
        try:
            return await self._one_stream()
        except SessionExpired:
            raise
        except UpstreamError as exc:
            log.info("task_result_stream_cut", error=exc.message)
            return False
        finally:
            if bounds is not None:
                bounds.give_connections(self.owner)

    async def _poll(self) -> str | None:
        """The upstream's status of the task (its pollInterval kept); None for an
        error answer: the upstream no longer knows the task."""
        reply = await ask(self.pooled, "tasks/get", {"taskId": self.upstream_id})
        task = reply.get("result")
        if not isinstance(task, dict):
            return None
        self.poll_s = poll_interval_s(task.get("pollInterval"), self.poll_s)
        status = task.get("status")
        return status if isinstance(status, str) else "working"

    async def _pause(self) -> None:
        """One poll interval, cut short by `wake` (set before it began, too)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.poll_s):
                await self.wake.wait()
        self.wake.clear()

    def _settle_lost(self, why: str) -> None:
        if self.settled.is_set():
            return
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


def poll_interval_s(interval_ms: Any, default_s: float) -> float:
    """The upstream's pollInterval (ms) in seconds, kept within MIN_POLL_S..MAX_POLL_S;
    `default_s` when it names none."""
    if (
        isinstance(interval_ms, int | float)
        and not isinstance(interval_ms, bool)
        and interval_ms > 0
    ):
        return float(min(max(interval_ms / 1000, MIN_POLL_S), MAX_POLL_S))
    return default_s


def started(task: LiveTask) -> LiveTask:
    task.watcher = asyncio.get_running_loop().create_task(task.watch())
    return task


__all__ = ["LiveTask", "Question", "poll_interval_s", "started"]
