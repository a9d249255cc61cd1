"""One HTTP client interface toward the upstream (app/upstream/httpclient/interface.py):
no module but an adapter asks which library carried an answer or raised an
exception. Outside the adapters, no `isinstance` names a class of httpx,
aiohttp, httpcore or one of the adapters (before this interface,
streamable_http.py asked `isinstance(response, h1.H1Answer)`,
`isinstance(response, httpx.Response)`, `isinstance(client, UpstreamClient)`
and `isinstance(chunks, AsyncGenerator)`, and mapped the three libraries'
errors itself: checked failing on that code)."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"
# The adapters, and the library they adapt: the only places that may ask.
ADAPTERS = frozenset(
    (
        "h1.py",
        "h1_connection.py",
        "h1_errors.py",
        "h1_adapter.py",
        "aiohttp_client.py",
        "httpx_adapter.py",
    )
)
_LIBRARIES = ("httpx", "aiohttp", "httpx_aiohttp", "httpcore")
_ADAPTER_MODULES = (
    "app.upstream.httpclient.h1",
    "app.upstream.httpclient.h1_connection",
    "app.upstream.httpclient.h1_errors",
    "app.upstream.httpclient.aiohttp_client",
    "app.upstream.httpclient.httpx_adapter",
)
# Names that say which object is underneath, whatever module they come from.
_TELLING = frozenset(("UpstreamClient", "AsyncGenerator", "H1Answer", "AiohttpAnswer"))


def _library_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            telling = node.module.startswith(_LIBRARIES) or node.module in _ADAPTER_MODULES
            for alias in node.names:
                if telling or node.module + "." + alias.name in _ADAPTER_MODULES:
                    names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(_LIBRARIES):
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


def _asks(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = _library_names(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"):
            continue
        if len(node.args) != 2:
            continue
        for sub in ast.walk(node.args[1]):
            root = sub
            while isinstance(root, ast.Attribute):
                root = root.value
            named = isinstance(root, ast.Name) and root.id in names
            if named or (isinstance(sub, ast.Name) and sub.id in _TELLING):
                found.append(f"{path.relative_to(APP.parent)}:{node.lineno} {ast.unparse(node)}")
                break
    return found


def test_the_finder_sees_an_adapters_question() -> None:
    found = _asks(APP / "upstream" / "httpclient" / "httpx_adapter.py")
    assert any("httpx.TimeoutException" in line for line in found), found


def test_only_the_adapters_ask_which_http_library_is_underneath() -> None:
    modules = [p for p in sorted(APP.rglob("*.py")) if p.name not in ADAPTERS]
    found = [line for path in modules for line in _asks(path)]
    assert found == []
