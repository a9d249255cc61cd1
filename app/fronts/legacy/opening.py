"""A legacy client's `initialize`: a session of the gateway with an upstream
session of its own behind it, and the answer in the negotiated version."""

from __future__ import annotations

import structlog

from app.call import Message
from app.cluster.session import LegacySession
from app.fronts.legacy import checks as front
from app.fronts.legacy.replies import AtLimit, upstream_failure
from app.fronts.legacy.sessions import LegacySessions
from app.rejections import INTERNAL_ERROR, Rejection
from app.upstream.errors import PoolExhausted, UpstreamAuthChallenge, UpstreamError
from translators import translate
from translators.registry import Version

log = structlog.get_logger("mcp_shim.legacy")


async def open_session(
    sessions: LegacySessions,
    offered: Version,
    request: front.LegacyRequest,
    authorization: str | None,
) -> tuple[LegacySession, Message] | Rejection:
    """Answer `initialize`: a new session with its own upstream session, and the
    initialize response in the negotiated version."""
    init = front.check_initialize(request)
    if isinstance(init, Rejection):
        return init
    # The client's capabilities as the upstream's revision expresses them:
    # what that revision does not define is dropped.
    upstream_caps = translate.client_capabilities(init.capabilities, init.version, offered)
    try:
        session = await sessions.open(
            init.version, upstream_caps, offered, authorization, init.client_info
        )
    except UpstreamAuthChallenge:
        raise  # the client's to answer (`guarded`): its OAuth flow starts there
    except PoolExhausted as exc:
        # The gateway's own bound, not the upstream's failure.
        log.warning("legacy_initialize_refused", error=exc.message, status=exc.status)
        return AtLimit(
            INTERNAL_ERROR,
            f"Internal error: the gateway is at a limit ({exc.message})",
            request.id,
            status=exc.status,
            retry_after_s=exc.retry_after_s,
        )
    except UpstreamError as exc:
        log.warning("legacy_initialize_failed", error=exc.message, status=exc.status)
        return upstream_failure(exc, request.id)
    upstream = session.upstream
    try:
        result = translate.result(
            upstream.init_result, "initialize", upstream.version, session.client_version
        )
    except BaseException:
        # Its id never reached the client: nobody else would end it before it idles out.
        await sessions.end(session, "initialize_failed")
        raise
    result = {**result, "protocolVersion": session.client_version.name}
    log.info(
        "legacy_initialize",
        requested=init.requested[:40],
        client_version=session.client_version.name,
        upstream_version=upstream.version.name,
    )
    return session, {"jsonrpc": "2.0", "id": request.id, "result": result}
