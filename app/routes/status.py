"""What an operator and an OAuth client ask the gateway about itself: liveness,
readiness, metrics, and the protected resource's metadata (RFC 9728)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.metrics import Metrics
from app.routes.edge import Edge
from app.upstream.sessions import era_transport
from app.wiring import Wiring


def _wiring(request: Request) -> Wiring:
    wiring: Wiring = request.app.state.wiring
    return wiring


async def healthz(request: Request) -> Response:
    # The upstream's era as last seen; never a probe (liveness stays local).
    wiring = _wiring(request)
    upstream = era_transport.describe(wiring.upstream.era, wiring.pool)
    return JSONResponse({"status": "ok", "upstream": upstream})


async def readyz(request: Request) -> Response:
    ready, body = await readiness(_wiring(request))
    return JSONResponse(body, status_code=200 if ready else 503)


async def readiness(wiring: Wiring) -> tuple[bool, dict[str, Any]]:
    """Whether this graph's upstream answers, and /readyz's body saying so."""
    outcome = await wiring.readiness.check()
    body = outcome.body
    if isinstance(body.get("upstream"), dict):
        # The era as probed (app/upstream/sessions/era.py), not as a session's version shows it.
        era = era_transport.describe(wiring.upstream.era, wiring.pool)
        known = {k: v for k, v in era.items() if v is not None}
        body = {**body, "upstream": {**body["upstream"], **known}}
    return outcome.ready, body


class StatusRoutes:
    def __init__(self, edge: Edge, metrics: Metrics) -> None:
        self._edge = edge
        self._metrics = metrics

    async def metrics(self, request: Request) -> Response:
        body, content_type = self._metrics.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    async def protected_resource_metadata(self, request: Request) -> Response:
        # Read from the path, not declared as a parameter: a declared one makes
        # FastAPI build a pydantic field, importing pydantic.v1 (1.5 MB of RSS).
        suffix: str = request.path_params["suffix"]
        if suffix.rstrip("/") not in self._edge.metadata_paths:
            return JSONResponse({"error": "not_found"}, status_code=404)
        refused = self._edge.host_refused(request.headers)
        if refused is not None:
            return refused
        relay = _wiring(request).auth
        if relay is None:
            return JSONResponse(
                {"error": "not_found", "error_description": "the upstream is not an HTTP server"},
                status_code=404,
            )
        status, body = await relay.answer(self._edge.gateway_url(request))
        return JSONResponse(body, status_code=status)
