"""A legacy session's server stream (`GET /mcp`): the upstream session's
messages relayed in the client's revision, with their event ids, and a
keep-alive comment across quiet periods."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import structlog

from app.call import Message, Outgoing
from app.cluster.session import Lease, LegacySession
from app.fronts.legacy import messages
from app.fronts.legacy.reads import reads
from app.fronts.legacy.replies import session_not_found, upstream_failure
from app.fronts.legacy.sessions import LegacySessions
from app.rejections import INTERNAL_ERROR, Rejection
from app.upstream.base import Exchange
from app.upstream.errors import (
    SessionExpired,
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamHttpError,
)

log = structlog.get_logger("mcp_shim.legacy")


async def server_stream(
    sessions: LegacySessions,
    session: LegacySession,
    last_event_id: str | None,
    keepalive_s: float,
) -> AsyncGenerator[Outgoing, None]:
    async with Lease(session, stream=True):
        try:
            exchange: Exchange = await session.upstream.session.listen(last_event_id)
        except UpstreamAuthChallenge:
            raise
        except SessionExpired:
            await sessions.end(session, "upstream_session_expired")
            refusal = session_not_found()
            yield Outgoing(refusal.to_message(), True, refusal.http_status)
            return
        except UpstreamHttpError as exc:
            # 405 (no GET stream upstream), 409 (one is open already): the client's to know.
            status = exc.http_status if 400 <= exc.http_status < 500 else 502
            failure = Rejection(INTERNAL_ERROR, exc.message, status=status)
            yield Outgoing(failure.to_message(), True, status)
            return
        except UpstreamError as exc:
            failure = upstream_failure(exc, None)
            yield Outgoing(failure.to_message(), True, failure.http_status)
            return
        relayed = reads(aiter(exchange), quiet_s=keepalive_s)
        try:
            yield Outgoing({}, keepalive=True)  # the stream is open: headers now
            async for message in relayed:
                if message is None:
                    # streamable-http "Receiving Messages": a comment line (`:`)
                    # keeps a quiet stream open through intermediaries. No
                    # `id:`, so the client's Last-Event-ID stays the last
                    # event's, which the upstream can resume from.
                    yield Outgoing({}, keepalive=True)
                    continue
                if "method" not in message:
                    # An answer replayed after Last-Event-ID, or nothing of ours.
                    method = session.open_requests.pop(message.get("id"), None)
                    if method is None:
                        continue
                    out: Message | None = messages.response(session, method, message)
                else:
                    out = await messages.to_client(session, message)
                if out is not None:
                    yield Outgoing(out, event_id=exchange.last_event_id)
        except UpstreamError as exc:
            log.info("legacy_server_stream_dropped", error=exc.message)
        finally:
            await relayed.aclose()
            await exchange.aclose()
