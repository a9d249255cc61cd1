"""A legacy (2025-11-25) client's tasks on a modern upstream with the
`io.modelcontextprotocol/tasks` extension (SEP-2663); docs/tasks.md, "Legacy clients".

The client speaks 2025-11-25's experimental tasks; the upstream the extension.
`LegacyTasks` (one per legacy session, `ModernSession`) maps one onto the other:

- `tools/call` with a `task` param: sent with the extension declared in the
  request's `_meta` client capabilities (the upstream alone decides; a legacy
  `task` param is never obeyed there); its flat `CreateTaskResult` comes back as
  `{task: {..., ttl, pollInterval}}`. An MRTR round before the task exists is
  served as server requests, as any call's (`CallRounds`). An upstream that
  answers at once instead leaves a completed task kept here.
- `tasks/get`: the upstream's `tasks/get`, fields renamed, the inlined result,
  error and input requests left for `tasks/result`.
- `tasks/result` (blocking in 2025-11-25): the gateway polls the upstream's
  `tasks/get` at its `pollIntervalMs` (clamped) until the task is terminal,
  then answers with the inlined result (related-task `_meta` added) or the
  JSON-RPC error. Questions of a task in `input_required` go to the client as
  server requests on this stream (related-task `_meta` in their params); each
  answer goes upstream with `tasks/update`.
- `tasks/list`: the upstream has none (-32601); answered from this session's
  record of the tasks it created, each one's state from the upstream's
  `tasks/get`. The record is bounded (`MCP_SHIM_LEGACY_TASKS_PER_SESSION`,
  oldest forgotten first); a task id not in it is unknown here (-32602), so a
  session reaches only its own tasks.
- `tasks/cancel`: 2025-11-25 refuses a terminal task with -32602 and answers
  the task, the extension acks bare: `tasks/get` first, then `tasks/cancel`,
  then `tasks/get` for the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import structlog

from app.call import Message
from app.quoting import quoted
from app.upstream.errors import UpstreamError
from app.upstream.modern.list_cache import CacheKey
from app.upstream.modern.rounds import INPUT_METHODS, MAX_ROUNDS, CallRounds, RoundsSession
from app.upstream.modern.upstream import ModernHttpUpstream
from translators import legacy_tasks as shapes
from translators import translate

log = structlog.get_logger("mcp_shim.tasks")

TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})
# The gateway polls a task for `tasks/result` at the upstream's pollIntervalMs,
# kept within these bounds (a server that asks for 1 ms is not obeyed).
POLL_MIN_S = 0.05
POLL_MAX_S = 5.0
POLL_DEFAULT_S = 0.5
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _error(call_id: Any, code: int, message: str, data: Any = None) -> Message:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": call_id, "error": error}


def _poll_interval(task: Mapping[str, Any]) -> float:
    value = task.get("pollIntervalMs")
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        return POLL_DEFAULT_S
    return min(POLL_MAX_S, max(POLL_MIN_S, value / 1000))


class _Answered:
    """A task created by a call that the upstream answered at once: the legacy
    client asked for a task, so it gets one, completed, kept here."""

    def __init__(self, task: Message, result: Message) -> None:
        self.task = task
        self.result = result
        ttl = task.get("ttl")
        # Kept for the ttl the client asked for (2025-11-25: null is unlimited;
        # the session's record bounds those).
        self.expires = time.monotonic() + ttl / 1000 if isinstance(ttl, int) else None

    def expired(self) -> bool:
        return self.expires is not None and time.monotonic() >= self.expires


class LegacyTasks:
    """One legacy session's tasks on the upstream: the bridge and its record."""

    def __init__(self, session: RoundsSession, upstream: ModernHttpUpstream, limit: int) -> None:
        self._session = session
        self._upstream = upstream
        self._limit = max(1, limit)
        # The tasks this session created, oldest first; a value is the task kept
        # here when the upstream answered without one.
        self._record: OrderedDict[str, _Answered | None] = OrderedDict()
        self._ids = itertools.count(1)

    @property
    def session(self) -> RoundsSession:
        return self._session

    @staticmethod
    def handles(message: Message) -> bool:
        method = message.get("method")
        if method in TASK_METHODS:
            return True
        params = message.get("params")
        return method == "tools/call" and isinstance(params, dict) and "task" in params

    def request(
        self, message: Message, cache_key: CacheKey | None = None
    ) -> TaskCall | TaskRequest:
        if message.get("method") == "tools/call":
            return TaskCall(self._session, self._upstream, message, self, cache_key)
        return TaskRequest(self, message)

    # -- the record ----------------------------------------------------------

    def created(self, task_id: str, answered: _Answered | None = None) -> None:
        self._record[task_id] = answered
        self._record.move_to_end(task_id)
        while len(self._record) > self._limit:
            self._record.popitem(last=False)
            log.info("legacy_task_forgotten", reason="record_full", limit=self._limit)

    def answered_at_once(self, result: Message, ttl: Any) -> Message:
        stamp = _now()
        task: Message = {
            "taskId": f"mcp-shim-task-{uuid.uuid4().hex}",
            "status": "completed",
            "createdAt": stamp,
            "lastUpdatedAt": stamp,
            "ttl": ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None,
        }
        self.created(task["taskId"], _Answered(task, result))
        return task

    def known(self, task_id: Any) -> bool:
        if not isinstance(task_id, str) or task_id not in self._record:
            return False
        kept = self._record[task_id]
        if kept is not None and kept.expired():
            del self._record[task_id]
            return False
        return True

    def kept(self, task_id: str) -> _Answered | None:
        return self._record.get(task_id)

    def task_ids(self) -> list[str]:
        return list(self._record)

    def forget(self, task_id: str) -> None:
        self._record.pop(task_id, None)

    # -- the upstream's tasks/* ---------------------------------------------

    async def upstream(self, method: str, params: Message) -> tuple[Message | None, Message | None]:
        """One `tasks/*` request upstream, the extension declared: (result, error),
        the error already in the client's version."""
        session = self._session
        message: Message = {
            "jsonrpc": "2.0",
            "id": f"mcp-shim-task-{next(self._ids)}",
            "method": method,
            "params": params,
        }
        message = shapes.declaring_extension(session.upgrade(message))
        headers = session.headers_for(message)
        exchange = await self._upstream.request(message, headers)
        answer: Message | None = None
        try:
            async for reply in exchange:
                if "method" not in reply and reply.get("id") == message["id"]:
                    answer = reply
                    break
        finally:
            await exchange.aclose(drain=answer is not None)
        if answer is None:
            return None, {
                "code": INTERNAL_ERROR,
                "message": f"the upstream did not answer {method}",
            }
        error = answer.get("error")
        if isinstance(error, dict):
            return None, translate.error(error, session.modern, session.version, method)
        result = answer.get("result")
        return (result if isinstance(result, dict) else {}), None


