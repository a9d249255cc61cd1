"""Which upstream the gateway speaks to: the one setting that is set, decided
here once for the gateway (app/wiring.py) and for `mcp-shim probe`."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from app import splice
from app.config import Settings
from app.upstream.base import Transport
from app.upstream.http_sse.transport import DetectingTransport
from app.upstream.httpclient.client import UpstreamClient, build_client
from app.upstream.modern.passthrough import PassThroughUpstream
from app.upstream.modern.upstream import ModernHttpUpstream
from app.upstream.sessions.era import Era, EraProbe
from app.upstream.sessions.era_transport import EraTransport
from app.upstream.stdio.process import child_environment
from app.upstream.stdio.transport import StdioTransport
from app.upstream.streamable_http.transport import StreamableHttpTransport


@dataclass(frozen=True, slots=True)
class Upstream:
    """The upstream kind the settings name, in the parts its users need."""

    # The transport the settings name: legacy sessions as they are (the probe's
    # handshake); closed last, as it holds the HTTP client or the processes.
    transport: Transport
    # What the pool opens sessions with: over HTTP, the session of the era the
    # upstream speaks (app/upstream/sessions/era_transport.py); over stdio, `transport`.
    sessions: Transport
    max_sessions: int
    era: EraProbe
    # The modern era's stateless requests; None when the upstream has no HTTP
    # endpoint (stdio speaks a legacy revision: nothing to probe).
    modern: ModernHttpUpstream | None
    # The HTTP upstream, whose documents (OAuth metadata) the gateway relays;
    # None for stdio, which has no challenge to relay.
    http: StreamableHttpTransport | None
    # The modern upstream's pass-through (a modern client's request sent as it
    # came); None when the upstream has no modern side.
    pass_through: PassThroughUpstream | None = None

    def passes_through(self, era: Era | None) -> PassThroughUpstream | None:
        """The pass-through, when a modern client's call can take it: the
        upstream has a modern side and speaks the modern era (for the caller);
        None when the call is the translating gateway's."""
        if era is None or era.name != "modern" or self.pass_through is None:
            return None
        return self.pass_through.bound(era)

    async def aclose(self) -> None:
        await self.transport.aclose()


def build_upstream(
    settings: Settings,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    client: UpstreamClient | None = None,
) -> Upstream:
    """The upstream of these settings: stdio or HTTP, and over HTTP its era's probe.
    `env`, `cwd`: a stdio server's own variables and directory (the servers file's);
    `client`: an HTTP upstream's client, when not the one the settings make (the
    aggregated /mcp's, app/servers/aggregate/loopback.py)."""
    transport, max_sessions = build_transport(settings, env, cwd, client)
    if not isinstance(transport, StreamableHttpTransport):
        return Upstream(transport, transport, max_sessions, EraProbe(None, "legacy"), None, None)
    # The upstream's era (app/upstream/sessions/era.py) picks the seam's implementation.
    modern = ModernHttpUpstream(
        transport.client,
        str(settings.upstream_url),
        request_timeout_s=settings.request_timeout_s,
        legacy_tasks_per_session=settings.legacy_tasks_per_session,
    )
    era = EraProbe(modern, settings.upstream_era)
    sessions = EraTransport(transport, modern, era)
    passing = PassThroughUpstream(modern, era)
    return Upstream(transport, sessions, max_sessions, era, modern, transport, passing)


def build_transport(
    settings: Settings,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    client: UpstreamClient | None = None,
) -> tuple[Transport, int]:
    """The upstream transport, and how many sessions the pool may keep with it."""
    if settings.upstream_command is not None:
        stdio = StdioTransport(
            # Checked at load (app/settings/rules.py `command_argv`).
            shlex.split(settings.upstream_command),
            env={**child_environment(os.environ, settings.upstream_env), **(env or {})},
            cwd=cwd,
            max_processes=settings.stdio_max_processes,
            max_per_credential=settings.stdio_process_share(),
            start_timeout_s=settings.stdio_start_timeout_s,
            # Getting a process is this transport's "connecting".
            slot_wait_s=settings.connect_timeout_s,
            request_timeout_s=settings.request_timeout_s,
            liveness_s=settings.stdio_liveness_s,
            cancel=settings.stdio_cancel,
            contain=True,
        )
        # Every stdio session is a process, and the transport bounds processes
        # itself: when full it stops the least recently used one with no call in
        # flight, which the pool cannot see (a caller whose call runs on an MRTR
        # lane still leases its key's pooled session). So the pool's own bound
        # stays MCP_SHIM_MAX_SESSIONS; a second, stricter one here would refuse
        # calls the transport could make room for.
        return stdio, settings.max_sessions
    assert settings.upstream_url is not None  # one of the two: app/config.py
    # One bound for the whole process: every upstream's answers share it.
    splice.ROOM.limit = settings.max_answer_bytes_in_flight
    if client is None:
        client = build_client(
            connect_timeout_s=settings.connect_timeout_s,
            max_connections=settings.max_upstream_connections,
            transport=settings.upstream_http_transport,
            keepalive_s=settings.upstream_keepalive_s,
            max_answer_bytes=settings.max_upstream_answer_bytes,
            fixed_headers=settings.fixed_upstream_headers(),
        )
    if settings.upstream_transport == "streamable-http":
        http = StreamableHttpTransport(
            client, str(settings.upstream_url), request_timeout_s=settings.request_timeout_s
        )
    else:
        http = DetectingTransport(
            client,
            str(settings.upstream_url),
            request_timeout_s=settings.request_timeout_s,
            # The endpoint event ends an HTTP+SSE upstream's "connecting".
            endpoint_timeout_s=settings.connect_timeout_s,
            mode=settings.upstream_transport,
        )
    return http, settings.max_sessions


def transport_name(settings: Settings, transport: Transport | None = None) -> str:
    """`stdio`, `streamable-http` or `sse`: what the transport speaks (detected once a
    session opened), else what the settings say (`auto` before detection)."""
    if settings.upstream_command is not None:
        return "stdio"
    if isinstance(transport, DetectingTransport) and transport.kind is not None:
        return transport.kind
    return settings.upstream_transport
