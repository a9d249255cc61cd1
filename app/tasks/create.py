"""A `tools/call` made a task, and the retry of the input round before one is shown.

A task-supporting tool's call from a caller that declares the extension
becomes the upstream's task: sent with the 2025-11-25 `task` param, answered
with the flat `CreateTaskResult` under a sealed task id (app/tasks/ids.py).
A caller that does not declare it never gets a task: a `required` tool is
-32021, an optional one runs synchronously; a `task` param the client sent is
never obeyed (stripped). A `required` tool that asks at once, for a caller
that can answer, gets an input round before the task is shown
(tasks-mrtr-composition). A tool of `MCP_SHIM_TASK_TOOLS` the gateway runs
itself, on a lane of the MRTR bridge (app/tasks/own.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

import structlog

from app import jsonio, tracing
from app.call import CallState, Message, ModernCall, Outgoing
from app.mrtr import capabilities as mrtr_capabilities
from app.mrtr.exchange import LiveExchange
from app.mrtr.forwarder import Forwarder
from app.mrtr.lanes import Lane
from app.rejections import INVALID_PARAMS, Rejection
from app.tasks import ids, own
from app.tasks.advertise import Advertiser
from app.tasks.answers import feed, upstream_answer
from app.tasks.bounds import Hold, Refusal, refusal_reply
from app.tasks.held import Held
from app.tasks.live import LiveTask, poll_interval_s, started
from app.tasks.replies import (
    guarded,
    limit_reached,
    missing_extension,
    rejection_reply,
    result_reply,
)
from app.tasks.store import TaskLimitReached, TaskStoreUnavailable
from app.tasks.upstream import ask
from app.upstream.errors import SessionExpired, UpstreamError, UpstreamProtocolError
from app.upstream.sessions.pool import PooledSession, credential_hash
from translators import tasks as wire

log = structlog.get_logger("mcp_shim.tasks")

# Told of a task's changes (its watchers), of its payload in (its settling).
OnChange = Callable[[str], Callable[[], None]]
OnSettled = Callable[[str, str], Callable[[], None]]


@dataclass(frozen=True, slots=True)
class RunAsTask:
    mode: str  # the tool's taskSupport: optional or required


@dataclass(frozen=True, slots=True)
class Resume:
    task_id: str  # the task whose input round this retry answers


class TaskCreator:
    def __init__(
        self,
        held: Held,
        advertiser: Advertiser,
        on_change: OnChange,
        on_settled: OnSettled,
        upstream: Forwarder,
    ) -> None:
        self._held = held
        # The call translated to the upstream's version as any call is (app/mrtr/forwarder.py).
        self._upstream = upstream
        self._advertiser = advertiser
        self._on_change = on_change
        self._on_settled = on_settled
        self._local_ids = 0

    async def plan(
        self, call: ModernCall, pooled: PooledSession, authorization: str | None
    ) -> Rejection | ModernCall | RunAsTask | Resume:
        """How a tools/call goes: refused (a Rejection), forwarded as the call
        returned (a `task` param stripped), as the upstream's task, or as the
        retry of the input round before a task."""
        stripped = _without_task_param(call)
        if not self._advertiser.offered(pooled):
            return stripped
        owner = ids.owner_of(credential_hash(authorization))
        round_of = ids.open_round(self._held.sealer, call.params.get("requestState"), owner)
        if round_of is not None:
            return Resume(round_of)
        if "requestState" in call.params or "inputResponses" in call.params:
            return stripped  # a retry of the MRTR bridge's own round: it takes it
        name = call.params.get("name")
        mode = None
        if isinstance(name, str) and wire.upstream_runs_tool_tasks(pooled.server_capabilities):
            mode = (await pooled.tool_task_modes()).get(name)
        if (
            mode is None
            and self._advertiser.runs_own
            and own.matches(self._held.settings.tools, name)
        ):
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
        authorization: str | None,
        state: CallState,
        mode: str,
    ) -> Outgoing:
        """Send the call as a task on `pooled`; the flat CreateTaskResult (or the
        upstream's own answer, if it chose to answer at once)."""
        outbound = self._upstream.outbound(call, pooled)
        work = self._create(call, pooled, outbound, authorization, state, mode)
        return await guarded(call, state, work)

    async def _create(
        self,
        call: ModernCall,
        pooled: PooledSession,
        outbound: Message,
        authorization: str | None,
        state: CallState,
        mode: str,
    ) -> Outgoing:
        settings, store = self._held.settings, self._held.store
        owner = credential_hash(authorization)
        # Checked before anything starts upstream; the store's own refusal below
        # covers calls that raced past this check together.
        limit = settings.max_per_owner
        if len(await store.live(owner)) >= limit:
            return rejection_reply(limit_reached(call.id, limit), state, "task_limit")
        if mode == "own":
            return await self._create_own(call, pooled, outbound, authorization, state)
        params = dict(outbound.get("params") or {})
        params.pop("_meta", None)  # the progress token belongs to a call, not a task
        params["task"] = wire.legacy_task_param(settings.ttl_ms)
        # Counted before anything starts upstream, so creations racing each
        # other never pass the tasks' bounds together.
        hold = self._held.bounds.hold(pooled, owner)
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
                fresh = pooled = await self._held.pool.renew(pooled, caps, authorization)
                hold.move(fresh)
                reply = await ask(pooled, "tools/call", params)
            task = wire.legacy_task(reply.get("result") or {}) if "result" in reply else None
            if task is None:
                return upstream_answer(call, pooled, reply, state)
            if not ids.upstream_id_fits(task["taskId"]):
                await _refuse_upstream_id(pooled, task["taskId"])
            live = self._pin(call, pooled, owner, task, hold)
            live.stream_at_once = mode == "required" and mrtr_capabilities.declares_input(
                call.client_capabilities
            )
        finally:
            if live is None:
                hold.release()
            if fresh is not None:
                self._held.pool.release(fresh)  # renew's lease; the task holds its own
        fields = self._held.fields(live, task)
        ttl_ms = _ttl(fields, settings.ttl_ms)
        try:
            refused = await store.create(owner, live.task_id, {"fields": fields}, ttl_ms)
        except TaskStoreUnavailable:
            await self._held.release(live, cancel_upstream=True)  # nobody could ever ask for it
            raise
        if isinstance(refused, TaskLimitReached):
            await self._held.release(live, cancel_upstream=True)
            return rejection_reply(limit_reached(call.id, refused.limit), state, "task_limit")
        live.on_change = self._on_change(live.task_id)
        live.on_settled = self._on_settled(live.task_id, owner)
        self._held.live[live.task_id] = started(live)
        log.info("task_created", live_tasks=len(self._held.live))
        tracing.event("mcp_shim.task.created")
        if mode == "required" and mrtr_capabilities.declares_input(call.client_capabilities):
            first = await self._first_round(call, live, state)
            if first is not None:
                return first
        return result_reply(call, wire.create_task_result(fields), state)

    async def _first_round(
        self, call: ModernCall, live: LiveTask, state: CallState
    ) -> Outgoing | None:
        """A task-only tool that asks at once: the question becomes an input round
        answered before the task is shown (what a 2026-07-28 tool does by asking
        first and creating its task on the final round; a 2025-11-25 tool can ask
        only inside a task). If the retry never comes, the task is cancelled."""
        settings = self._held.settings
        await _first_of(settings.round_wait_s, live.asked, live.settled)
        if not live.questions or live.settled.is_set():
            return None
        await asyncio.sleep(settings.quiet_s)  # questions asked together
        live.hidden_until = time.monotonic() + settings.round_ttl_s
        log.info("task_input_round", questions=len(live.questions))
        tracing.event("mcp_shim.task.input_round", {"mcp_shim.questions": len(live.questions)})
        result: Message = {
            "resultType": "input_required",
            "inputRequests": live.input_requests(),
            "requestState": ids.seal_round(
                self._held.sealer, live.task_id, ids.owner_of(live.owner)
            ),
        }
        return result_reply(call, result, state)

    async def resume(
        self, call: ModernCall, resume: Resume, authorization: str | None, state: CallState
    ) -> Outgoing:
        """The retry of an input round: the answers go upstream, and the task the
        round belongs to is shown (its CreateTaskResult)."""
        return await guarded(call, state, self._resume(call, resume, authorization, state))

    async def _resume(
        self, call: ModernCall, resume: Resume, authorization: str | None, state: CallState
    ) -> Outgoing:
        owner = credential_hash(authorization)
        live = self._held.live.get(resume.task_id)
        record = await self._held.store.get(owner, resume.task_id)
        if live is None or live.hidden_until is None or live.owner != owner or record is None:
            rejection = Rejection(
                INVALID_PARAMS,
                "Invalid params: requestState is no longer valid; send the request again "
                "without it",
                call.id,
            )
            return rejection_reply(rejection, state, "rejected")
        refusal = await feed(call.id, live, call.params.get("inputResponses"))
        if refusal is not None:
            return rejection_reply(refusal, state, "rejected")
        live.hidden_until = None
        return result_reply(call, wire.create_task_result(record["fields"]), state)

    async def _create_own(
        self,
        call: ModernCall,
        pooled: PooledSession,
        outbound: Message,
        authorization: str | None,
        state: CallState,
    ) -> Outgoing:
        """Start the call on a lane of its own and answer with its task at once."""
        assert self._held.lanes is not None
        settings = self._held.settings
        owner = credential_hash(authorization)
        # A lane is a session of this task alone (the token stands for it); its
        # call's stream and its GET stream stay open while the task runs.
        hold = self._held.bounds.hold(object(), owner, connections=2)
        if isinstance(hold, Refusal):
            return refusal_reply(call.id, hold, state)
        try:
            lane, exchange = await self._start_on_lane(pooled, outbound, authorization)
        except BaseException:
            hold.release()
            raise
        self._local_ids += 1
        ref = ids.TaskRef(ids.owner_of(owner), settings.replica, "", str(self._local_ids))
        task = own.OwnTask(
            task_id=ids.seal(self._held.sealer, ref),
            owner=owner,
            lanes=self._held.lanes,
            lane=lane,
            exchange=exchange,
            client_version=call.version,
            deadline=time.monotonic() + settings.ttl_ms / 1000,
            client_capabilities=call.client_capabilities,
            hold=hold,
        )
        fields = task.fields(settings.poll_ms, settings.ttl_ms)
        try:
            refused = await self._held.store.create(
                owner, task.task_id, {"fields": fields}, settings.ttl_ms
            )
        except TaskStoreUnavailable:
            await task.release()
            raise
        if isinstance(refused, TaskLimitReached):
            await task.release()
            return rejection_reply(limit_reached(call.id, refused.limit), state, "task_limit")
        task.on_change = self._on_change(task.task_id)
        task.on_settled = self._on_settled(task.task_id, owner)
        self._held.own[task.task_id] = own.start(task)
        return result_reply(call, wire.create_task_result(fields), state)

    async def _start_on_lane(
        self, pooled: PooledSession, outbound: Message, authorization: str | None
    ) -> tuple[Lane, LiveExchange]:
        """The call sent on a lane of the caller's key, its stream pumped. A lane
        whose session the upstream forgot (404) is replaced once and the call sent
        again (its handler never ran), as the MRTR bridge does."""
        lanes = self._held.lanes
        assert lanes is not None
        caps = jsonio.loads(pooled.key.capabilities)
        caller = ids.owner_of(credential_hash(authorization))
        lane = await lanes.acquire(pooled.key, caps, authorization)
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
                    lane = await lanes.replace(lane, caps, authorization)
                    held = lane
            raise AssertionError("unreachable")
        except BaseException:
            if held is not None:
                await lanes.release(held, reusable=False)
            raise

    def _pin(
        self, call: ModernCall, pooled: PooledSession, owner: str, task: Message, hold: Hold
    ) -> LiveTask:
        settings = self._held.settings
        self._local_ids += 1
        ref = ids.TaskRef(
            owner=ids.owner_of(owner),
            replica=settings.replica,
            upstream_id=str(task["taskId"]),
            local=str(self._local_ids),
        )
        self._held.pool.lease(pooled)
        ttl = task.get("ttl")
        ttl_ms = settings.ttl_ms
        if isinstance(ttl, int | float) and 0 < ttl < ttl_ms:
            ttl_ms = int(ttl)
        ttl_s = ttl_ms / 1000
        return LiveTask(
            task_id=ids.seal(self._held.sealer, ref),
            owner=owner,
            upstream_id=ref.upstream_id,
            pooled=pooled,
            client_version=call.version,
            deadline=time.monotonic() + ttl_s,
            max_payload_bytes=settings.max_result_bytes,
            client_capabilities=call.client_capabilities,
            hold=hold,
            bounds=self._held.bounds,
            poll_s=poll_interval_s(task.get("pollInterval"), settings.poll_ms / 1000),
        )


async def _refuse_upstream_id(pooled: PooledSession, upstream_id: str) -> NoReturn:
    """An upstream task id over ids.MAX_UPSTREAM_ID_CHARS: the task is cancelled
    upstream (nobody could ever ask for it) and the call fails as an upstream
    that answered something unusable (502)."""
    log.warning("task_refused", reason="upstream_id_too_long", chars=len(upstream_id))
    with contextlib.suppress(UpstreamError):
        await ask(pooled, "tasks/cancel", {"taskId": upstream_id})
    raise UpstreamProtocolError(
        f"the upstream's task id is over {ids.MAX_UPSTREAM_ID_CHARS} characters"
    )


async def _first_of(timeout_s: float, *events: asyncio.Event) -> None:
    """Until any of `events` is set, at most `timeout_s`."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


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
