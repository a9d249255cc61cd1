"""The aggregate built from the settings and the servers file's entries.

The members are the servers whose entry leaves `"mcpShim": {"aggregate": ...}`
true, in the file's order, each reached at its own named route
(`/servers/NAME/mcp`), that route's app called in process (inprocess.py).
The aggregate's endpoint (endpoint.py) has an address on the gateway's own
listener, and the top-level `/mcp` is an ordinary gateway graph whose
upstream is that endpoint (called in process too: loopback.py), its era
fixed modern: so every client era is served at `/mcp` by the same
translation as in front of one modern server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import structlog
from starlette.types import ASGIApp

from app.cluster.sealing import Sealer, generate_key, parse_keys
from app.config import Settings
from app.metrics import Metrics
from app.servers.aggregate import names
from app.servers.aggregate.aggregator import Aggregator
from app.servers.aggregate.endpoint import PATH, Endpoint
from app.servers.aggregate.inprocess import InProcessLink
from app.servers.aggregate.members import Link, Member
from app.settings.servers import ServerSpec
from app.upstream.httpclient.client import UpstreamClient, build_client
from app.upstream.modern.upstream import ModernHttpUpstream

log = structlog.get_logger("mcp_shim.aggregate")


class AggregateError(ValueError):
    """Servers that cannot be aggregated, said so a person can fix it."""


def loopback_base(settings: Settings) -> str:
    """This gateway's own listener as its own processes reach it."""
    host = settings.host
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


def members_of(settings: Settings, specs: Sequence[ServerSpec]) -> list[str]:
    """The aggregate's members, in the file's order; `AggregateError` for a
    name that cannot prefix its tools."""
    chosen = [s.name for s in specs if s.aggregate]
    problems = names.member_problems(chosen, settings.aggregate_separator)
    if problems:
        raise AggregateError("; ".join(problems))
    return chosen


def top_settings(settings: Settings) -> Settings:
    """The settings of the top-level `/mcp` graph: the aggregate endpoint its
    one modern upstream."""
    return settings.model_copy(
        update={
            "servers_file": None,
            "servers": None,
            "upstream_url": loopback_base(settings) + PATH,
            "upstream_command": None,
            "upstream_era": "modern",
        }
    )


@dataclass(slots=True)
class Built:
    aggregator: Aggregator
    endpoint: Endpoint
    client: UpstreamClient

    async def aclose(self) -> None:
        await self.client.aclose()


def build(
    settings: Settings,
    specs: Sequence[ServerSpec],
    metrics: Metrics,
    apps: Mapping[str, ASGIApp] | None = None,
) -> Built:
    """The aggregate over its members: each called in this process when `apps`
    has its route's app (inprocess.py), else over loopback HTTP."""
    chosen = members_of(settings, specs)
    client = build_client(
        connect_timeout_s=settings.connect_timeout_s,
        max_connections=settings.max_upstream_connections,
        transport=settings.upstream_http_transport,
        keepalive_s=settings.upstream_keepalive_s,
        max_answer_bytes=settings.max_upstream_answer_bytes,
    )
    base = loopback_base(settings)
    host = base.removeprefix("http://")
    members: list[Member] = []
    for name in chosen:
        app = (apps or {}).get(name)
        link: Link
        if app is not None:
            link = InProcessLink(name, app, host, settings.max_upstream_answer_bytes)
        else:
            url = f"{base}/servers/{name}/mcp"
            link = ModernHttpUpstream(client, url, request_timeout_s=settings.request_timeout_s)
        members.append(Member(name, link))
    # The replicas' key, so a value sealed by one worker opens on any other.
    key = settings.state_key
    sealer = Sealer(parse_keys(key.get_secret_value()) if key is not None else [generate_key()])
    aggregator = Aggregator(
        members,
        separator=settings.aggregate_separator,
        list_timeout_s=settings.aggregate_list_timeout_s,
        sealer=sealer,
        left_out=metrics.aggregate_left_out,
    )
    log.info("aggregate_members", servers=chosen, separator=settings.aggregate_separator)
    return Built(aggregator, Endpoint(aggregator, settings.max_body_bytes), client)
