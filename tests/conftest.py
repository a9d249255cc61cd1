"""The order of the whole suite, and how pytest-xdist shares it out among its
workers (scripts/test.sh runs pytest on several processes; docs/performance.md,
test tiers, has the figures).

Order: the integration modules first, the longest first (each module's seconds
in tests/durations.json; a module not listed there counts DEFAULT_S), then the
unit tests, many and short, which fill each worker's end. A module's tests stay
together and in their file's order.

Sharing out (with `-n`, under xdist's default `--dist load`): an integration
module goes to one worker whole, so that its module-scoped gateways and peers
start once and its tests run in their file's order, as in a single process; a
unit test goes to whichever worker is free. Another `--dist` is left to xdist.

`--write-durations PATH` writes each integration module's seconds (setup, call
and teardown of its tests, summed) as this run measured them: the file to copy
to tests/durations.json after a full run, when modules have come or changed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
DEFAULT_S = 10.0
INTEGRATION = "tests/integration/"

_measured: defaultdict[str, float] = defaultdict(float)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--write-durations",
        metavar="PATH",
        help="write each test module's seconds, as this run measured them, to PATH as JSON "
        "(the format of tests/durations.json)",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    weights: dict[str, float] = json.loads(DURATIONS.read_text(encoding="utf-8"))
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        first.setdefault(_module(item.nodeid), index)

    def key(pair: tuple[int, pytest.Item]) -> tuple[bool, float, int, int]:
        index, item = pair
        module = _module(item.nodeid)
        if module.startswith(INTEGRATION):
            return (False, -weights.get(module, DEFAULT_S), first[module], index)
        return (True, 0.0, first[module], index)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's scope scheduling with an integration module as the scope of
        its tests and a unit test its own, in the collection's order."""

        def _split_scope(self, nodeid: str) -> str:
            module = _module(nodeid)
            return module if module.startswith(INTEGRATION) else nodeid

    # Keep the collection's order; xdist would put the scopes of most tests first.
    config.option.loadscopereorder = False
    return ModuleScheduling(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _measured[_module(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--write-durations")
    if path is None or hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller sees every report and writes the file
    rows = {m: round(s, 1) for m, s in sorted(_measured.items()) if m.startswith(INTEGRATION)}
    Path(path).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
