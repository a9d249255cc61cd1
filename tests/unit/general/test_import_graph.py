"""Imports point down only: the project's import graph has no cycle, and no
module imports a layer above its own (docs/architecture.md, "Layers").

Every `import` and `from ... import` in a module counts, wherever it stands: at
the top, inside a function (a lazy import still ties the two modules), or under
`if TYPE_CHECKING:` (the type checker, and a reader, still need both at once).
A lazy import of a third-party library, for start-up cost, is not an edge: only
project modules are nodes. A package's `__init__.py` is a module of its own:
`from app.x import y` is an edge to `app.x` and, where app/x/y.py exists, to
`app.x.y`; the parent packages Python initialises on the way are not edges
(a package's `__init__` may then import its own submodules without a cycle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("app", "translators")


def project_modules(root: Path) -> dict[str, Path]:
    """Every module under the packages by dotted name; a package's
    `__init__.py` is the module named after the package."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _absolute(node: ast.ImportFrom, importer: str, modules: dict[str, Path]) -> str:
    """The dotted module a `from` import names, with relative levels resolved."""
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    # A package's `from . import x` is relative to the package itself.
    keep = len(base) - node.level + (1 if _is_package(importer, modules) else 0)
    prefix = base[:keep]
    return ".".join(prefix + ([node.module] if node.module else []))


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The project module `import name` loads, or the nearest enclosing one
    (`import app.x.y` where only `app.x` is ours, an attribute, still
    depends on `app.x`)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_of(importer: str, modules: dict[str, Path]) -> set[str]:
    """The project modules `importer` imports, from anywhere in its file."""
    tree = ast.parse(modules[importer].read_text(encoding="utf-8"), filename=str(modules[importer]))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name, modules)
                if target is not None:
                    found.add(target)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, importer, modules)
            target = _known(source, modules)
            if target is not None:
                found.add(target)
            # `from app.x import y` where app/x/y.py exists loads that submodule too.
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in modules:
                    found.add(sub)
    found.discard(importer)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = project_modules(root)
    return {name: imports_of(name, modules) for name in modules}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a closed path (first == last), or None."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph, white)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = grey
        stack.append(node)
        for nxt in sorted(graph[node]):
            if colour[nxt] == grey:
                return [*stack[stack.index(nxt) :], nxt]
            if colour[nxt] == white:
                cycle = visit(nxt)
                if cycle is not None:
                    return cycle
        stack.pop()
        colour[node] = black
        return None

    for start in sorted(graph):
        if colour[start] == white:
            cycle = visit(start)
            if cycle is not None:
                return cycle
    return None


