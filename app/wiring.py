"""The gateway's objects, built from `Settings` in one place, started and stopped
together.

`running` is the app's lifespan (app/serving/server.py): it builds the graph (the
upstream as app/upstream/choice.py chooses it, the session pool, the readiness
check, the OAuth relay, the subscription hub, the replicas, the legacy and
HTTP+SSE fronts, the MRTR bridge and the gateway), starts what runs in the
background, and stops everything in the order that lets each part end its work
cleanly. The routes (app/routes/) read the `Wiring` it yields, and nothing else.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import structlog

from app.cluster.forwarding import ReplicaForwarder
from app.cluster.notes import Notes
from app.cluster.replicas import Replicas, build_replicas
from app.config import Settings
from app.fronts.base import CallFront, ChannelFront, SessionFront
from app.fronts.http_sse.front import MESSAGES_PATH, HttpSseFront
from app.fronts.legacy.bound import Limits
from app.fronts.legacy.front import LegacyFront
from app.fronts.legacy.service import LegacyService
from app.fronts.legacy.sessions import LegacySessions
from app.fronts.modern.front import ModernFront
from app.fronts.modern.gateway import Gateway
from app.fronts.shared.auth import MAX_METADATA_BYTES, AuthRelay
from app.metrics import Metrics
from app.mrtr.bridge import Bridge, build_bridge
from app.mrtr.forwarder import Forwarder
from app.subscriptions.hub import SubscriptionHub
from app.tasks.bridge import TaskBridge, TaskSettings
from app.tasks.factory import build_task_store, is_shared
from app.tasks.store import MemoryTaskStore
from app.upstream.choice import Upstream, build_upstream
from app.upstream.httpclient.client import UpstreamClient
from app.upstream.sessions import era_transport
from app.upstream.sessions.pool import SessionPool
from app.upstream.sessions.readiness import ReadinessCheck
from app.upstream.streamable_http.transport import StreamableHttpTransport
from translators.registry import Version, get_version

log = structlog.get_logger("mcp_shim.http")

# Whether this process says the gateway's start line: the single process, or
# worker 0 of several (app/serving/cli.py clears it for the others), so a gateway
# says it once, not once per worker.
announce = True

# The routes use each front only through its interface (app/fronts/base.py);
# this fails type checking when a front stops fitting it.
_FRONTS: tuple[type[CallFront], type[SessionFront], type[ChannelFront]] = (
    ModernFront,
    LegacyFront,
    HttpSseFront,
)


@dataclass(frozen=True, slots=True)
class Part:
    """The graph of one of many servers (app/servers): its routes' prefix
    (`/servers/NAME`), and a stdio server's own variables and directory. Such a
    graph says no start line and serves no metrics port of its own: the
    gateway does, for all of them."""

    route: str
    env: Mapping[str, str]
    cwd: str | None = None
    # The HTTP upstream's client, when not the settings' (the aggregated /mcp's).
    client: UpstreamClient | None = None


@dataclass(frozen=True, slots=True)
class Wiring:
    """Every object a route hands a request to, and what they share."""

    settings: Settings
    offered: Version  # MCP_SHIM_UPSTREAM_PROTOCOL_VERSION
    metrics: Metrics
    upstream: Upstream
    pool: SessionPool
    readiness: ReadinessCheck
    auth: AuthRelay | None  # None: the upstream is not an HTTP server
    subscriptions: SubscriptionHub
    replicas: Replicas
    legacy_sessions: LegacySessions
    legacy: LegacyFront
    http_sse: HttpSseFront
    bridge: Bridge
    tasks: TaskBridge
    gateway: Gateway
    # A modern client's call: passed through, or the gateway's (app/fronts/modern/front.py).
    modern: ModernFront

    async def drain(self) -> None:
        """Before the HTTP server stops: end the long-lived listen streams with
        their graceful closing result, and give running tasks the same grace to
        finish, their results filed in the task store (app/serving/server.py `drain`).
        Clients may still poll meanwhile: the server still serves."""
        grace_s = self.settings.shutdown_grace_s
        await asyncio.gather(
            self.subscriptions.close_all(grace_s),
            self.tasks.reaper.wind_down(grace_s, shared=is_shared(self.settings)),
        )

    async def aclose(self) -> None:
        """Everything stopped, the fronts before what they call."""
        await self.metrics.stop()
        # Normally already done by `drain` before the server stopped serving.
        await self.subscriptions.aclose(self.settings.shutdown_grace_s)
        # Before the bridge: the tasks the gateway runs hold the bridge's lanes.
        # Upstream tasks cancelled, their sessions released, the task store closed.
        await self.tasks.aclose()
        await self.bridge.aclose()  # parked exchanges ended cleanly, lanes closed
        await self.http_sse.aclose()
        await self.legacy_sessions.aclose()  # legacy clients' upstream sessions DELETEd
        await self.replicas.aclose()
        await self.gateway.aclose()
        await self.pool.aclose()
        await self.upstream.aclose()
        log.info("gateway_stopped")


def offered_version(settings: Settings) -> Version:
    offered = get_version(settings.upstream_protocol_version)
    assert offered is not None  # validated in Settings
    return offered


@asynccontextmanager
async def running(
    settings: Settings, metrics: Metrics, part: Part | None = None
) -> AsyncIterator[Wiring]:
    """The graph built and started, for as long as the app runs; then stopped.
    `part`: the graph is one server's of many."""
    if part is None:
        upstream = build_upstream(settings)
    else:
        upstream = build_upstream(settings, part.env, part.cwd, part.client)
    messages = MESSAGES_PATH if part is None else part.route + MESSAGES_PATH
    try:
        wiring = _build(settings, metrics, upstream, messages)
    except BaseException:
        await upstream.aclose()
        raise
    try:
        found = await era_transport.first_look(upstream.era, wiring.pool)
        log.info(
            "gateway_started",
            upstream_version_offered=wiring.offered.name,
            port=settings.port,
            **found,
        )
        if announce and part is None:
            say_started(start_line(settings, found))
        metrics.start(
            wiring.pool,
            wiring.bridge,
            wiring.subscriptions,
            settings.host,
            settings.metrics_port if part is None else None,
            tasks=wiring.tasks,
        )
        yield wiring
    finally:
        await wiring.aclose()


