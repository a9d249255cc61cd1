"""The tasks extension for modern clients in front of a 2025-11-25 server.

What a 2026-07-28 client gets (docs/tasks.md): the extension
`io.modelcontextprotocol/tasks` in `server/discover` when the upstream runs
tasks for `tools/call`, each tool's `execution.taskSupport`, and:

* `tools/call` of a task-supporting tool from a caller that declares the
  extension (in its request's client capabilities) becomes the upstream's
  task: sent with the 2025-11-25 `task` param, answered with the extension's
  flat `CreateTaskResult` under a sealed task id (app/tasks/ids.py). A caller
  that does not declare it never gets a task: a `required` tool is -32021, an
  optional one runs synchronously. A `task` param the client sent is never
  obeyed (stripped).
* `tasks/get`, `tasks/update`, `tasks/cancel` (-32021 without the
  extension), answered from the upstream's `tasks/get`, the payload of its
  `tasks/result` inlined once terminal, its questions as `inputRequests`.

* A `required` tool that asks at once, for a caller that can answer: an
  input round before the task is shown (tasks-mrtr-composition).
* The tools of `MCP_SHIM_TASK_TOOLS`, for a server without tasks: tasks the
  gateway runs itself (app/tasks/own.py).
* `notifications/tasks` on the owner's `subscriptions/listen` streams
  (app/tasks/watch.py).

Records go to the task store (app/tasks/store.py) under the caller's
credential hash: its TTL, and the bound on live tasks per credential. The
upstream task itself lives on one upstream session of this replica
(app/tasks/live.py); a request for it on another replica is relayed here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from app import jsonio
from app.call import CallState, Outgoing
from app.fronts.modern.checks import ModernCall
from app.mrtr import answers as mrtr_answers
from app.mrtr import capabilities as mrtr_capabilities
from app.mrtr.exchange import LiveExchange
from app.mrtr.forwarding import ReplicaForwarder
from app.mrtr.lanes import Lane, Lanes
from app.mrtr.state import Sealer
from app.quoting import quoted
from app.rejections import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY,
    Rejection,
)
from app.replicas import reachable
from app.subscriptions.mailbox import Mailbox
from app.tasks import ids, own
from app.tasks.answers import payload_in, payload_up, upstream_answer
from app.tasks.bounds import UNBOUNDED, Hold, Refusal, TaskBounds, TaskLimits, refusal_reply
from app.tasks.live import LiveTask, poll_interval_s, started
from app.tasks.shutdown import LiveTask as Running
from app.tasks.shutdown import WindDown, wind_down
from app.tasks.store import (
    MAX_RECORD_SETTING,
    Record,
    TaskLimitReached,
    TaskStore,
    TaskStoreUnavailable,
    record_refusal,
)
from app.tasks.upstream import ask
from app.tasks.watch import Watchers
from app.upstream.base import Message
from app.upstream.errors import SessionExpired, UpstreamError
from app.upstream.pool import PooledSession, SessionPool, credential_hash
from translators import tasks as wire
from translators import translate

log = structlog.get_logger("mcp_shim.tasks")

METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
# How long tasks/get waits for a payload the upstream already reported terminal.
PAYLOAD_WAIT_S = 2.0
REAP_EVERY_S = 1.0


@dataclass(frozen=True, slots=True)
class TaskSettings:
    ttl_ms: int  # asked of the upstream, and the record's TTL if it names none
    max_per_owner: int  # live tasks per credential (the store enforces it too)
    poll_ms: int  # pollIntervalMs when the upstream names none
    max_result_bytes: int
    replica: str  # this replica's name in task ids
    # An input round before the task is shown (tasks-mrtr-composition): how long
    # a new task of a `required` tool is watched for a first question, how long
    # later questions are gathered with it, how long the round waits for its retry.
    round_wait_s: float = 0.5
    quiet_s: float = 0.05
    round_ttl_s: float = 120.0
    # MCP_SHIM_TASK_TOOLS: tools the gateway runs as tasks itself (app/tasks/own.py).
    tools: tuple[str, ...] = ()
    # What tasks may hold of the upstream (app/tasks/bounds.py).
    limits: TaskLimits = UNBOUNDED


@dataclass(frozen=True, slots=True)
class RunAsTask:
    mode: str  # the tool's taskSupport: optional or required


@dataclass(frozen=True, slots=True)
class Resume:
    task_id: str  # the task whose input round this retry answers


def missing_extension(call_id: Any) -> Rejection:
    return Rejection(
        MISSING_CLIENT_CAPABILITY,
        f"Missing required client capability: this request needs the {wire.EXTENSION} "
        "extension declared in _meta['io.modelcontextprotocol/clientCapabilities'].extensions",
        call_id,
        data={"requiredCapabilities": {"extensions": {wire.EXTENSION: {}}}},
    )


def not_found(call_id: Any) -> Rejection:
    return Rejection(
        INVALID_PARAMS,
        "Invalid params: task not found (unknown, expired, or created with other credentials)",
        call_id,
    )


def _reply(rejection: Rejection, state: CallState, outcome: str) -> Outgoing:
    state.outcome = outcome
    return Outgoing(rejection.to_message(), True, rejection.http_status)


def _result(call: ModernCall, result: Message, state: CallState) -> Outgoing:
    state.outcome = "ok"
    return Outgoing({"jsonrpc": "2.0", "id": call.id, "result": result}, True)


class TaskBridge:
    def __init__(
        self,
        pool: SessionPool,
        store: TaskStore,
        sealer: Sealer,
        settings: TaskSettings,
        lanes: Lanes | None = None,
        forwarder: ReplicaForwarder | None = None,
    ) -> None:
        self._pool = pool
        # The hop to the replica running a task (the MRTR bridge's, app/replicas.py).
        self._forwarder = forwarder
        # The MRTR bridge's lanes, for the tasks the gateway runs itself.
        self._lanes = lanes
        self._own: dict[str, own.OwnTask] = {}
        self._store = store
        self._sealer = sealer
        self._settings = settings
        self._live: dict[str, LiveTask] = {}
        self.bounds = TaskBounds(settings.limits)
        self._local_ids = 0
        self._reaper: asyncio.Task[None] | None = None
        # subscriptions/listen streams watching a task (notifications/tasks).
        self._watchers = Watchers(self._detailed)
        # Settling finished tasks (their result kept, their session released).
        self._settling: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._reap())

    @property
    def live_tasks(self) -> int:
        return len(self._live) + len(self._own)

    # -- what the client is told ------------------------------------------

    def offered(self, pooled: PooledSession) -> bool:
        return self._runs_own or wire.upstream_runs_tool_tasks(pooled.server_capabilities)

    @property
    def _runs_own(self) -> bool:
        return bool(self._settings.tools) and self._lanes is not None

    def discover_capabilities(self, pooled: PooledSession, caps: Message) -> Message:
        return wire.advertise(caps) if self.offered(pooled) else caps

    def annotate_tools(self, pooled: PooledSession, upstream: Message, result: Message) -> Message:
        """A translated tools/list result with each tool's taskSupport (from the
        upstream's own result: the translation drops the 2025-11-25 field)."""
        if not self.offered(pooled):
            return result
        tools = upstream.get("tools")
        named = [
            t
            for t in (tools if isinstance(tools, list) else [])
            if isinstance(t, dict) and isinstance(t.get("name"), str)
        ]
        runs = wire.upstream_runs_tool_tasks(pooled.server_capabilities)
        modes = {t["name"]: wire.tool_mode(t) if runs else "forbidden" for t in named}
        for name, mode in modes.items():
            if mode == "forbidden" and self._runs_own and own.matches(self._settings.tools, name):
                modes[name] = "optional"
        return wire.with_task_support(result, modes)

    # -- tools/call --------------------------------------------------------

    async def plan(
        self, call: ModernCall, pooled: PooledSession, authorization: str | None
    ) -> Rejection | ModernCall | RunAsTask | Resume:
        """How a tools/call goes: refused (a Rejection), forwarded as the call
        returned (a `task` param stripped), as the upstream's task, or as the
        retry of the input round before a task."""
        stripped = _without_task_param(call)
        if not self.offered(pooled):
            return stripped
        owner = ids.owner_of(credential_hash(authorization))
        round_of = ids.open_round(self._sealer, call.params.get("requestState"), owner)
        if round_of is not None:
            return Resume(round_of)
        if "requestState" in call.params or "inputResponses" in call.params:
            return stripped  # a retry of the MRTR bridge's own round: it takes it
        name = call.params.get("name")
        mode = None
        if isinstance(name, str) and wire.upstream_runs_tool_tasks(pooled.server_capabilities):
            mode = (await pooled.tool_task_modes()).get(name)
        if mode is None and self._runs_own and own.matches(self._settings.tools, name):
            mode = "own"
        declared = wire.declares_extension(call.client_capabilities)
        if mode == "required" and not declared:
            log.info("task_refused", reason="extension_not_declared")
            return missing_extension(call.id)
        if mode in ("optional", "required", "own") and declared:
            return RunAsTask(mode)
        return stripped

    async def create(
        self,
        call: ModernCall,
        pooled: PooledSession,
        outbound: Message,
        authorization: str | None,
        state: CallState,
        mode: str,
    ) -> Outgoing:
        """Send the call as a task on `pooled`; the flat CreateTaskResult (or the
        upstream's own answer, if it chose to answer at once)."""
        work = self._create(call, pooled, outbound, authorization, state, mode)
        return await _guarded(call, state, work)

    async def _create(
        self,
        call: ModernCall,
        pooled: PooledSession,
        outbound: Message,
        authorization: str | None,
        state: CallState,
        mode: str,
    ) -> Outgoing:
        owner = credential_hash(authorization)
        # Checked before anything starts upstream; the store's own refusal below
        # covers calls that raced past this check together.
        limit = self._settings.max_per_owner
        if len(await self._store.live(owner)) >= limit:
            return _reply(_limit_reached(call.id, limit), state, "task_limit")
        if mode == "own":
            return await self._create_own(call, pooled, outbound, authorization, state)
        params = dict(outbound.get("params") or {})
        params.pop("_meta", None)  # the progress token belongs to a call, not a task
        params["task"] = wire.legacy_task_param(self._settings.ttl_ms)
        # Counted before anything starts upstream, so creations racing each
        # other never pass the tasks' bounds together.
        hold = self.bounds.hold(pooled, owner)
        if isinstance(hold, Refusal):
            return refusal_reply(call.id, hold, state)
        fresh: PooledSession | None = None
        live: LiveTask | None = None
        try:
            try:
                reply = await ask(pooled, "tools/call", params)
            except SessionExpired:
                # The upstream forgot the session: its handler never ran, so the call
                # goes once more on a fresh session, which the task then pins.
                caps = jsonio.loads(pooled.key.capabilities)
                fresh = pooled = await self._pool.renew(pooled, caps, authorization)
                hold.move(fresh)
                reply = await ask(pooled, "tools/call", params)
            task = wire.legacy_task(reply.get("result") or {}) if "result" in reply else None
            if task is None:
                return upstream_answer(call, pooled, reply, state)
            live = self._pin(call, pooled, owner, task, hold)
            live.stream_at_once = mode == "required" and mrtr_capabilities.declares_input(
                call.client_capabilities
            )
        finally:
            if live is None:
                hold.release()
            if fresh is not None:
                self._pool.release(fresh)  # renew's lease; the task holds its own
        fields = self._fields(live, task)
        ttl_ms = _ttl(fields, self._settings.ttl_ms)
        try:
            refused = await self._store.create(owner, live.task_id, {"fields": fields}, ttl_ms)
        except TaskStoreUnavailable:
            await self._release(live, cancel_upstream=True)  # nobody could ever ask for it
            raise
        if isinstance(refused, TaskLimitReached):
            await self._release(live, cancel_upstream=True)
            return _reply(_limit_reached(call.id, refused.limit), state, "task_limit")
        live.on_change = self._on_change(live.task_id)
        live.on_settled = self._on_settled(live.task_id, owner)
        self._live[live.task_id] = started(live)
        log.info("task_created", live_tasks=len(self._live))
        if mode == "required" and mrtr_capabilities.declares_input(call.client_capabilities):
            first = await self._first_round(call, live, state)
            if first is not None:
                return first
        return _result(call, wire.create_task_result(fields), state)

    async def _first_round(
        self, call: ModernCall, live: LiveTask, state: CallState
    ) -> Outgoing | None:
        """A task-only tool that asks at once: the question becomes an input round
        answered before the task is shown (what a 2026-07-28 tool does by asking
        first and creating its task on the final round; a 2025-11-25 tool can ask
        only inside a task). If the retry never comes, the task is cancelled."""
        await _first_of(self._settings.round_wait_s, live.asked, live.settled)
        if not live.questions or live.settled.is_set():
            return None
        await asyncio.sleep(self._settings.quiet_s)  # questions asked together
        live.hidden_until = time.monotonic() + self._settings.round_ttl_s
        log.info("task_input_round", questions=len(live.questions))
        result: Message = {
            "resultType": "input_required",
            "inputRequests": live.input_requests(),
            "requestState": ids.seal_round(self._sealer, live.task_id, ids.owner_of(live.owner)),
        }
        return _result(call, result, state)

    async def resume(
        self, call: ModernCall, resume: Resume, authorization: str | None, state: CallState
    ) -> Outgoing:
        """The retry of an input round: the answers go upstream, and the task the
        round belongs to is shown (its CreateTaskResult)."""
        return await _guarded(call, state, self._resume(call, resume, authorization, state))

    async def _resume(
        self, call: ModernCall, resume: Resume, authorization: str | None, state: CallState
    ) -> Outgoing:
        owner = credential_hash(authorization)
        live = self._live.get(resume.task_id)
        record = await self._store.get(owner, resume.task_id)
        if live is None or live.hidden_until is None or live.owner != owner or record is None:
            rejection = Rejection(
                INVALID_PARAMS,
                "Invalid params: requestState is no longer valid; send the request again "
                "without it",
                call.id,
            )
            return _reply(rejection, state, "rejected")
        refusal = await self._feed(call.id, live, call.params.get("inputResponses"))
        if refusal is not None:
            return _reply(refusal, state, "rejected")
        live.hidden_until = None
        return _result(call, wire.create_task_result(record["fields"]), state)

    async def _create_own(
        self,
        call: ModernCall,
        pooled: PooledSession,
        outbound: Message,
        authorization: str | None,
        state: CallState,
    ) -> Outgoing:
        """Start the call on a lane of its own and answer with its task at once."""
        assert self._lanes is not None
        owner = credential_hash(authorization)
        # A lane is a session of this task alone (the token stands for it); its
        # call's stream and its GET stream stay open while the task runs.
        hold = self.bounds.hold(object(), owner, connections=2)
        if isinstance(hold, Refusal):
            return refusal_reply(call.id, hold, state)
        try:
            lane, exchange = await self._start_on_lane(pooled, outbound, authorization)
        except BaseException:
            hold.release()
            raise
        self._local_ids += 1
        ref = ids.TaskRef(ids.owner_of(owner), self._settings.replica, "", str(self._local_ids))
        task = own.OwnTask(
            task_id=ids.seal(self._sealer, ref),
            owner=owner,
            lanes=self._lanes,
            lane=lane,
            exchange=exchange,
            client_version=call.version,
            deadline=time.monotonic() + self._settings.ttl_ms / 1000,
            client_capabilities=call.client_capabilities,
            hold=hold,
        )
        fields = task.fields(self._settings.poll_ms, self._settings.ttl_ms)
        try:
            refused = await self._store.create(
                owner, task.task_id, {"fields": fields}, self._settings.ttl_ms
            )
        except TaskStoreUnavailable:
            await task.release()
            raise
        if isinstance(refused, TaskLimitReached):
            await task.release()
            return _reply(_limit_reached(call.id, refused.limit), state, "task_limit")
        task.on_change = self._on_change(task.task_id)
        task.on_settled = self._on_settled(task.task_id, owner)
        self._own[task.task_id] = own.start(task)
        return _result(call, wire.create_task_result(fields), state)

    async def _start_on_lane(
        self, pooled: PooledSession, outbound: Message, authorization: str | None
    ) -> tuple[Lane, LiveExchange]:
        """The call sent on a lane of the caller's key, its stream pumped. A lane
        whose session the upstream forgot (404) is replaced once and the call sent
        again (its handler never ran), as the MRTR bridge does."""
        assert self._lanes is not None
        caps = jsonio.loads(pooled.key.capabilities)
        caller = ids.owner_of(credential_hash(authorization))
        lane = await self._lanes.acquire(pooled.key, caps, authorization)
        held: Lane | None = lane  # released here on any failure, exactly once
        try:
            for attempt in (1, 2):
                exchange = LiveExchange(
                    pooled=lane.pooled, lane=lane, method="tools/call", caller=caller, digest=""
                )
                try:
                    await own.send(lane, exchange, outbound)
                    return lane, exchange
                except SessionExpired:
                    if attempt == 2:
                        raise
                    held = None  # replace() releases it
                    lane = await self._lanes.replace(lane, caps, authorization)
                    held = lane
            raise AssertionError("unreachable")
        except BaseException:
            if held is not None:
                await self._lanes.release(held, reusable=False)
            raise

    def _pin(
        self, call: ModernCall, pooled: PooledSession, owner: str, task: Message, hold: Hold
    ) -> LiveTask:
        self._local_ids += 1
        ref = ids.TaskRef(
            owner=ids.owner_of(owner),
            replica=self._settings.replica,
            upstream_id=str(task["taskId"]),
            local=str(self._local_ids),
        )
        self._pool.lease(pooled)
        ttl = task.get("ttl")
        ttl_ms = self._settings.ttl_ms
        if isinstance(ttl, int | float) and 0 < ttl < ttl_ms:
            ttl_ms = int(ttl)
        ttl_s = ttl_ms / 1000
        return LiveTask(
            task_id=ids.seal(self._sealer, ref),
            owner=owner,
            upstream_id=ref.upstream_id,
            pooled=pooled,
            client_version=call.version,
            deadline=time.monotonic() + ttl_s,
            max_payload_bytes=self._settings.max_result_bytes,
            client_capabilities=call.client_capabilities,
            hold=hold,
            bounds=self.bounds,
            poll_s=poll_interval_s(task.get("pollInterval"), self._settings.poll_ms / 1000),
        )

    def _fields(self, live: LiveTask, task: Message) -> Message:
        """The task's fields for the client; its ttlMs at most MCP_SHIM_TASK_TTL_MS
        (the gateway keeps the task no longer than that, whatever the upstream)."""
        fields = wire.task_fields(task, live.task_id, self._settings.poll_ms)
        ttl = fields.get("ttlMs")
        if not isinstance(ttl, int) or ttl > self._settings.ttl_ms:
            fields["ttlMs"] = self._settings.ttl_ms
        return fields

    # -- tasks/get, tasks/update, tasks/cancel -------------------------------

    async def serve(
        self, call: ModernCall, pooled: PooledSession, authorization: str | None, state: CallState
    ) -> Outgoing:
        return await _guarded(call, state, self._serve(call, pooled, authorization, state))

    async def _serve(
        self, call: ModernCall, pooled: PooledSession, authorization: str | None, state: CallState
    ) -> Outgoing:
        if not self.offered(pooled):
            rejection = Rejection(
                METHOD_NOT_FOUND,
                f"Method not found: {call.method} (the upstream runs no tasks)",
                call.id,
            )
            return _reply(rejection, state, "rejected")
        if not wire.declares_extension(call.client_capabilities):
            return _reply(missing_extension(call.id), state, "missing_capability")
        owner = credential_hash(authorization)
        task_id = call.params.get("taskId")
        elsewhere = await self._elsewhere(task_id, owner, state)
        if elsewhere is not None:
            return await self._forward(call, authorization, elsewhere, state)
        found = await self._find(task_id, owner)
        if found is None:
            return _reply(not_found(call.id), state, "task_not_found")
        record, live = found
        held = self._own.get(str(task_id))
        if held is not None:
            return await self._serve_own(call, owner, held, state)
        if call.method == "tasks/get":
            return _result(call, await self._get(owner, str(task_id), record, live), state)
        if call.method == "tasks/cancel":
            await self._cancel(owner, str(task_id), record, live)
            return _result(call, wire.acknowledgement(), state)
        refusal = await self._update(call, live)
        if refusal is not None:
            return _reply(refusal, state, "rejected")
        return _result(call, wire.acknowledgement(), state)

    async def _elsewhere(self, task_id: Any, owner: str, state: CallState) -> str | None:
        """The replica to send a request for this task to: the one running it,
        unless that is this one, the store already holds its result, or the
        request was forwarded once already."""
        ref = ids.open_for(self._sealer, task_id, ids.owner_of(owner))
        if ref is None or ref.replica == self._settings.replica or self._forwarder is None:
            return None
        if state.hop or not reachable(ref.replica):
            return None
        record = await self._store.get(owner, task_id)
        if record is not None and record.get("inline") is not None:
            return None
        return ref.replica

    async def _forward(
        self, call: ModernCall, authorization: str | None, replica: str, state: CallState
    ) -> Outgoing:
        assert self._forwarder is not None
        state.outcome = "forwarded"
        log.info("task_request_forwarded", method=call.method)
        async with contextlib.aclosing(
            self._forwarder.forward(call, authorization, replica)
        ) as frames:
            async for frame in frames:
                if frame.final:
                    return Outgoing(frame.message, True, frame.status)
        rejection = Rejection(
            INTERNAL_ERROR,
            "Internal error: the replica running this task did not answer",
            call.id,
            status=502,
        )
        return _reply(rejection, state, "owner_broke_off")

    async def _find(self, task_id: Any, owner: str) -> tuple[Record, LiveTask | None] | None:
        if ids.open_for(self._sealer, task_id, ids.owner_of(owner)) is None:
            return None
        record = await self._store.get(owner, task_id)
        if record is None:
            return None
        live = self._live.get(task_id)
        if live is None and record.get("inline") is None and task_id not in self._own:
            # Running on another replica, or on this one before a restart.
            return None
        return record, live

    async def _get(
        self, owner: str, task_id: str, record: Record, live: LiveTask | None
    ) -> Message:
        if live is None:
            return wire.detailed_task(record["fields"], record.get("inline"))
        try:
            reply = await ask(live.pooled, "tasks/get", {"taskId": live.upstream_id})
        except SessionExpired:
            reply = {}
        task = reply.get("result") if isinstance(reply.get("result"), dict) else None
        if task is None and not live.settled.is_set():
            live._settle_lost("the upstream no longer knows this task")
        fields = self._fields(live, task or record["fields"])
        status = str(fields.get("status"))
        if status in wire.TERMINAL or status == "input_required":
            live.wake.set()  # the watcher looks now, not at its next poll
        if status in wire.TERMINAL or live.settled.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PAYLOAD_WAIT_S):
                    await live.settled.wait()
        if live.payload is None:
            # input_required is shown with its questions or not at all: one the
            # upstream counts may not have reached the gateway's stream yet, and a
            # terminal status waits for its payload.
            if status in wire.TERMINAL or status == "input_required":
                fields = {**fields, "status": "working"}
            return wire.detailed_task(fields, None, live.input_requests())
        final, inline = wire.inline_payload(status, payload_up(live))
        fields, inline = await self._keep(owner, task_id, {**fields, "status": final}, inline)
        await self._release(live, cancel_upstream=False)
        log.info("task_settled", status=final)
        return wire.detailed_task(fields, inline)

    async def _keep(
        self, owner: str, task_id: str, fields: Message, inline: Message
    ) -> tuple[Message, Message]:
        """A terminal task's record filed, result inlined: what any replica answers
        from now on. A record over MCP_SHIM_MAX_TASK_RESULT_BYTES (a result just
        under it grown by translation) is filed as `failed` naming the setting."""
        record: Record = {"fields": fields, "inline": inline}
        too_large = record_refusal(record, self._settings.max_result_bytes)
        if too_large is not None:
            log.warning("task_payload_too_large", limit=too_large.limit, setting=MAX_RECORD_SETTING)
            fields = {**fields, "status": "failed"}
            inline = {
                "error": {"code": INTERNAL_ERROR, "message": f"Internal error: {too_large.message}"}
            }
        await self._store.update(owner, task_id, {"fields": fields, "inline": inline})
        return fields, inline

    async def _cancel(
        self, owner: str, task_id: str, record: Record, live: LiveTask | None
    ) -> None:
        """Cancel upstream unless the task is over already: a legacy server answers
        -32602 for a finished task as for an unknown one, so it is asked first."""
        if live is None or live.settled.is_set():
            return
        reply = await ask(live.pooled, "tasks/get", {"taskId": live.upstream_id})
        task = reply.get("result")
        if isinstance(task, dict) and task.get("status") in wire.TERMINAL:
            return
        reply = await ask(live.pooled, "tasks/cancel", {"taskId": live.upstream_id})
        if "error" in reply:
            log.info("task_cancel_refused_upstream", code=(reply["error"] or {}).get("code"))
        else:
            log.info("task_cancelled")

    async def _serve_own(
        self, call: ModernCall, owner: str, task: own.OwnTask, state: CallState
    ) -> Outgoing:
        """tasks/* for a task the gateway runs itself."""
        if call.method == "tasks/cancel":
            await task.cancel()
            return _result(call, wire.acknowledgement(), state)
        if call.method == "tasks/update":
            refusal = await self._feed(call.id, task, call.params.get("inputResponses"))
            if refusal is not None:
                return _reply(refusal, state, "rejected")
            return _result(call, wire.acknowledgement(), state)
        return _result(call, await self._own_detailed(owner, task), state)

    async def _own_detailed(self, owner: str, task: own.OwnTask) -> Message:
        """The DetailedTask of a task the gateway runs; once terminal, kept in the
        store and the task released."""
        fields = task.fields(self._settings.poll_ms, self._settings.ttl_ms)
        if not task.settled.is_set():
            return wire.detailed_task(fields, None, task.input_requests())
        payload = payload_in(task.payload or {}, task.pooled_version, task.client_version)
        final, inline = wire.inline_payload(task.status, payload)
        fields, inline = await self._keep(owner, task.task_id, {**fields, "status": final}, inline)
        await self._release_own(task)
        return wire.detailed_task(fields, inline)

    async def _release_own(self, task: own.OwnTask) -> None:
        self._own.pop(task.task_id, None)
        await task.release()

    async def _update(self, call: ModernCall, live: LiveTask | None) -> Rejection | None:
        return await self._feed(call.id, live, call.params.get("inputResponses"))

    async def _feed(
        self, call_id: Any, live: LiveTask | own.OwnTask | None, responses: Any
    ) -> Rejection | None:
        """Each answer to a question of the task posted upstream; keys the task
        does not know are ignored; an answer that does not fit refuses them all."""
        if not isinstance(responses, dict) or not all(
            isinstance(v, dict) for v in responses.values()
        ):
            return Rejection(
                INVALID_PARAMS,
                "Invalid params: inputResponses must be an object of objects",
                call_id,
            )
        if live is None:
            return None
        pending = live.pending()
        for key, answer in responses.items():
            question = pending.get(key)
            if question is None:
                continue  # a key the gateway never assigned, or answered already
            why = mrtr_answers.check_answer(question[1], answer)
            if why is not None:
                return Rejection(
                    INVALID_PARAMS, f"Invalid params: inputResponses[{quoted(key)}] {why}", call_id
                )
        for key, answer in responses.items():
            question = pending.get(key)
            if question is None:
                continue
            method = str(question[0].get("method"))
            translated = translate.result(
                dict(answer), method, live.client_version, live.pooled_version
            )
            with contextlib.suppress(UpstreamError):
                await live.answer(key, translated)
        return None

    # -- notifications/tasks on subscriptions/listen ---------------------------

    def task_watch_refusal(self, call: ModernCall, task_ids: tuple[str, ...]) -> Rejection | None:
        """SEP-2663: a listen filter naming task ids needs the extension declared."""
        if wire.declares_extension(call.client_capabilities):
            return None
        return missing_extension(call.id)

    async def watch(
        self, authorization: str | None, task_ids: tuple[str, ...], mailbox: Mailbox
    ) -> tuple[str, ...]:
        """The task ids of a listen filter this caller owns and the gateway knows,
        each now watched on `mailbox` (app/tasks/watch.py)."""
        owner = credential_hash(authorization)
        watched = []
        for task_id in task_ids:
            if ids.open_for(self._sealer, task_id, ids.owner_of(owner)) is None:
                continue
            try:
                if await self._store.get(owner, task_id) is None:
                    continue
            except TaskStoreUnavailable:
                continue  # left out of the acknowledgment: the caller sees it is not watched
            self._watchers.add(task_id, owner, mailbox)
            watched.append(task_id)
        return tuple(watched)

    def unwatch(self, mailbox: Mailbox) -> None:
        self._watchers.remove(mailbox)

    def _on_change(self, task_id: str) -> Callable[[], None]:
        return lambda: self._watchers.changed(task_id)

    def _on_settled(self, task_id: str, owner: str) -> Callable[[], None]:
        """Once a task's payload is in, its result goes to the store and its
        upstream session (or lane) is released at once, not at the next poll:
        a client that never polls again holds nothing but the record."""

        async def settle() -> None:
            try:
                await self._detailed(task_id, owner)
            except (UpstreamError, TaskStoreUnavailable) as exc:
                log.info("task_settle_deferred", error=exc.message)

        def settled() -> None:
            task = asyncio.get_running_loop().create_task(settle())
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)

        return settled

    async def _detailed(self, task_id: str, owner: str) -> Message | None:
        """The DetailedTask of a task, as tasks/get gives it (None once gone)."""
        held = self._own.get(task_id)
        if held is not None:
            return await self._own_detailed(owner, held)
        record = await self._store.get(owner, task_id)
        if record is None:
            return None
        live = self._live.get(task_id)
        if live is not None and live.hidden_until is not None:
            return None  # an input round the client has not answered: no task yet
        if live is None and record.get("inline") is None:
            return None  # running on another replica
        return await self._get(owner, task_id, record, live)

    # -- the end of a task -------------------------------------------------

    async def _release(self, live: LiveTask, *, cancel_upstream: bool) -> None:
        if live.released:
            return
        live.released = True
        self._live.pop(live.task_id, None)
        try:
            if cancel_upstream and not live.settled.is_set():
                with contextlib.suppress(UpstreamError):
                    await ask(live.pooled, "tasks/cancel", {"taskId": live.upstream_id})
            await live.stop()
        finally:
            live.hold.release()
            self._pool.release(live.pooled)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            try:
                await self._reap_once()
            except TaskStoreUnavailable:
                pass  # logged by the store; the next round tries again

    async def _reap_once(self) -> None:
        now = time.monotonic()
        for live in [t for t in self._live.values() if t.deadline <= now]:
            log.info("task_expired", settled=live.settled.is_set())
            await self._release(live, cancel_upstream=True)
        for live in [t for t in self._live.values() if (t.hidden_until or now) < now]:
            log.info("task_input_round_abandoned")
            await self._store.delete(live.owner, live.task_id)
            await self._release(live, cancel_upstream=True)
        for held in [t for t in self._own.values() if t.deadline <= now]:
            log.info("task_expired", settled=held.settled.is_set(), run_by="gateway")
            await self._release_own(held)

    # -- a rolling restart -------------------------------------------------

    async def wind_down(self, grace_s: float, *, shared: bool) -> WindDown:
        """SIGTERM (app/wiring.py `drain`): the running tasks get up to `grace_s` to
        finish, their results filed in the store; the rest are dropped (cancelled
        upstream, a `failed` record left for their next poll). None is handed over:
        a 2025-11-25 task id is valid only on the upstream session that created it,
        which no other replica can take over (app/tasks/shutdown.py)."""
        tasks: list[LiveTask | own.OwnTask] = [*self._live.values(), *self._own.values()]
        running = [
            Running(t.owner, t.task_id, self._finishing(t.task_id, t.owner, t.settled))
            for t in tasks
            if not t.released
        ]
        return await wind_down(self._store, running, grace_s, shared=shared, on_drop=self._drop)

    def _finishing(self, task_id: str, owner: str, settled: asyncio.Event) -> asyncio.Task[None]:
        """The end of a task's work: its payload in, and its record filed."""

        async def finish() -> None:
            await settled.wait()
            try:
                await self._detailed(task_id, owner)
            except (UpstreamError, TaskStoreUnavailable) as exc:
                log.info("task_settle_deferred", error=exc.message)

        return asyncio.get_running_loop().create_task(finish())

    async def _drop(self, task: Running) -> None:
        """A task the grace period did not see end: cancelled upstream, and its
        record made `failed`, which any replica answers with a shared store."""
        live = self._live.get(task.task_id)
        if live is not None:
            await self._release(live, cancel_upstream=True)
        held = self._own.get(task.task_id)
        if held is not None:
            await self._release_own(held)
        record = await self._store.get(task.owner, task.task_id)
        if record is None:
            return
        why = (
            "Internal error: the gateway stopped before the task finished "
            "(MCP_SHIM_SHUTDOWN_GRACE_S); it was cancelled"
        )
        fields = {**record["fields"], "status": "failed", "statusMessage": why}
        inline = {"error": {"code": INTERNAL_ERROR, "message": why}}
        await self._store.update(task.owner, task.task_id, {"fields": fields, "inline": inline})

    async def aclose(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await self._watchers.aclose()
        for settling in list(self._settling):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(settling, 2.0)
        running = [t for t in self._live.values() if not t.settled.is_set()]
        held = [t for t in self._own.values() if not t.settled.is_set()]
        if running or held:
            log.warning("tasks_dropped_at_shutdown", running=len(running) + len(held))
        for live in list(self._live.values()):
            with contextlib.suppress(Exception):
                await self._release(live, cancel_upstream=True)
        for task in list(self._own.values()):
            with contextlib.suppress(Exception):
                await self._release_own(task)
        await self._store.close()


async def _guarded(call: ModernCall, state: CallState, work: Awaitable[Outgoing]) -> Outgoing:
    """The one place where a task store that cannot be reached becomes the
    caller's answer: HTTP 503, -32603 saying so (the store logs the cause)."""
    try:
        return await work
    except TaskStoreUnavailable as exc:
        log.warning("task_request_failed", reason="store_unavailable", method=call.method)
        rejection = Rejection(INTERNAL_ERROR, f"Internal error: {exc.message}", call.id, status=503)
        return _reply(rejection, state, "task_store_unavailable")


async def _first_of(timeout_s: float, *events: asyncio.Event) -> None:
    """Until any of `events` is set, at most `timeout_s`."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _limit_reached(call_id: Any, limit: int) -> Rejection:
    log.warning("task_limit_reached", limit=limit, setting="MCP_SHIM_MAX_TASKS_PER_CREDENTIAL")
    return Rejection(
        INTERNAL_ERROR,
        f"Internal error: this caller's credentials already hold {limit} live tasks "
        "(MCP_SHIM_MAX_TASKS_PER_CREDENTIAL); retry when one has finished or expired",
        call_id,
        status=429,
    )


def _ttl(fields: Message, default_ms: int) -> int:
    """The record's TTL: the upstream's for its task, else MCP_SHIM_TASK_TTL_MS (an
    upstream `ttl: null`, unlimited, must not let a record outlive the bound)."""
    ttl = fields.get("ttlMs")
    return ttl if isinstance(ttl, int) and ttl > 0 else default_ms


def _without_task_param(call: ModernCall) -> ModernCall:
    """The call without a legacy `task` param: the extension tolerates it and
    never obeys it (the server alone decides on a task)."""
    if "task" not in call.params:
        return call
    params = {k: v for k, v in call.params.items() if k != "task"}
    return dataclasses.replace(call, params=params, message={**call.message, "params": params})
