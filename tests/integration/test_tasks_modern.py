"""Issue 21, items 1 and 5: a 2026-07-28 client's tasks (the extension
`io.modelcontextprotocol/tasks`) through the gateway in front of a legacy
server that has 2025-11-25 tasks: the project's task fixture
(tests/fixtures/legacy_tasks_server.py, mcp 1.x experimental tasks).

The conformance suite's ten `tasks-*` scenarios run against the fixture alone
(it speaks 2025-11-25 tasks, so the modern scenarios find little they know)
and through the gateway in front of it; each run's checks are kept under
results/conformance/<stamp>-tasks-*/.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests import procs

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "conformance"
TASK_SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)


def _one_line(text: object) -> str:
    return " ".join(str(text or "").split())[:200]


@dataclass
class ScenarioRun:
    name: str
    checks: list[dict[str, object]]
    output: str

    @property
    def problems(self) -> list[str]:
        return [
            f"{c.get('status')} {c.get('id')}: {_one_line(c.get('errorMessage'))}"
            for c in self.checks
            if c.get("status") in ("FAILURE", "WARNING")
        ]

    @property
    def clean(self) -> bool:
        """Ran, and no check is a FAILURE or a WARNING."""
        return bool(self.checks) and not self.problems


def run_scenario(url: str, name: str, out: Path) -> ScenarioRun:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(procs.require_peer(procs.NODE)),
        str(procs.CONFORMANCE),
        "server",
        "--url",
        url,
        "--scenario",
        name,
        "--output-dir",
        str(out),
    ]
    # The CLI stops a scenario itself after 30 s; this only catches a hung CLI.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    checks: list[dict[str, object]] = []
    for sub in sorted(out.glob(f"server-{name}-*")):
        file = sub / "checks.json"
        if file.is_file():
            checks = json.loads(file.read_text(encoding="utf-8"))
    return ScenarioRun(name, checks, proc.stdout + proc.stderr)


def run_all(url: str, out: Path) -> dict[str, ScenarioRun]:
    runs = {name: run_scenario(url, name, out / name) for name in TASK_SCENARIOS}
    lines = [f"{sum(r.clean for r in runs.values())}/{len(runs)} tasks-* scenarios clean"]
    for run in runs.values():
        lines.append(f"{'✓' if run.clean else '✗'} {run.name}")
        lines.extend(f"    {p}" for p in run.problems)
    (out / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return runs


def report(runs: dict[str, ScenarioRun]) -> str:
    return "\n".join(
        f"{'✓' if r.clean else '✗'} {r.name}\n" + "".join(f"    {p}\n" for p in r.problems)
        for r in runs.values()
    )


@pytest.fixture(scope="module")
def task_fixture_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("tasks")
    with procs.legacy_tasks_server(procs.free_port(), log_path=logs / "fixture.log") as url:
        yield url


@pytest.fixture(scope="module")
def task_gateway(task_fixture_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("tasks-gateway")
    with procs.gateway(task_fixture_url, procs.free_port(), log_path=logs / "gateway.log") as base:
        yield base


@pytest.mark.peers
def test_tasks_scenarios_fixture_alone_and_through_the_gateway(
    task_fixture_url: str, task_gateway: str
) -> None:
    """The fixture alone answers the modern scenarios as a 2025-11-25 server
    (its count is recorded for comparison); through the gateway all ten pass."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    alone = run_all(task_fixture_url, RESULTS / f"{stamp}-tasks-fixture-alone")
    through = run_all(task_gateway + "/mcp", RESULTS / f"{stamp}-tasks-through-gateway")
    clean_alone = sum(r.clean for r in alone.values())
    clean_through = sum(r.clean for r in through.values())
    print(f"tasks-* clean: fixture alone {clean_alone}/10, through the gateway {clean_through}/10")
    # The fixture speaks 2025-11-25 tasks: the modern scenarios cannot pass
    # against it (the one that does only skips: status notifications).
    assert clean_alone <= 1, report(alone)
    assert clean_through == len(TASK_SCENARIOS), report(through)
