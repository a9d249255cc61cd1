"""The methods of the routes a browser may reach (/mcp, HTTP+SSE, the OAuth
resource metadata): the ones each serves, OPTIONS (a CORS preflight, else a
plain OPTIONS), and 405 with the route's own Allow for any other.

Each such route is one Starlette route for every method, dispatched here:
Starlette's own 405 lists the methods of the first route it finds for the
path, which for /mcp missed the POST that app/serving/server.py's GatewayApp serves
outside the router."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from app.routes.cors import Cors, allow_value
from app.routes.edge import Edge

Endpoint = Callable[[Request], Awaitable[Response]]

# /mcp: POST (every client, served by GatewayApp), a legacy session's GET and DELETE.
MCP_ALLOW = allow_value(("GET", "POST", "DELETE", "OPTIONS"))


class Methods:
    def __init__(self, edge: Edge, cors: Cors) -> None:
        self._edge = edge
        self._cors = cors

    def route(
        self,
        path: str,
        endpoints: Mapping[str, Endpoint],
        *,
        allow: str | None = None,
        legacy_client: bool = False,
    ) -> Route:
        """The route of `path` for every method: `endpoints`' own, OPTIONS,
        else 405. `allow`: the path's Allow when it serves more than
        `endpoints` (POST /mcp); `legacy_client`: refusals are legacy-shaped."""
        served = dict(endpoints)
        dispatch = _Dispatch(
            self, served, allow or allow_value([*served, "OPTIONS"]), legacy_client
        )
        # An ASGI app, not a function: Starlette routes a function by method.
        return Route(path, dispatch)

    def refused(self, request: Request, allow: str) -> Response:
        return self._edge.method_refused(request, allow)

    def options(self, request: Request, allow: str, legacy_client: bool) -> Response:
        """A CORS preflight (Origin and Access-Control-Request-Method): for an
        allowed Origin its answer (the Allow-Origin comes with every answer to
        it, app/serving/server.py), else the 403 a request from it gets. Otherwise a
        plain OPTIONS: the route's methods (RFC 9110 9.3.7)."""
        headers = request.headers
        refused = self._edge.host_or_origin_refused(headers, legacy_client)
        if refused is not None:
            return refused
        method = headers.get("access-control-request-method")
        if "origin" not in headers or method is None:
            return Response(status_code=204, headers={"allow": allow})
        preflight = self._cors.preflight_headers(
            allow,
            headers.get("access-control-request-headers"),
            headers.get("access-control-request-private-network") == "true",
        )
        return Response(status_code=204, headers=preflight)


class _Dispatch:
    """One path's methods, as an ASGI app."""

    def __init__(
        self, methods: Methods, served: dict[str, Endpoint], allow: str, legacy_client: bool
    ) -> None:
        self._methods = methods
        self._served = served
        self._allow = allow
        self._legacy_client = legacy_client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        # Its log lines carry the request's id, refusals made here too.
        structlog.contextvars.bind_contextvars(request_id=request.state.request_id)
        endpoint = self._served.get(request.method)
        if endpoint is not None:
            response = await endpoint(request)
        elif request.method == "OPTIONS":
            response = self._methods.options(request, self._allow, self._legacy_client)
        else:
            response = self._methods.refused(request, self._allow)
        await response(scope, receive, send)
