"""One request of the task bridge to a legacy session, read to its response."""

from __future__ import annotations

import contextlib
from typing import Any

from app.call import Message
from app.upstream.errors import UpstreamError, UpstreamProtocolError
from app.upstream.sessions.listener import default_answer
from app.upstream.sessions.pool import PooledSession


def request_message(pooled: PooledSession, method: str, params: dict[str, Any]) -> Message:
    return {"jsonrpc": "2.0", "id": pooled.next_id(), "method": method, "params": params}


async def ask(pooled: PooledSession, method: str, params: dict[str, Any]) -> Message:
    """The upstream's response (a `result` or an `error` member) to one request on
    this session; a server request met on the way gets the listener's default
    answer (ping, or -32601): nobody waits for it here."""
    message = request_message(pooled, method, params)
    exchange = await pooled.session.request(message)
    answered = False
    try:
        async for reply in exchange:
            if "method" in reply:
                if "id" in reply:
                    with contextlib.suppress(UpstreamError):
                        await pooled.session.respond(default_answer(reply))
                continue
            if reply.get("id") == message["id"]:
                answered = True
                return reply
    finally:
        await exchange.aclose(drain=answered)
    raise UpstreamProtocolError(f"the upstream closed the stream without answering {method}")
