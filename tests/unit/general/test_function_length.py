"""Every function in app/ reads at once (issue 20: no switchboard functions).

A function over the bound is a sign that parsing, I/O and decisions have
gathered in one place again; split it along its jobs rather than raising the
bound."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[3] / "app"
MAX_LINES = 80


def long_functions(root: Path, limit: int) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(
                        f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines})"
                    )
    return found


def test_no_function_in_app_is_over_the_bound() -> None:
    assert long_functions(APP, MAX_LINES) == []


def test_the_scan_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "mod.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    return 1\n")
    assert long_functions(tmp_path, MAX_LINES) == [f"{tmp_path.name}/mod.py:1 long (81)"]
