"""What the task bridge answers a caller it refuses, or answers at once: the
rejections every part of the bridge gives alike, the reply around a result,
and the one place where an unreachable task store becomes the caller's answer.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import structlog

from app.call import CallState, Message, ModernCall, Outgoing
from app.rejections import INTERNAL_ERROR, INVALID_PARAMS, MISSING_CLIENT_CAPABILITY, Rejection
from app.tasks.store import TaskStoreUnavailable
from translators import tasks as wire

log = structlog.get_logger("mcp_shim.tasks")


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


def limit_reached(call_id: Any, limit: int) -> Rejection:
    log.warning("task_limit_reached", limit=limit, setting="MCP_SHIM_MAX_TASKS_PER_CREDENTIAL")
    return Rejection(
        INTERNAL_ERROR,
        f"Internal error: this caller's credentials already hold {limit} live tasks "
        "(MCP_SHIM_MAX_TASKS_PER_CREDENTIAL); retry when one has finished or expired",
        call_id,
        status=429,
    )


def rejection_reply(rejection: Rejection, state: CallState, outcome: str) -> Outgoing:
    state.outcome = outcome
    return Outgoing(rejection.to_message(), True, rejection.http_status)


def result_reply(call: ModernCall, result: Message, state: CallState) -> Outgoing:
    state.outcome = "ok"
    return Outgoing({"jsonrpc": "2.0", "id": call.id, "result": result}, True)


async def guarded(call: ModernCall, state: CallState, work: Awaitable[Outgoing]) -> Outgoing:
    """The one place where a task store that cannot be reached becomes the
    caller's answer: HTTP 503, -32603 saying so (the store logs the cause)."""
    try:
        return await work
    except TaskStoreUnavailable as exc:
        log.warning("task_request_failed", reason="store_unavailable", method=call.method)
        rejection = Rejection(INTERNAL_ERROR, f"Internal error: {exc.message}", call.id, status=503)
        return rejection_reply(rejection, state, "task_store_unavailable")
