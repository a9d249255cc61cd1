"""A legacy client's messages and its upstream session's, each moved to the
other's revision (translators/translate.py): what the client sends on, what
the upstream answers or asks, and the server requests the client cannot take."""

from __future__ import annotations

import contextlib

from app.call import Message
from app.cluster.session import LegacySession
from app.fronts.legacy import checks as front
from app.rejections import METHOD_NOT_FOUND
from app.upstream.errors import UpstreamError
from translators import translate


def upstream_message(
    session: LegacySession, item: front.LegacyNotification | front.LegacyResponse
) -> Message | None:
    """What goes upstream for a client's notification or response; None: nothing."""
    cv, uv = session.client_version, session.upstream_version
    if isinstance(item, front.LegacyNotification):
        if item.method == "notifications/initialized":
            return None  # the gateway sent its own when it opened the upstream session
        return translate.notification(item.message, cv, uv)
    method = session.server_requests.pop(item.id, None)
    message = item.message
    error = message.get("error")
    if isinstance(error, dict):
        return {**message, "error": translate.error(error, cv, uv)}
    result = message.get("result")
    if method is not None and isinstance(result, dict):
        return {**message, "result": translate.result(result, method, cv, uv)}
    return message


def response(session: LegacySession, method: str, message: Message) -> Message:
    cv, uv = session.client_version, session.upstream_version
    error = message.get("error")
    if isinstance(error, dict):
        return {
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": translate.error(error, uv, cv, method),
        }
    result = message.get("result")
    translated = translate.result(result if isinstance(result, dict) else {}, method, uv, cv)
    return {"jsonrpc": "2.0", "id": message["id"], "result": translated}


async def to_client(session: LegacySession, message: Message) -> Message | None:
    """A server request or notification in the client's revision; None: not for it."""
    cv, uv = session.client_version, session.upstream_version
    method = message.get("method")
    if "id" not in message:
        return translate.notification(message, uv, cv)
    if not isinstance(method, str) or method not in cv.features.server_requests:
        await refuse_server_request(
            session, message, f"the client's protocol version {cv.name} has no such request"
        )
        return None
    session.remember_server_request(message["id"], method)
    # The client's answer is a POST of its own, relayed to the owner: told first.
    await session.tell_owner("server", message["id"], method)
    return translate.request(message, uv, cv)


async def refuse_server_request(session: LegacySession, request: Message, why: str) -> None:
    """Answer a request of the upstream that cannot reach the client (ping: {})."""
    if request.get("method") == "ping":
        reply: Message = {"jsonrpc": "2.0", "id": request["id"], "result": {}}
    else:
        method = str(request.get("method"))[:64]
        reply = {
            "jsonrpc": "2.0",
            "id": request["id"],
            "error": {"code": METHOD_NOT_FOUND, "message": f"{method} refused: {why}"},
        }
    with contextlib.suppress(UpstreamError):
        await session.upstream.session.respond(reply)