def start_line(settings: Settings, found: Mapping[str, Any], path: str = "/mcp") -> str:
    """`mcp-shim listening on http://HOST:PORT/mcp -> UPSTREAM (ERA VERSION)`:
    the upstream's URL without credentials or query, or a stdio server's
    program alone (its arguments may hold tokens); `unknown` for what the
    first probe did not learn."""
    host = settings.host if ":" not in settings.host else f"[{settings.host}]"
    if settings.upstream_url is not None:
        url = urlsplit(str(settings.upstream_url))
        netloc = url.hostname or ""
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if url.port is not None:
            netloc += f":{url.port}"
        upstream = f"{url.scheme}://{netloc}{url.path}"
    else:
        words = shlex.split(settings.upstream_command or "")
        program = words[0] if words else "?"
        upstream = f"stdio: {program}" + (" ..." if len(words) > 1 else "")
    era = found.get("upstream_era") or "unknown"
    version = found.get("upstream_protocol_version")
    what = f"{era} {version}" if version else era
    return f"mcp-shim listening on http://{host}:{settings.port}{path} -> {upstream} ({what})"


def say_started(line: str) -> None:
    """The start line as a JSON log line like every other (`gateway_listening`,
    the line in `message`), so a log shipper reading JSON lines never meets a
    line it cannot parse; and, when stderr is a terminal (someone watching,
    no shipper), the same line as plain text too."""
    log.info("gateway_listening", message=line)
    if sys.stderr.isatty():
        print(line, file=sys.stderr, flush=True)


