"""The servers behind one gateway: each one's settings, its app (the routes of
app/serving/server.py over its own graph) and its graph, started and stopped together.

Isolation: every server has its own graph (app/wiring.py): its session pool,
stdio processes, legacy sessions, parked calls and tasks, each bounded by its
own settings, so one server's slow calls, dead process or full pool never
delay or refuse another's callers. What the gateway holds once is shared:
the listener and its connection bound (MCP_SHIM_MAX_CONNECTIONS), the large
answers' byte budget (MCP_SHIM_MAX_ANSWER_BYTES_IN_FLIGHT).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import structlog

from app import wiring
from app.config import Settings
from app.metrics import Metrics
from app.serving.server import GatewayApp, create_app
from app.settings.servers import Servers, ServerSpec, server_settings, where_of
from app.upstream.sessions import era_transport
from app.wiring import Part, Wiring

log = structlog.get_logger("mcp_shim.servers")

PREFIX = "/servers/"


@dataclass(slots=True)
class Server:
    """One server: its entry, its settings, its app; its graph while running."""

    spec: ServerSpec
    settings: Settings
    app: GatewayApp

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def route(self) -> str:
        return PREFIX + self.spec.name

    @property
    def metrics(self) -> Metrics:
        metrics: Metrics = self.app.state.metrics
        return metrics

    @property
    def wiring(self) -> Wiring | None:
        wired: Wiring | None = getattr(self.app.state, "wiring", None)
        return wired


class Registry:
    """The servers by name, in the file's order."""

    def __init__(self, settings: Settings, servers: Servers) -> None:
        where = where_of(settings)
        self.settings = settings
        self.disabled = servers.disabled
        self._servers: dict[str, Server] = {}
        for spec in servers.specs:
            own = server_settings(settings, spec, where)
            app = create_app(own, PREFIX + spec.name + "/mcp", server=spec.name)
            self._servers[spec.name] = Server(spec, own, app)

    def __iter__(self) -> Iterator[Server]:
        return iter(self._servers.values())

    def __len__(self) -> int:
        return len(self._servers)

    def get(self, name: str) -> Server | None:
        return self._servers.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._servers)

    @property
    def only(self) -> Server | None:
        """The one server of a file that names one: served at /mcp too."""
        if len(self._servers) != 1:
            return None
        return next(iter(self._servers.values()))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Every server's graph started (at once: a server that does not answer
        delays no other's start), for as long as the gateway runs; then all
        stopped. A graph that cannot be built stops the start."""
        self._log_entries()
        try:
            async with AsyncExitStack() as stack:
                await self._start(stack)
                try:
                    yield
                finally:
                    for server in self:
                        server.app.state.wiring = None
        finally:
            structlog.contextvars.unbind_contextvars("server")

    async def _start(self, stack: AsyncExitStack) -> None:
        async def start(server: Server) -> None:
            # Its own context: the graph's background tasks log its name.
            structlog.contextvars.bind_contextvars(server=server.name)
            server.app.state.wiring = await stack.enter_async_context(_named(server))

        outcomes = await asyncio.gather(*(start(server) for server in self), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        for server in self:
            wired = server.wiring
            assert wired is not None
            if wiring.announce:
                found = era_transport.describe(wired.upstream.era, wired.pool)
                seen = {f"upstream_{k}": v for k, v in found.items()}
                path = server.route + "/mcp"
                wiring.say_started(wiring.start_line(server.settings, seen, path))

    def _log_entries(self) -> None:
        for server in self:
            if server.spec.ignored:
                log.info(
                    "server_keys_ignored",
                    server=server.name,
                    keys=list(server.spec.ignored),
                    reason="the clients' own keys; nothing to a gateway",
                )
        for name in self.disabled:
            log.info("server_disabled", server=name)


@asynccontextmanager
async def _named(server: Server) -> AsyncIterator[Wiring]:
    """The server's graph running; its stopping logged with its name too (the
    stop runs in the gateway's lifespan, outside the start's context)."""
    part = Part(server.route, server.spec.env, server.spec.cwd)
    async with wiring.running(server.settings, server.metrics, part) as wired:
        try:
            yield wired
        finally:
            structlog.contextvars.bind_contextvars(server=server.name)
