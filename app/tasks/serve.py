"""`tasks/get`, `tasks/update` and `tasks/cancel` (-32021 without the
extension): answered from the upstream's `tasks/get` for a task this replica
follows, the payload of its `tasks/result` inlined once terminal and its
questions shown as `inputRequests`; from the store once the record holds the
result; from the task itself for one the gateway runs; and relayed to the
replica running the task otherwise (app/cluster/replicas.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

from app import tracing
from app.call import CallState, Message, ModernCall, Outgoing
from app.cluster.forwarding import ReplicaForwarder
from app.cluster.replicas import reachable, same_route
from app.rejections import INTERNAL_ERROR, METHOD_NOT_FOUND, Rejection
from app.tasks import ids, own
from app.tasks.advertise import Advertiser
from app.tasks.answers import feed, payload_in, payload_up
from app.tasks.held import Held
from app.tasks.live import LiveTask
from app.tasks.replies import (
    guarded,
    missing_extension,
    not_found,
    rejection_reply,
    result_reply,
)
from app.tasks.store import MAX_RECORD_SETTING, Record, record_refusal
from app.tasks.upstream import ask
from app.upstream.errors import SessionExpired
from app.upstream.sessions.pool import PooledSession, credential_hash
from translators import tasks as wire

log = structlog.get_logger("mcp_shim.tasks")

METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
# How long tasks/get waits for a payload the upstream already reported terminal.
PAYLOAD_WAIT_S = 2.0


class TaskServer:
    def __init__(
        self, held: Held, advertiser: Advertiser, forwarder: ReplicaForwarder | None = None
    ) -> None:
        self._held = held
        self._advertiser = advertiser
        # The hop to the replica running a task (the MRTR bridge's, app/cluster/replicas.py).
        self._forwarder = forwarder

    async def serve(
        self, call: ModernCall, pooled: PooledSession, authorization: str | None, state: CallState
    ) -> Outgoing:
        return await guarded(call, state, self._serve(call, pooled, authorization, state))

    async def _serve(
        self, call: ModernCall, pooled: PooledSession, authorization: str | None, state: CallState
    ) -> Outgoing:
        if not self._advertiser.offered(pooled):
            rejection = Rejection(
                METHOD_NOT_FOUND,
                f"Method not found: {call.method} (the upstream runs no tasks)",
                call.id,
            )
            return rejection_reply(rejection, state, "rejected")
        if not wire.declares_extension(call.client_capabilities):
            return rejection_reply(missing_extension(call.id), state, "missing_capability")
        owner = credential_hash(authorization)
        task_id = call.params.get("taskId")
        elsewhere = await self._elsewhere(task_id, owner, state)
        if elsewhere is not None:
            return await self._forward(call, authorization, elsewhere, state)
        found = await self._find(task_id, owner)
        if found is None:
            return rejection_reply(not_found(call.id), state, "task_not_found")
        record, live = found
        held = self._held.own.get(str(task_id))
        if held is not None:
            return await self._serve_own(call, owner, held, state)
        if call.method == "tasks/get":
            return result_reply(call, await self._get(owner, str(task_id), record, live), state)
        if call.method == "tasks/cancel":
            await self._cancel(owner, str(task_id), record, live)
            return result_reply(call, wire.acknowledgement(), state)
        refusal = await self._update(call, live)
        if refusal is not None:
            return rejection_reply(refusal, state, "rejected")
        return result_reply(call, wire.acknowledgement(), state)

    async def _elsewhere(self, task_id: Any, owner: str, state: CallState) -> str | None:
        """The replica to send a request for this task to: the one running it,
        unless that is this one, the store already holds its result, or the
        request was forwarded once already."""
        ref = ids.open_for(self._held.sealer, task_id, ids.owner_of(owner))
        if ref is None or ref.replica == self._held.settings.replica or self._forwarder is None:
            return None
        if state.hop or not reachable(ref.replica):
            return None
        if not same_route(ref.replica, self._held.settings.replica):
            return None  # another server's task (app/servers): unknown here
        record = await self._held.store.get(owner, task_id)
        if record is not None and record.get("inline") is not None:
            return None
        return ref.replica

    async def _forward(
        self, call: ModernCall, authorization: str | None, replica: str, state: CallState
    ) -> Outgoing:
        assert self._forwarder is not None
        state.outcome = "forwarded"
        log.info("task_request_forwarded", method=call.method)
        tracing.event("mcp_shim.task.forwarded")
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
        return rejection_reply(rejection, state, "owner_broke_off")

    async def _find(self, task_id: Any, owner: str) -> tuple[Record, LiveTask | None] | None:
        if ids.open_for(self._held.sealer, task_id, ids.owner_of(owner)) is None:
            return None
        record = await self._held.store.get(owner, task_id)
        if record is None:
            return None
        live = self._held.live.get(task_id)
        if live is None and record.get("inline") is None and task_id not in self._held.own:
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
        fields = self._held.fields(live, task or record["fields"])
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
        await self._held.release(live, cancel_upstream=False)
        log.info("task_settled", status=final)
        tracing.event("mcp_shim.task.settled", {"mcp_shim.task.status": str(final)})
        return wire.detailed_task(fields, inline)

    async def _keep(
        self, owner: str, task_id: str, fields: Message, inline: Message
    ) -> tuple[Message, Message]:
        """A terminal task's record filed, result inlined: what any replica answers
        from now on. A record over MCP_SHIM_MAX_TASK_RESULT_BYTES (a result just
        under it grown by translation) is filed as `failed` naming the setting."""
        record: Record = {"fields": fields, "inline": inline}
        too_large = record_refusal(record, self._held.settings.max_result_bytes)
        if too_large is not None:
            log.warning("task_payload_too_large", limit=too_large.limit, setting=MAX_RECORD_SETTING)
            fields = {**fields, "status": "failed"}
            inline = {
                "error": {"code": INTERNAL_ERROR, "message": f"Internal error: {too_large.message}"}
            }
        await self._held.store.update(owner, task_id, {"fields": fields, "inline": inline})
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
            tracing.event("mcp_shim.task.cancelled")

    async def _serve_own(
        self, call: ModernCall, owner: str, task: own.OwnTask, state: CallState
    ) -> Outgoing:
        """tasks/* for a task the gateway runs itself."""
        if call.method == "tasks/cancel":
            await task.cancel()
            return result_reply(call, wire.acknowledgement(), state)
        if call.method == "tasks/update":
            refusal = await feed(call.id, task, call.params.get("inputResponses"))
            if refusal is not None:
                return rejection_reply(refusal, state, "rejected")
            return result_reply(call, wire.acknowledgement(), state)
        return result_reply(call, await self._own_detailed(owner, task), state)

    async def _own_detailed(self, owner: str, task: own.OwnTask) -> Message:
        """The DetailedTask of a task the gateway runs; once terminal, kept in the
        store and the task released."""
        settings = self._held.settings
        fields = task.fields(settings.poll_ms, settings.ttl_ms)
        if not task.settled.is_set():
            return wire.detailed_task(fields, None, task.input_requests())
        payload = payload_in(task.payload or {}, task.pooled_version, task.client_version)
        final, inline = wire.inline_payload(task.status, payload)
        fields, inline = await self._keep(owner, task.task_id, {**fields, "status": final}, inline)
        await self._held.release_own(task)
        return wire.detailed_task(fields, inline)

    async def _update(self, call: ModernCall, live: LiveTask | None) -> Rejection | None:
        return await feed(call.id, live, call.params.get("inputResponses"))

    async def detailed(self, task_id: str, owner: str) -> Message | None:
        """The DetailedTask of a task, as tasks/get gives it (None once gone): what
        its watchers hear (app/tasks/watch.py), and how a settled task is filed."""
        held = self._held.own.get(task_id)
        if held is not None:
            return await self._own_detailed(owner, held)
        record = await self._held.store.get(owner, task_id)
        if record is None:
            return None
        live = self._held.live.get(task_id)
        if live is not None and live.hidden_until is not None:
            return None  # an input round the client has not answered: no task yet
        if live is None and record.get("inline") is None:
            return None  # running on another replica
        return await self._get(owner, task_id, record, live)
