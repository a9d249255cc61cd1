"""The deprecated HTTP+SSE transport of 2024-11-05 clients (app/fronts/http_sse/front.py):
the stream a client opens, and the messages it posts to its channel."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from app.routes.edge import Edge
from app.wiring import Wiring


class SseRoutes:
    def __init__(self, edge: Edge) -> None:
        self._edge = edge

    async def open(self, request: Request) -> Response:
        refused = self._edge.host_or_origin_refused(request.headers, legacy_client=True)
        if refused is not None:
            return refused
        wiring: Wiring = request.app.state.wiring
        address = request.client.host if request.client is not None else None
        return wiring.http_sse.open(request.headers, address)

    async def message(self, request: Request) -> Response:
        edge = self._edge
        refused = edge.host_or_origin_refused(request.headers, legacy_client=True)
        if refused is not None:
            return refused
        body = await edge.body_or_refusal(request, legacy_client=True)
        if isinstance(body, Response):
            return body
        wiring: Wiring = request.app.state.wiring
        session_id = request.query_params.get("session_id")
        return await wiring.http_sse.post(
            session_id, body, request.headers, gateway_url=edge.gateway_url(request)
        )
