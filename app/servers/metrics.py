"""/metrics of a gateway with many servers: the gateway's own series (process,
connections, build) and every server's, each sample labelled `server="NAME"`.

Each server's graph counts into a registry of its own (app/metrics.py's
`Metrics`, as a single-server gateway does); the exposition merges them family
by family, so a family appears once with every server's samples. The label's
values are the names of the servers file: bounded by it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from app.metrics import Metrics, MetricsServer

LABEL = "server"
# The gateway's own, said once: a server's registry has its copies too.
_GATEWAY_ONLY = (
    "process_",
    "mcp_shim_build_info",
    "mcp_shim_client_",
    "mcp_shim_connections_moved",
)


class _Merged(Collector):
    def __init__(self, own: CollectorRegistry, servers: Sequence[tuple[str, Metrics]]) -> None:
        self._own = own
        self._servers = servers

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        for family in self._own.collect():
            families[family.name] = family
        for name, metrics in self._servers:
            for family in metrics.registry.collect():
                if family.name.startswith(_GATEWAY_ONLY):
                    continue
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                merged.samples.extend(
                    sample._replace(labels={**sample.labels, LABEL: name})
                    for sample in family.samples
                )
        return list(families.values())


class MergedMetrics:
    """The gateway's and its servers' series in one exposition."""

    def __init__(self, own: Metrics, servers: Sequence[tuple[str, Metrics]]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Merged(own.registry, servers))
        self._server: MetricsServer | None = None

    def render(self, accept: str | None) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def serve(self, host: str, port: int) -> None:
        """/metrics on a port of its own (MCP_SHIM_METRICS_PORT)."""
        httpd, thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = MetricsServer(httpd, thread)

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.aclose()