def strongly_connected(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """Tarjan's components of more than one module: each is a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for start in sorted(graph):
        if start not in index:
            visit(start)
    yield from found


def test_import_graph_has_no_cycle() -> None:
    graph = import_graph(ROOT)
    assert "app.fronts.modern.gateway" in graph and "translators.translate" in graph
    cycle = find_cycle(graph)
    circles = "\n".join(", ".join(c) for c in strongly_connected(graph))
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}\nmodules in a circle:\n{circles}"


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every project module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_what_every_layer_shares_stays_at_the_bottom() -> None:
    """No cycle is not enough: metrics importing the bridge would make none
    today, and would tie the registry to every live object again."""
    graph = import_graph(ROOT)
    # A call's values and timing: below the route, gateway, bridge, fronts, transports;
    # they name a request id (app/rejections.py) and a version (translators/) only.
    below_call = {m for m in reached(graph, "app.call") if not m.startswith("translators")}
    assert below_call <= {"app.rejections"}
    assert reached(graph, "app.upstream.httpclient.common") == set()
    # The gauges read the live objects through protocols (app/metrics.py).
    live = {
        "app.mrtr.bridge",
        "app.mrtr.lanes",
        "app.upstream.sessions.pool",
        "app.subscriptions.hub",
    }
    assert not reached(graph, "app.metrics") & (live | {"app.fronts.modern.gateway"})


# The modules above the fronts: the process and its commands, the many servers'
# graphs, the routes and the wiring.
ABOVE_FRONTS = (
    "app.routes",
    "app.serving",
    "app.settings",
    "app.probe",
    "app.servers",
    "app.wiring",
)


def test_nothing_below_the_fronts_imports_them() -> None:
    """The bridges, subscriptions, upstreams and leaves take a call's values
    from app/call.py, never from a front (imports point down)."""
    graph = import_graph(ROOT)
    upward = {
        (name, target)
        for name, targets in graph.items()
        if not name.startswith(("app.fronts", *ABOVE_FRONTS))
        for target in targets
        if target.startswith("app.fronts")
    }
    assert upward == set(), sorted(upward)


# The layers, top to bottom. A module's layer is its package's under app/ (the
# first name after `app.`), or its own at the root of app/.
SERVING, ROUTES, WIRING, FRONTS, FEATURES, UPSTREAM, LEAVES = 6, 5, 4, 3, 2, 1, 0
_LAYER_OF = {
    # The process and its HTTP serving; beside it the settings' loading and
    # command and the probe command, which the CLI runs.
    "serving": SERVING,
    "settings": SERVING,
    "probe": SERVING,
    # Many servers: one app per server (app/serving/server.py's), routed to by name.
    "servers": SERVING,
    "routes": ROUTES,
    # The object graph built from the settings: the routes take it, it builds the fronts.
    "wiring": WIRING,
    "fronts": FRONTS,
    "mrtr": FEATURES,
    "tasks": FEATURES,
    "subscriptions": FEATURES,
    "cluster": FEATURES,
    "upstream": UPSTREAM,
}
# Whatever else is at the root of app/ (config, call values, rejections, JSON,
# logs, metrics...), headers/, connection/ and translators/ are the leaves.


def layer(module: str) -> int:
    parts = module.split(".")
    if parts[0] != "app" or len(parts) == 1:
        return LEAVES
    return _LAYER_OF.get(parts[1], LEAVES)


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if parts[0] == "app" and len(parts) > 1 else ""


def imports_from_below(graph: dict[str, set[str]], packages: set[str], floor: int) -> list[str]:
    """`importer -> imported` for every import of a module of `packages` (names
    under app/) by a module whose layer is below `floor`."""
    return sorted(
        f"{importer} -> {imported}"
        for importer, targets in graph.items()
        for imported in targets
        if _package(imported) in packages and layer(importer) < floor
    )


def upward_imports(graph: dict[str, set[str]], package: str) -> list[str]:
    """Imports of `package`'s modules by modules of a lower layer."""
    return imports_from_below(graph, {package}, _LAYER_OF[package])


def test_no_lower_layer_imports_serving_routes_or_fronts() -> None:
    graph = import_graph(ROOT)
    offenders = [
        line for top in ("serving", "routes", "fronts") for line in upward_imports(graph, top)
    ]
    assert offenders == []
    # The check can fail: the cluster importing a front, or a route the serving layer.
    assert upward_imports({"app.cluster.guests": {"app.fronts.legacy.bound"}}, "fronts") == [
        "app.cluster.guests -> app.fronts.legacy.bound"
    ]
    assert upward_imports({"app.routes.mcp": {"app.serving.server"}}, "serving") != []
    assert upward_imports({"app.serving.cli": {"app.routes.mcp"}}, "routes") == []


def test_nothing_below_the_cluster_imports_it() -> None:
    """The cluster (sealing, replicas, forwarding, guest copies) is below the
    fronts and beside mrtr/, tasks/ and subscriptions/, which use it; the
    upstream and the leaves know nothing of replicas. app/config.py is left to
    its own check (`test_config_imports_nothing_of_app`)."""
    graph = import_graph(ROOT)
    others = {name: targets for name, targets in graph.items() if name != "app.config"}
    assert imports_from_below(others, {"cluster"}, FEATURES) == []
    assert imports_from_below(
        {"app.upstream.sessions.pool": {"app.cluster.sealing"}}, {"cluster"}, FEATURES
    )
    assert not imports_from_below({"app.tasks.ids": {"app.cluster.sealing"}}, {"cluster"}, FEATURES)


def upward_anywhere(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module in a higher layer than the importer's, none
    excepted (app/config.py's are its own check's)."""
    return sorted(
        f"{importer} -> {imported}"
        for importer, targets in graph.items()
        for imported in targets
        if layer(importer) < layer(imported) and importer != "app.config"
    )


def test_imports_point_down_through_the_layers() -> None:
    assert upward_anywhere(import_graph(ROOT)) == []
    # The check can fail: the upstream importing a feature, a leaf the wiring.
    assert upward_anywhere({"app.upstream.sessions.pool": {"app.mrtr.lanes"}}) != []
    assert upward_anywhere({"app.metrics": {"app.wiring"}}) == ["app.metrics -> app.wiring"]
    assert upward_anywhere({"app.wiring": {"app.metrics", "app.fronts.base"}}) == []


def test_config_imports_nothing_of_app() -> None:
    """The `Settings` model is read by every layer, so it is the one leaf that
    imports nothing of the project: its loading, checks and command (app/settings/)
    sit beside the serving layer."""
    graph = import_graph(ROOT)
    assert sorted(m for m in graph["app.config"] if m.startswith("app")) == []


MAX_MODULE_LINES = 600


def long_modules(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}: {lines} lines"
        for path in project_modules(root).values()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]


def test_no_module_is_over_600_lines(tmp_path: Path) -> None:
    assert long_modules(ROOT) == []
    # The check can fail.
    _write(tmp_path, {"app/__init__.py": "", "app/big.py": "x = 1\n" * 601, "translators/t.py": ""})
    assert long_modules(tmp_path) == ["app/big.py: 601 lines"]


# The root of app/ keeps the wiring and the leaves every layer shares; the rest
# lives in the folder of its layer.
MAX_ROOT_MODULES = 12


def root_modules(root: Path) -> list[str]:
    return sorted(path.name for path in (root / "app").glob("*.py") if path.name != "__init__.py")


def test_the_root_of_app_holds_at_most_12_modules() -> None:
    assert len(root_modules(ROOT)) <= MAX_ROOT_MODULES, root_modules(ROOT)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("files", "cycle"),
    [
        # an import inside a function is an edge
        (
            {
                "app/__init__.py": "",
                "app/a.py": "import app.b\n",
                "app/b.py": "def f():\n    from app import a\n",
            },
            ["app.a", "app.b", "app.a"],
        ),
        # so is one under TYPE_CHECKING, and a relative one
        (
            {
                "app/__init__.py": "",
                "app/a.py": (
                    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import X\n"
                ),
                "app/b.py": "from app.a import Y\n",
            },
            ["app.a", "app.b", "app.a"],
        ),
        # `from app.p import m` loads app/p/m.py; a package's __init__ is its own module
        (
            {
                "app/__init__.py": "",
                "app/p/__init__.py": "",
                "app/p/m.py": "from app import q\n",
                "app/q.py": "from app.p import m\n",
            },
            ["app.p.m", "app.q", "app.p.m"],
        ),
        # a package's `from . import m` is relative to the package
        (
            {
                "app/__init__.py": "",
                "app/p/__init__.py": "from . import m\n",
                "app/p/m.py": "import app.p\n",
            },
            ["app.p", "app.p.m", "app.p"],
        ),
        # third-party and down-only imports are no cycle
        (
            {
                "app/__init__.py": "",
                "app/a.py": "import aiohttp\nfrom app import b\n",
                "app/b.py": "import json\n",
            },
            None,
        ),
    ],
)
def test_the_graph_sees_every_kind_of_import(
    tmp_path: Path, files: dict[str, str], cycle: list[str] | None
) -> None:
    _write(tmp_path, {"translators/__init__.py": "", **files})
    assert find_cycle(import_graph(tmp_path)) == cycle
