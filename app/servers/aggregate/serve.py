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
from app.config import Settings
from app.metrics import Metrics
from app.server import GatewayApp, create_app
from app.servers.aggregate.build import Built, build, top_settings
from app.servers.aggregate.endpoint import PATH
from app.settings.servers import ServerSpec

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

    def route(self, path: str) -> ASGIApp | None:
        """What serves `path`, when the aggregate does."""
        if path == PATH:
            return self.built.endpoint
        if path in TOP_PATHS:
            return self.app
        return None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The top-level graph, for as long as the servers' graphs run."""
        part = wiring.Part(route="", env={})
        try:
            async with wiring.running(self.settings, self.app.state.metrics, part) as wired:
                self.app.state.wiring = wired
                try:
                    yield
                finally:
                    self.app.state.wiring = None
        finally:
            await self.built.aclose()
