"""The supervisor's /metrics with several workers: each worker's exposition,
read from its internal listener at scrape time, merged into one with a
`worker` label (app/serving/workers.py serves it on MCP_SHIM_METRICS_PORT)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable, Sequence

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector


def merge_expositions(expositions: Iterable[tuple[int, str]]) -> list[Metric]:
    """Workers' text expositions as one: one family per name, each sample labelled
    with its worker (`sum without (worker)` gives the gateway's totals)."""
    families: dict[str, Metric] = {}
    for index, text in expositions:
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            for sample in family.samples:
                merged.add_sample(
                    sample.name,
                    {**sample.labels, "worker": str(index)},
                    sample.value,
                    sample.timestamp,
                    sample.exemplar,
                )
    return list(families.values())


class WorkersCollector(Collector):
    """At each scrape, every worker's /metrics from its internal listener. A worker
    that does not answer (restarting) is missing from that scrape; `up`-style
    `mcp_shim_worker_scrape_ok` says which."""

    def __init__(self, urls: Sequence[str], timeout_s: float = 3.0) -> None:
        self._urls = list(urls)
        self._timeout_s = timeout_s

    def collect(self) -> Iterable[Metric]:
        texts: list[tuple[int, str]] = []
        ok = Metric("mcp_shim_worker_scrape_ok", "1 if the worker answered this scrape", "gauge")
        for index, url in enumerate(self._urls):
            try:
                with urllib.request.urlopen(url + "/metrics", timeout=self._timeout_s) as answer:
                    texts.append((index, answer.read().decode("utf-8")))
                ok.add_sample("mcp_shim_worker_scrape_ok", {"worker": str(index)}, 1.0)
            except (OSError, ValueError):
                ok.add_sample("mcp_shim_worker_scrape_ok", {"worker": str(index)}, 0.0)
        return [*merge_expositions(texts), ok]