class TaskCall(CallRounds):
    """A legacy `tools/call` with `task`: the call with the extension declared, its
    `CreateTaskResult` (or an answer at once) as 2025-11-25's `{task: ...}`."""

    def __init__(
        self,
        session: RoundsSession,
        upstream: ModernHttpUpstream,
        message: Message,
        tasks: LegacyTasks,
        cache_key: CacheKey | None = None,
    ) -> None:
        super().__init__(session, upstream, message, cache_key)
        self._tasks = tasks
        params = message.get("params")
        task = params.get("task") if isinstance(params, dict) else None
        self._ttl = task.get("ttl") if isinstance(task, dict) else None

    def _upgraded(self) -> Message:
        return shapes.declaring_extension(super()._upgraded())

    def _down(self, message: Message) -> Message | None:
        result = message.get("result")
        if "method" in message or "error" in message or not isinstance(result, dict):
            return super()._down(message)
        if shapes.is_create_task_result(result):
            self._tasks.created(result["taskId"])
            legacy = shapes.create_task_result_down(result)
        else:
            down = super()._down(message)
            payload = down.get("result") if down is not None else None
            task = self._tasks.answered_at_once(
                payload if isinstance(payload, dict) else {}, self._ttl
            )
            legacy = {"task": task}
        return {"jsonrpc": "2.0", "id": self.client_id, "result": legacy}