def _build(
    settings: Settings, metrics: Metrics, upstream: Upstream, messages: str = MESSAGES_PATH
) -> Wiring:
    offered = offered_version(settings)
    pool = SessionPool(
        upstream.sessions,
        max_sessions=upstream.max_sessions,
        idle_s=settings.session_idle_s,
        max_per_credential=min(settings.session_share(), upstream.max_sessions),
    )
    pool.start()
    readiness = ReadinessCheck(pool, offered, max_age_s=settings.ready_max_age_s)
    auth = _auth_relay(settings, upstream.http)
    subscriptions = SubscriptionHub(
        pool,
        queue_bound=settings.listen_queue_size,
        ready_timeout_s=settings.listen_ready_timeout_s,
        call_timeout_s=settings.listen_call_timeout_s,
    )
    # Who owns what among replicas, and the relay to the owner (app/cluster/replicas.py).
    replicas = build_replicas(settings)
    replicas.relay.observer = metrics.relayed
    legacy_sessions = LegacySessions(
        pool,
        idle_s=settings.session_idle_s,
        ids=replicas.ids,
        limits=Limits(
            total=settings.max_legacy_sessions,
            share=settings.legacy_session_share(),
            reclaim_idle_s=settings.legacy_session_reclaim_idle_s,
        ),
        notes=Notes(replicas.sealer, replicas.relay, replicas.me),
    )
    legacy_sessions.start()
    legacy, http_sse = _legacy_fronts(
        settings, metrics, offered, legacy_sessions, auth, replicas, messages
    )
    # A modern call's upstream part, one for the gateway and both bridges.
    forwarder = Forwarder(
        pool,
        ttl_ms=settings.cache_ttl_ms,
        cache_scope=settings.cache_scope,
        observer=subscriptions,
    )
    bridge = build_bridge(settings, pool, replicas, forwarder)
    tasks = build_tasks(settings, pool, replicas, bridge, forwarder, upstream.max_sessions)
    gateway = Gateway(
        pool,
        offered_version=offered,
        ttl_ms=settings.cache_ttl_ms,
        cache_scope=settings.cache_scope,
        subscriptions=subscriptions,
        listen_keepalive_s=settings.listen_keepalive_s,
        bridge=bridge,
        auth=auth,
        declare_every_input=settings.upstream_client_capabilities == "all",
        call_deadline_s=settings.call_deadline_s,
        tasks=tasks,
        forwarder=forwarder,
    )
    return Wiring(
        settings=settings,
        offered=offered,
        metrics=metrics,
        upstream=upstream,
        pool=pool,
        readiness=readiness,
        auth=auth,
        subscriptions=subscriptions,
        replicas=replicas,
        legacy_sessions=legacy_sessions,
        legacy=legacy,
        http_sse=http_sse,
        bridge=bridge,
        tasks=tasks,
        gateway=gateway,
        modern=ModernFront(gateway, upstream, write_timeout_s=settings.write_timeout_s),
    )


def build_tasks(
    settings: Settings,
    pool: SessionPool,
    replicas: Replicas,
    bridge: Bridge,
    upstream: Forwarder,
    max_sessions: int,
) -> TaskBridge:
    """The tasks extension's bridge (app/tasks), its records in the store
    MCP_SHIM_TASK_STORE names, its ids sealed and named like the replicas' own."""
    store = build_task_store(settings, replicas.sealer)
    if isinstance(store, MemoryTaskStore):
        store.start()  # expired records swept by time (Redis expires its own keys)
    tasks = TaskBridge(
        pool,
        store,
        replicas.sealer,
        TaskSettings(
            ttl_ms=settings.task_ttl_ms,
            max_per_owner=settings.max_tasks_per_credential,
            poll_ms=settings.task_poll_ms,
            max_result_bytes=settings.max_task_result_bytes,
            replica=replicas.me,
            round_wait_s=settings.mrtr_gather_max_ms / 1000,
            quiet_s=settings.mrtr_quiet_ms / 1000,
            round_ttl_s=settings.mrtr_ttl_s,
            tools=tuple(settings.task_tools),
            limits=settings.task_limits(max_sessions),
        ),
        upstream,
        lanes=bridge.lanes,
        forwarder=ReplicaForwarder(replicas.relay),
    )
    tasks.start()
    return tasks


def _auth_relay(settings: Settings, http: StreamableHttpTransport | None) -> AuthRelay | None:
    """OAuth is an HTTP upstream's: a stdio server has no challenge to relay."""
    if http is None:
        return None

    async def fetch(url: str) -> object:
        return await http.fetch_document(url, max_bytes=MAX_METADATA_BYTES)

    return AuthRelay(fetch, str(settings.upstream_url))


def _legacy_fronts(
    settings: Settings,
    metrics: Metrics,
    offered: Version,
    sessions: LegacySessions,
    auth: AuthRelay | None,
    replicas: Replicas,
    messages: str,
) -> tuple[LegacyFront, HttpSseFront]:
    """The legacy clients' front, and the HTTP+SSE one of 2024-11-05 clients over it."""
    service = LegacyService(
        sessions,
        offered=offered,
        max_batch=settings.max_batch,
        write_timeout_s=settings.write_timeout_s,
        max_json_depth=settings.max_json_depth,
        auth_relay=auth,
        relay=replicas.relay,
        keepalive_s=settings.listen_keepalive_s,
        metrics=metrics,
    )
    http_sse = HttpSseFront(
        service,
        max_channels=settings.max_legacy_sessions,
        keepalive_s=settings.listen_keepalive_s,
        write_timeout_s=settings.write_timeout_s,
        init_timeout_s=settings.sse_init_timeout_s,
        max_uninitialized_per_address=settings.max_uninitialized_sse_per_address,
        max_requests=settings.max_connections,
        messages_path=messages,
    )
    return LegacyFront(service), http_sse
