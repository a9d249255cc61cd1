"""The official MCP conformance suite through the named routes of one gateway.

One gateway with a servers file (MCP_SHIM_SERVERS_FILE) holding the two
servers the single-server runs of tests/integration/test_conformance.py stand
in front of: the legacy fixture (mcp 1.x) and the modern fixture (mcp 2.x,
2026-07-28 only). The suite's 2026-07-28 (modern clients) and 2025-11-25
(legacy clients) server sets run against ``/servers/legacy/mcp`` and
``/servers/modern/mcp``, and against a single-server gateway in front of each
fixture, with the baseline of its single-server run. A route's run must end
as the single-server run does: CLI exit 0, the same scored scenarios clean,
and at least as many as docs/conformance.md records (37/37 for both at
2026-07-28; 30/30 for the legacy fixture and at least 29/30 for the modern one
at 2025-11-25).

Runs are kept under ``results/conformance/<UTC stamp>-<revision>-<single|route>-<name>/``
like the single-server ones.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from tests import procs
from tests.integration.test_conformance import (
    BASELINE,
    LEGACY_BASELINE,
    LEGACY_REVISION,
    MODERN_BASELINE,
    MODERN_LEGACY_BASELINE,
    RESULTS,
    Report,
    _peers_or_fail,
    run_conformance,
)

# name in the servers file -> fixture starter
SERVERS = {"legacy": procs.legacy_server, "modern": procs.modern_server}
# revision -> name -> (baseline, fewest scored scenarios clean) of the single-server runs
OUTCOMES = {
    "2026-07-28": {"legacy": (BASELINE, 37), "modern": (MODERN_BASELINE, 37)},
    LEGACY_REVISION: {"legacy": (LEGACY_BASELINE, 30), "modern": (MODERN_LEGACY_BASELINE, 29)},
}
SCORED = {"2026-07-28": 37, LEGACY_REVISION: 30}


@dataclass
class Gateways:
    routes: str  # base URL of the gateway with the servers file
    single: dict[str, str]  # name -> base URL of a gateway in front of that server alone


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateways]:
    """One gateway serving every server of SERVERS at /servers/NAME/, and one
    single-server gateway (MCP_SHIM_UPSTREAM_URL) in front of each."""
    _peers_or_fail()
    logs = tmp_path_factory.mktemp("conformance-routes")
    with ExitStack() as stack:
        urls = {
            name: stack.enter_context(start(procs.free_port(), log_path=logs / f"{name}.log"))
            for name, start in SERVERS.items()
        }
        single = {
            name: stack.enter_context(
                procs.gateway(url, procs.free_port(), log_path=logs / f"gateway-{name}.log")
            )
            for name, url in urls.items()
        }
        path = logs / "servers.json"
        path.write_text(json.dumps({"mcpServers": {n: {"url": u} for n, u in urls.items()}}))
        port = procs.free_port()
        env = {
            "MCP_SHIM_SERVERS_FILE": str(path),
            "MCP_SHIM_PORT": str(port),
            "MCP_SHIM_HOST": "127.0.0.1",
            "MCP_SHIM_LOG_LEVEL": "info",
        }
        base = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "app.serving.cli"]
        with procs.running(argv, base + "/healthz", env=env, log_path=logs / "gateway.log"):
            yield Gateways(base, single)


def _clean(report: Report) -> set[str]:
    return {r.name for r in report.scored_results() if r.clean}


@pytest.mark.peers
@pytest.mark.parametrize("revision", list(OUTCOMES))
def test_conformance_through_each_named_route(gateways: Gateways, revision: str) -> None:
    """Each route's run ends as the single-server gateway's run in front of the
    same server: CLI exit 0 under the same baseline, the same scored scenarios
    clean, and at least as many as docs/conformance.md records."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")

    def run(where: tuple[str, str]) -> Report:
        kind, name = where
        url = gateways.single[name] if kind == "single" else f"{gateways.routes}/servers/{name}"
        out = RESULTS / f"{stamp}-{revision}-{kind}-{name}"
        return run_conformance(url + "/mcp", out, OUTCOMES[revision][name][0], revision)

    # The two servers at once, single-server gateways first, then the routes:
    # two CLIs at a time, as many as the machine's cores.
    with ThreadPoolExecutor(len(SERVERS)) as pool:
        single = dict(zip(SERVERS, pool.map(run, [("single", n) for n in SERVERS]), strict=True))
        routes = dict(zip(SERVERS, pool.map(run, [("route", n) for n in SERVERS]), strict=True))
    for name, report in routes.items():
        scored = report.scored_results()
        where = f"/servers/{name}/mcp:\n"
        assert len(scored) == SCORED[revision], where + report.text()
        assert report.exit_code == 0, where + report.text()
        assert single[name].exit_code == 0, f"{name} alone:\n" + single[name].text()
        only_route = sorted(_clean(report) - _clean(single[name]))
        only_single = sorted(_clean(single[name]) - _clean(report))
        assert not only_route and not only_single, (
            f"{where}clean through the route only {only_route}, "
            f"through the single-server gateway only {only_single}\n" + report.text()
        )
        assert len(_clean(report)) >= OUTCOMES[revision][name][1], where + report.text()
