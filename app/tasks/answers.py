"""A task's answers moved between the upstream's version and the client's
(app/tasks/bridge.py): the payload of a task, a `tools/call` the upstream
answered itself instead of creating the task (pure but for the call's state),
and the client's answers to a task's questions, posted upstream."""

from __future__ import annotations

import contextlib
from typing import Any

from app.call import CallState, Message, ModernCall, Outgoing
from app.mrtr import answers as mrtr_answers
from app.quoting import quoted
from app.rejections import INVALID_PARAMS, Rejection, http_status_for
from app.tasks import own
from app.tasks.live import LiveTask
from app.upstream.errors import UpstreamError
from app.upstream.sessions.pool import PooledSession
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


async def feed(
    call_id: Any, live: LiveTask | own.OwnTask | None, responses: Any
) -> Rejection | None:
    """Each answer to a question of the task posted upstream; keys the task
    does not know are ignored; an answer that does not fit refuses them all."""
    if not isinstance(responses, dict) or not all(isinstance(v, dict) for v in responses.values()):
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


__all__ = ["feed", "payload_in", "payload_up", "upstream_answer"]
