"""Legacy clients (2024-11-05 .. 2025-11-25) on the gateway's endpoint: the
entry points of `POST`, `GET` and `DELETE /mcp`.

The second client-side front, beside the modern one (app/fronts/modern/); both
meet the same upstream seam (app/upstream/base.py). A legacy client's session
is the gateway's (`sessions`), with one upstream session of its own behind it
(`opening`); every message is translated between the client's negotiated
version and the upstream session's, both ways (`messages`), so a legacy client
sees only what its revision defines. A call and what comes back for it is
`calls`, a batch's requests `batches`, the GET stream `stream`, the answers
and refusals `replies`. Everything goes through `Session` (request, notify,
respond, listen, close): nothing here knows the upstream's transport. What
this front shares with the HTTP+SSE front (the sessions, the calls, the
limits, the relay to another replica) is the `LegacyService` (`service`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import structlog
from starlette.responses import Response

from app import logs
from app.call import Outgoing
from app.cluster.replicas import HOP_HEADER
from app.cluster.session import LegacySession, shares_integer_text
from app.fronts.legacy import batches, opening, stream
from app.fronts.legacy import checks as front
from app.fronts.legacy.replies import (
    AtLimit,
    guarded,
    json_list,
    json_response,
    refuse,
    session_not_found,
)
from app.fronts.legacy.service import LegacyService
from app.fronts.shared.answer import CallAnswer, sse_event
from app.rejections import INVALID_REQUEST, Rejection

log = structlog.get_logger("mcp_shim.legacy")


def _opens_session(body: Any) -> bool:
    """An `initialize` (alone or in a batch) is served here, whatever id it carries."""
    if isinstance(body, list):
        return front.holds_initialize(body)
    return isinstance(body, dict) and body.get("method") == "initialize"


def _plain_request(body: Any) -> bool:
    """A request any worker can send upstream on a guest copy of its session: not a
    batch, a notification, a response to a server request, nor `initialize`."""
    return (
        isinstance(body, dict)
        and "id" in body
        and isinstance(body.get("method"), str)
        and body["method"] != "initialize"
        # "1" goes upstream from the owner, where IdTurns keeps it apart from 1.
        and not shares_integer_text(body["id"])
    )


class LegacyFront:
    def __init__(self, service: LegacyService) -> None:
        # Shared with the HTTP+SSE front (app/fronts/legacy/service.py).
        self._service = service
        self._sessions = service.sessions
        self._calls = service.calls

    # -- POST /mcp ---------------------------------------------------------

    @guarded
    async def post(
        self,
        claim: front.Claim,
        headers: Mapping[str, str],
        *,
        sse_ok: bool,
        json_ok: bool,
        gateway_url: str | None = None,
    ) -> Response:
        authorization = headers.get("authorization")
        if claim.parse_error:
            return refuse(front.parse_error())
        unfit = front.check_received(claim, headers, self._service.max_json_depth)
        if unfit is not None:
            return refuse(unfit)
        guest: LegacySession | None = None
        if self._sessions.copies.joins and _plain_request(claim.body):
            # Served here on a guest copy of another worker's session, if it can be.
            guest = await self._sessions.copies.guest(
                claim.session_id, authorization, HOP_HEADER in headers
            )
        if guest is None and not _opens_session(claim.body):
            relayed = self._service.relayed(
                "POST",
                "/mcp",
                claim.session_id,
                headers,
                claim.raw,
                request_id=front.readable_id(claim.body),
            )
            if relayed is not None:
                return relayed
        if isinstance(claim.body, list):
            return await self._batch(claim, headers, sse_ok=sse_ok, json_ok=json_ok)
        message = front.check_message(claim.body)
        if isinstance(message, Rejection):
            return refuse(message)
        if isinstance(message, front.LegacyRequest) and message.method == "initialize":
            return await self._initialize(message, authorization, sse_ok=sse_ok, json_ok=json_ok)
        session = guest or self._find(claim.session_id, authorization)
        if session is None:
            return refuse(session_not_found(getattr(message, "id", None)))
        refusal = front.check_version_header(
            headers.get(front.VERSION_HEADER), session.client_version
        )
        if refusal is not None:
            return refuse(refusal.with_id(getattr(message, "id", None)))
        if isinstance(message, front.LegacyNotification):
            return await self._notify(session, message)
        if isinstance(message, front.LegacyResponse):
            return await self._respond(session, message)
        return self._answer(
            self._calls.call(
                session, message, resumable=sse_ok, streamed=sse_ok, gateway_url=gateway_url
            ),
            message.method,
            session,
            sse_ok,
            json_ok,
        )

    def _find(self, session_id: str | None, authorization: str | None) -> LegacySession | None:
        if session_id is None:
            return None
        return self._sessions.find(session_id, authorization)

    async def _initialize(
        self,
        request: front.LegacyRequest,
        authorization: str | None,
        *,
        sse_ok: bool,
        json_ok: bool,
    ) -> Response:
        opened = await opening.open_session(
            self._sessions, self._service.offered, request, authorization
        )
        if isinstance(opened, AtLimit):
            return refuse(opened, {"retry-after": str(opened.retry_after_s)})
        if isinstance(opened, Rejection):
            return refuse(opened)
        session, answer = opened
        headers = {front.SESSION_HEADER: session.id}
        if json_ok or not sse_ok:
            return json_response(answer, 200, headers)
        return Response(sse_event(answer), media_type="text/event-stream", headers=headers)

    async def _notify(self, session: LegacySession, note: front.LegacyNotification) -> Response:
        # 2025-11-25 streamable-http "Sending Messages to the Server": an accepted
        # notification or response gets 202 Accepted with no body.
        failure = await self._calls.deliver(session, note)
        return Response(status_code=202) if failure is None else refuse(failure)

    async def _respond(self, session: LegacySession, reply: front.LegacyResponse) -> Response:
        failure = await self._calls.deliver(session, reply)
        return Response(status_code=202) if failure is None else refuse(failure)

    # -- a request and what the upstream sends back for it ------------------

    def _answer(
        self,
        events: AsyncGenerator[Outgoing, None],
        method: str,
        session: LegacySession,
        sse_ok: bool,
        json_ok: bool,
    ) -> CallAnswer:
        """`events`, as a legacy client receives them (`call`, `for_client`),
        answered, and the `call` line logged when the answer is done."""
        started = time.perf_counter()

        def done(status: int, ending: str | None) -> None:
            # The line structlog's chain would render, without the chain (app/logs.py).
            logs.call_line(
                log,
                {
                    "era": "legacy",
                    "method": method[:64],
                    "client_version": session.client_version.name,
                    "upstream_version": session.upstream_version.name,
                    "outcome": ending or "done",
                    "status": status,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                },
            )

        return CallAnswer(
            events,
            accepts_sse=sse_ok,
            accepts_json=json_ok,
            on_done=done,
            write_timeout_s=self._service.write_timeout_s,
        )

    # -- GET /mcp: the session's server stream -------------------------------

    @guarded
    async def get(
        self, headers: Mapping[str, str], *, sse_ok: bool, gateway_url: str | None = None
    ) -> Response:
        unfit = front.check_header_values(headers)
        if unfit is not None:
            return refuse(unfit)
        session_id = headers.get(front.SESSION_HEADER)
        relayed = self._service.relayed("GET", "/mcp", session_id, headers, long_lived=True)
        if relayed is not None:
            return relayed
        session = self._find(session_id, headers.get("authorization"))
        if session is None:
            return refuse(session_not_found())
        if not sse_ok:
            return refuse(
                Rejection(
                    INVALID_REQUEST,
                    "Not Acceptable: the server stream is text/event-stream; send "
                    "Accept: text/event-stream",
                    status=406,
                )
            )
        refusal = front.check_version_header(
            headers.get(front.VERSION_HEADER), session.client_version
        )
        if refusal is not None:
            return refuse(refusal)
        last_event_id = headers.get(front.LAST_EVENT_ID_HEADER)
        return self._answer(
            self._calls.for_client(
                stream.server_stream(
                    self._sessions, session, last_event_id, self._service.keepalive_s
                ),
                None,
                gateway_url,
            ),
            "GET",
            session,
            True,
            True,
        )

    # -- DELETE /mcp ---------------------------------------------------------

    @guarded
    async def delete(self, headers: Mapping[str, str]) -> Response:
        unfit = front.check_header_values(headers)
        if unfit is not None:
            return refuse(unfit)
        session_id = headers.get(front.SESSION_HEADER)
        relayed = self._service.relayed("DELETE", "/mcp", session_id, headers)
        if relayed is not None:
            return relayed
        session = self._find(session_id, headers.get("authorization"))
        if session is None:
            return refuse(session_not_found())
        await self._sessions.end(session, "client_deleted")
        return Response(status_code=200)

    # -- batches -------------------------------------------------------------

    async def _batch(
        self, claim: front.Claim, headers: Mapping[str, str], *, sse_ok: bool, json_ok: bool
    ) -> Response:
        """A JSON-RPC batch (2025-03-26 basic/index "Batching"): each request sent
        upstream on its own and concurrently, the responses matched by id and
        answered as one; notifications and responses in it forwarded."""
        items: list[Any] = claim.body
        session = self._find(claim.session_id, headers.get("authorization"))
        if session is None:
            if claim.session_id is not None and not front.holds_initialize(items):
                return refuse(session_not_found())
            # Served by no session: refused by the batch rules (an initialize inside).
        members = self._service.batch_members(items, session)
        if isinstance(members, Rejection):
            return refuse(members)
        assert session is not None
        refusal = front.check_version_header(
            headers.get(front.VERSION_HEADER), session.client_version
        )
        if refusal is not None:
            return refuse(refusal)
        requests = [m for m in members if isinstance(m, front.LegacyRequest)]
        for member in members:
            if isinstance(member, front.LegacyNotification | front.LegacyResponse):
                failure = await self._calls.deliver(session, member)
                if failure is not None:
                    return refuse(failure)
        if not requests:
            # 2025-03-26 streamable-http: only notifications or responses: 202.
            return Response(status_code=202)
        log.info("legacy_batch", size=len(items), requests=len(requests))
        if sse_ok:
            merged = self._calls.for_client(batches.merged(self._calls, session, requests), None)
            return self._answer(merged, "batch", session, True, False)
        answers = await asyncio.gather(
            *(batches.collect(self._calls, session, r) for r in requests)
        )
        return json_list(answers)
