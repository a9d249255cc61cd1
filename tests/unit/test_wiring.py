"""The upstream chosen once (app/upstream/choice.py `build_upstream`, used by
app/wiring.py and `mcp-shim probe`), and the kind asked only inside
app/upstream/: no module outside it checks an object against an upstream
kind's or an HTTP library's class."""

from __future__ import annotations

import ast
import asyncio
import importlib
from pathlib import Path

import pytest

from app.settings.load import load_settings
from app.upstream.choice import build_upstream
from app.upstream.sessions.era_transport import EraTransport

APP = Path(__file__).resolve().parents[2] / "app"
# Where the classes of upstream kinds and HTTP clients come from.
_KIND_SOURCES = ("app.upstream", "httpx", "aiohttp", "httpx_aiohttp", "httpcore")


def test_an_http_upstream_has_its_era_and_its_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_URL", "http://127.0.0.1:9/mcp")
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_ERA", "modern")
    upstream = build_upstream(load_settings())
    try:
        assert isinstance(upstream.sessions, EraTransport)
        assert upstream.modern is not None and upstream.http is upstream.transport
        known = upstream.era.known
        assert known is not None and known.name == "modern" and known.source == "setting"
    finally:
        asyncio.run(upstream.aclose())


def test_a_stdio_upstream_is_legacy_with_no_http(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_COMMAND", "python3 -m server")
    upstream = build_upstream(load_settings())
    try:
        assert upstream.sessions is upstream.transport
        assert upstream.modern is None and upstream.http is None
        known = upstream.era.known
        assert known is not None and known.name == "legacy" and upstream.era.fixed
    finally:
        asyncio.run(upstream.aclose())


def _kind_names(tree: ast.Module) -> dict[str, str]:
    """Names this module imports from the upstream package or an HTTP library."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.startswith(_KIND_SOURCES):
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(_KIND_SOURCES):
                    names[alias.asname or alias.name.split(".")[0]] = alias.name
    return names


def _classes_checked(call: ast.Call) -> list[ast.expr]:
    if len(call.args) != 2:
        return []
    pending, found = [call.args[1]], []
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Tuple):
            pending.extend(node.elts)
        elif isinstance(node, ast.BinOp):
            pending.extend((node.left, node.right))
        else:
            found.append(node)
    return found


def _resolve(node: ast.expr, names: dict[str, str]) -> object | None:
    """The class `node` names, when it comes from a kind source."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    module, _, attr = names[node.id].rpartition(".")
    try:
        value: object = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        value = importlib.import_module(names[node.id])
    for part in parts:
        value = getattr(value, part)
    return value


def _kind_checks(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = _kind_names(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"):
            continue
        for checked in _classes_checked(node):
            value = _resolve(checked, names)
            # An error class says what went wrong, not which kind is underneath.
            if isinstance(value, type) and not issubclass(value, BaseException):
                found.append(f"{path.relative_to(APP.parent)}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_finder_sees_a_kind_check() -> None:
    # The rule's own check, on a module inside the package that does ask.
    found = _kind_checks(APP / "upstream" / "choice.py")
    assert any("StreamableHttpTransport" in line for line in found), found


def test_upstream_kinds_are_asked_only_inside_the_upstream_package() -> None:
    outside = [p for p in sorted(APP.rglob("*.py")) if (APP / "upstream") not in p.parents]
    found = [line for path in outside for line in _kind_checks(path)]
    assert found == []


def test_the_pass_through_is_the_modern_upstreams_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # The upstream decides whether a modern client's call is passed through:
    # only when it has a modern side and its era is modern (for the caller);
    # the route asks, and never looks at the era itself.
    from app.upstream.sessions.era import Era

    monkeypatch.setenv("MCP_SHIM_UPSTREAM_URL", "http://127.0.0.1:9/mcp")
    http = build_upstream(load_settings())
    monkeypatch.delenv("MCP_SHIM_UPSTREAM_URL")
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_COMMAND", "python3 -m server")
    stdio = build_upstream(load_settings())
    try:
        modern = Era("modern")
        assert http.passes_through(None) is None
        assert http.passes_through(Era("legacy")) is None
        passing = http.passes_through(modern)
        assert passing is not None and passing.seen is modern
        assert stdio.passes_through(modern) is None
    finally:
        asyncio.run(http.aclose())
        asyncio.run(stdio.aclose())
