"""A task's answers moved between the upstream's version and the client's
(app/tasks/bridge.py): the payload of a task, and a `tools/call` the upstream
answered itself instead of creating the task. Pure but for the call's state."""

from __future__ import annotations

from app.call import CallState, Outgoing
from app.fronts.modern.checks import ModernCall
from app.rejections import http_status_for
from app.tasks.live import LiveTask
from app.upstream.base import Message
from app.upstream.pool import PooledSession
from translators import translate
from translators.registry import Version


def payload_up(live: LiveTask) -> Message:
    """The tasks/result response with its result in the client's version."""
    return payload_in(live.payload or {}, live.pooled.version, live.client_version)


def payload_in(payload: Message, src: Version, dst: Version) -> Message:
    """A tools/call response's result or error moved to the client's version."""
    result = payload.get("result")
    if isinstance(result, dict):
        return {**payload, "result": translate.result(result, "tools/call", src, dst)}
    error = payload.get("error")
    if isinstance(error, dict):
        return {**payload, "error": translate.error(error, src, dst)}
    return payload


def upstream_answer(
    call: ModernCall, pooled: PooledSession, reply: Message, state: CallState
) -> Outgoing:
    """The upstream answered the call itself (an error, or a result at once)."""
    version: Version = pooled.version
    error = reply.get("error")
    if isinstance(error, dict):
        translated = translate.error(error, version, call.version)
        code = translated.get("code")
        state.outcome = f"error {code}"
        status = http_status_for(code) if isinstance(code, int) else 200
        return Outgoing({"jsonrpc": "2.0", "id": call.id, "error": translated}, True, status)
    result = reply.get("result")
    translated_result = translate.result(
        result if isinstance(result, dict) else {}, "tools/call", version, call.version
    )
    state.outcome = "ok"
    return Outgoing({"jsonrpc": "2.0", "id": call.id, "result": translated_result}, True)


__all__ = ["payload_in", "payload_up", "upstream_answer"]
