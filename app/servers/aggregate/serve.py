"""The aggregated `/mcp` of a gateway with many servers, as the servers app
(app/servers/app.py) serves it: the aggregate's endpoint (endpoint.py) at
`PATH`, and the top-level gateway graph in front of it at `/mcp`, `/sse` and
`/messages`, started after the servers' own graphs and stopped before them.

Served when `MCP_SHIM_AGGREGATE` is true (the default), the file names more
than one server and at least one of them is a member. A file of one server
serves it at `/mcp` as it is, unprefixed (app/servers/app.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final

from starlette.types import ASGIApp

from app import wiring
from app.cluster.replicas import NOTE_PATH
from app.config import Settings
from app.metrics import Metrics
from app.servers.aggregate.build import Built, build, top_settings
from app.servers.aggregate.direct import Direct
from app.servers.aggregate.direct_legacy import LegacyDirect
from app.servers.aggregate.endpoint import PATH
from app.servers.aggregate.loopback import LoopbackClient
from app.serving.server import GatewayApp, create_app
from app.settings.servers import ServerSpec
from app.upstream.httpclient.client import UpstreamClient, build_client

# The top-level graph's routes: a single gateway's.
TOP_PATHS: Final = frozenset({"/mcp", "/sse", "/messages"})


def wanted(settings: Settings, specs: Sequence[ServerSpec]) -> bool:
    return settings.aggregate and len(specs) > 1 and any(s.aggregate for s in specs)


class Aggregate:
    """The aggregate's endpoint and the top-level graph's app."""

    def __init__(
        self,
        settings: Settings,
        specs: Sequence[ServerSpec],
        metrics: Metrics,
        apps: Mapping[str, ASGIApp] | None = None,
    ) -> None:
        self.built: Built = build(settings, specs, metrics, apps)
        self.settings = top_settings(settings)
        self.app: GatewayApp = create_app(self.settings)
        # A modern call of one member's tool or prompt goes straight to its
        # route (direct.py) when the members' apps are in this process.
        aggregator = self.built.aggregator
        members = {n: a for n, a in (apps or {}).items() if n in aggregator.table().members}
        self.mcp: ASGIApp = self.app
        if members:
            limits = (settings.max_body_bytes, settings.read_timeout_s)
            legacy = LegacyDirect(self.app, aggregator, members, *limits)
            self.mcp = Direct(self.app, aggregator, members, *limits, legacy)
        # What the aggregate serves, by path: one lookup per request.
        self.paths: dict[str, ASGIApp] = {p: self.app for p in TOP_PATHS}
        self.paths["/mcp"] = self.mcp
        self.paths[PATH] = self.built.endpoint
        # The aggregated /mcp's graph owns its legacy sessions under the
        # worker's own URL (no route): other workers' notes reach it there.
        self.paths[NOTE_PATH] = self.app

    def route(self, path: str) -> ASGIApp | None:
        """What serves `path`, when the aggregate does."""
        return self.paths.get(path)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The top-level graph, for as long as the servers' graphs run."""
        # Its upstream, the aggregate's endpoint, called in process (loopback.py).
        url = str(self.settings.upstream_url)
        client = LoopbackClient(url, self.built.endpoint, _http_client(self.settings))
        part = wiring.Part(route="", env={}, client=client.as_client())
        try:
            async with wiring.running(self.settings, self.app.state.metrics, part) as wired:
                if self.mcp is not self.app:
                    # A legacy client session's calls are served straight at the
                    # members by the worker that opened it (direct_legacy.py):
                    # another worker hands the connection to it, no guest copy.
                    wired.legacy_sessions.copies.refuse_joins()
                    wired.replicas.relay.hand_over = True
                self.app.state.wiring = wired
                try:
                    yield
                finally:
                    self.app.state.wiring = None
        finally:
            await self.built.aclose()


def _http_client(settings: Settings) -> UpstreamClient:
    """The client the top-level graph would have had: for what is not a POST
    to the aggregate's endpoint (an OAuth metadata GET)."""
    return build_client(
        connect_timeout_s=settings.connect_timeout_s,
        max_connections=settings.max_upstream_connections,
        transport=settings.upstream_http_transport,
        keepalive_s=settings.upstream_keepalive_s,
        max_answer_bytes=settings.max_upstream_answer_bytes,
    )