class TaskRequest:
    """A legacy `tasks/get`, `tasks/result`, `tasks/list` or `tasks/cancel`, as an
    exchange of the session: what the gateway answers, and for `tasks/result` the
    task's questions to the client on the way."""

    last_event_id: str | None = None

    def __init__(self, tasks: LegacyTasks, message: Message) -> None:
        self._tasks = tasks
        self._session = tasks.session
        self.client_id = message.get("id")
        self._method = str(message.get("method"))
        params = message.get("params")
        self._params: Message = params if isinstance(params, dict) else {}
        self._answers: asyncio.Queue[Message] = asyncio.Queue()
        self._cancel = asyncio.Event()
        self._messages = self._run()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._messages

    def answered(self, message: Message) -> None:
        self._answers.put_nowait(message)

    async def cancel(self) -> None:
        self._cancel.set()

    async def aclose(self, drain: bool = False) -> None:
        self._cancel.set()
        with contextlib.suppress(Exception):
            await self._messages.aclose()
        self._session.forget(self)

    def _answer(self, result: Message) -> Message:
        return {"jsonrpc": "2.0", "id": self.client_id, "result": result}

    def _failed(self, error: Message) -> Message:
        return {"jsonrpc": "2.0", "id": self.client_id, "error": error}

    async def _run(self) -> AsyncGenerator[Message, None]:
        try:
            if self._method == "tasks/list":
                yield await self._list()
                return
            task_id = self._params.get("taskId")
            if not self._tasks.known(task_id):
                # Never created by this session, or forgotten from its record.
                log.info("legacy_task_unknown", method=self._method)
                yield _error(self.client_id, INVALID_PARAMS, f"Unknown task: {quoted(task_id)}")
                return
            assert isinstance(task_id, str)
            kept = self._tasks.kept(task_id)
            if kept is not None:
                yield self._from_kept(kept)
                return
            if self._method == "tasks/get":
                yield await self._get(task_id)
            elif self._method == "tasks/cancel":
                yield await self._cancel_task(task_id)
            else:
                async with contextlib.aclosing(self._result(task_id)) as steps:
                    async for step in steps:
                        yield step
        except UpstreamError:
            if not self._cancel.is_set():
                raise
        finally:
            self._session.forget(self)

    def _from_kept(self, kept: _Answered) -> Message:
        if self._method == "tasks/result":
            return self._answer(shapes.task_payload(kept.result, kept.task["taskId"]))
        if self._method == "tasks/cancel":
            return _error(self.client_id, INVALID_PARAMS, "Cannot cancel a task that is completed")
        return self._answer(dict(kept.task))

    async def _get(self, task_id: str) -> Message:
        detailed, error = await self._tasks.upstream("tasks/get", {"taskId": task_id})
        if error is not None:
            return self._failed(error)
        assert detailed is not None
        return self._answer(shapes.get_task_result_down(detailed))

    async def _cancel_task(self, task_id: str) -> Message:
        detailed, error = await self._tasks.upstream("tasks/get", {"taskId": task_id})
        if error is not None:
            return self._failed(error)
        assert detailed is not None
        status = detailed.get("status")
        if status in shapes.TERMINAL:
            # 2025-11-25 basic/utilities/tasks: a terminal task's cancel is -32602.
            return _error(self.client_id, INVALID_PARAMS, f"Cannot cancel a task that is {status}")
        _, error = await self._tasks.upstream("tasks/cancel", {"taskId": task_id})
        if error is not None:
            return self._failed(error)
        return await self._get(task_id)

    async def _list(self) -> Message:
        ids = self._tasks.task_ids()
        tasks: list[Message] = []
        found = await asyncio.gather(
            *(self._listed(task_id) for task_id in ids), return_exceptions=True
        )
        for task_id, item in zip(ids, found, strict=True):
            if isinstance(item, BaseException):
                if isinstance(item, asyncio.CancelledError):
                    raise item
                continue  # not reachable now: left out of this page, kept in the record
            if item is None:
                self._tasks.forget(task_id)  # the upstream forgot it (its TTL)
                continue
            tasks.append(item)
        return self._answer({"tasks": tasks})

    async def _listed(self, task_id: str) -> Message | None:
        if not self._tasks.known(task_id):
            return None  # a task kept here, past its ttl
        kept = self._tasks.kept(task_id)
        if kept is not None:
            return dict(kept.task)
        detailed, error = await self._tasks.upstream("tasks/get", {"taskId": task_id})
        if error is not None or detailed is None:
            return None
        return shapes.get_task_result_down(detailed)

    async def _result(self, task_id: str) -> AsyncGenerator[Message, None]:
        """Poll until terminal; the task's questions asked on the way."""
        # our server request's id -> the upstream's input key and the question's method
        asked: dict[str, tuple[str, str]] = {}
        sent: set[str] = set()
        while not self._cancel.is_set():
            detailed, error = await self._tasks.upstream("tasks/get", {"taskId": task_id})
            if error is not None:
                yield self._failed(error)
                return
            assert detailed is not None
            status = detailed.get("status")
            if status in shapes.TERMINAL:
                yield self._terminal(task_id, detailed)
                return
            if status == "input_required":
                async with contextlib.aclosing(self._ask(task_id, detailed, asked, sent)) as asks:
                    async for ask in asks:
                        yield ask
                        if "error" in ask:
                            return
            refusal = await self._deliver(task_id, asked, _poll_interval(detailed))
            if refusal is not None:
                yield refusal
                return

    def _terminal(self, task_id: str, detailed: Message) -> Message:
        session = self._session
        status = detailed.get("status")
        if status == "completed" and isinstance(detailed.get("result"), dict):
            payload = translate.result(
                detailed["result"], "tools/call", session.modern, session.version
            )
            return self._answer(shapes.task_payload(payload, task_id))
        error = detailed.get("error")
        if status == "failed" and isinstance(error, dict):
            down = translate.error(error, session.modern, session.version, "tools/call")
            return self._failed(down)
        return _error(self.client_id, INTERNAL_ERROR, f"The task was {status}; it has no result")

    async def _ask(
        self, task_id: str, detailed: Message, asked: dict[str, tuple[str, str]], sent: set[str]
    ) -> AsyncGenerator[Message, None]:
        session = self._session
        requests = detailed.get("inputRequests")
        for key, request in (requests if isinstance(requests, dict) else {}).items():
            if key in sent or not isinstance(request, dict):
                continue
            method = request.get("method")
            if not isinstance(method, str) or not session.declared(method):
                kind = INPUT_METHODS.get(str(method), str(method))
                yield _error(
                    self.client_id,
                    INTERNAL_ERROR,
                    f"The task needs the client's {kind} capability to answer its question, "
                    "and the client did not declare it at initialize",
                    {"requiredCapability": kind},
                )
                return
            if len(sent) >= MAX_ROUNDS:
                yield _error(
                    self.client_id,
                    INTERNAL_ERROR,
                    f"the task asked more than {MAX_ROUNDS} questions; tasks/result was ended",
                )
                return
            sent.add(key)
            ident = session.next_input_id(self)
            asked[ident] = (key, method)
            question: Message = {"jsonrpc": "2.0", "id": ident, "method": method}
            question["params"] = request.get("params")
            legacy = translate.request(question, session.modern, session.version)
            yield shapes.related_request(legacy, task_id)

    async def _deliver(
        self, task_id: str, asked: dict[str, tuple[str, str]], wait: float
    ) -> Message | None:
        """Wait up to `wait` for the client's answers; each goes upstream at once
        with `tasks/update`. A refusal for the client ends `tasks/result`."""
        try:
            answer = await asyncio.wait_for(self._answers.get(), wait)
        except TimeoutError:
            return None
        while True:
            entry = asked.pop(answer.get("id"), None)  # type: ignore[arg-type]
            if entry is not None:
                refusal = await self._update(task_id, answer, *entry)
                if refusal is not None:
                    return refusal
            if self._answers.empty():
                return None
            answer = self._answers.get_nowait()

    async def _update(self, task_id: str, answer: Message, key: str, method: str) -> Message | None:
        session = self._session
        result = answer.get("result")
        if "error" in answer or not isinstance(result, dict):
            err = answer.get("error") if isinstance(answer.get("error"), dict) else {}
            return _error(
                self.client_id,
                INTERNAL_ERROR,
                "The client answered the task's question with an error; the task still "
                "waits for an answer",
                {"inputKey": key, "clientError": err},
            )
        response = translate.result(result, method, session.version, session.modern)
        _, error = await self._tasks.upstream(
            "tasks/update", {"taskId": task_id, "inputResponses": {key: response}}
        )
        return self._failed(error) if error is not None else None
