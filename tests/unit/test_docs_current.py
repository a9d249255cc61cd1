"""The docs describe the tree as it is: bench/README.md lists every bench script,
the code cites scripts and docs/performance.md rather than the history of
measurements (bench/JOURNAL.md), and CONTRIBUTING.md's layout names every
package and top-level module of app/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
# Not scripts: the index itself, the history, the package marker.
NOT_LISTED = {"README.md", "JOURNAL.md", "__init__.py"}
# Folders of data or results the scripts use or write, not scripts of their own.
DATA_DIRS = {"peers", "results", "data", "__pycache__"}
CODE_DIRS = ("app", "translators", "scripts")
# A citation of bench/README.md followed by a quoted section title, e.g.
# `bench/README.md, "Third round"` or `bench/README.md ("Memory")`.
SECTION_CITATION = re.compile(r"bench/README\.md[\s,;:(]*[\"'“]")
JOURNAL = re.compile(r"bench/JOURNAL|JOURNAL\.md")


def bench_files_not_indexed(index: str, names: list[str]) -> list[str]:
    return [name for name in names if name not in index]


def bench_entries() -> list[str]:
    return sorted(
        path.name
        for path in BENCH.iterdir()
        if path.name not in NOT_LISTED
        and not path.name.startswith(".")
        and not (path.is_dir() and path.name in DATA_DIRS)
    )


def test_every_bench_script_is_in_the_index() -> None:
    index = (BENCH / "README.md").read_text(encoding="utf-8")
    names = bench_entries()
    assert "wrk.py" in names and "common.py" in names
    assert bench_files_not_indexed(index, names) == []
    # The check can fail: an index without one of them misses it.
    assert bench_files_not_indexed(index.replace("turns.py", ""), names) == ["turns.py"]


def history_citations(text: str) -> list[str]:
    # Comments wrap, so a citation and its title may sit on two lines.
    flat = re.sub(r"\s*\n\s*#?\s*", " ", text)
    found = [m.group(0) for m in SECTION_CITATION.finditer(flat)]
    found += [m.group(0) for m in JOURNAL.finditer(flat)]
    return found


def test_no_code_cites_the_history() -> None:
    offenders = []
    for folder in CODE_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".sh") or "__pycache__" in path.parts:
                continue
            if history_citations(path.read_text(encoding="utf-8")):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == [], offenders
    # The check can fail, on each form the history was cited in.
    assert history_citations('(bench/README.md, "Third round")')
    assert history_citations('# pauses (bench/README.md,\n    # "Where the time goes")')
    assert history_citations('names per call (bench/README.md "Third round")')
    assert history_citations("the runs in bench/JOURNAL.md")
    assert not history_citations("(bench/profile.py; docs/performance.md)")


def layout_paths(contributing: str) -> set[str]:
    """The paths the "Project layout" block names, folders nested by indentation."""
    block = contributing.split("## Project layout", 1)[1].split("```", 2)[1]
    paths: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        entry = re.match(r"^( *)(\S+)(?: {1,}|$)", line)
        if entry is None:
            continue
        indent, name = len(entry.group(1)), entry.group(2)
        if indent > 16:  # a description's second line
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        full = "".join(part for _, part in stack) + name
        paths.add(full)
        if name.endswith("/"):
            stack.append((indent, name))
    return paths


def app_entries() -> list[str]:
    app = ROOT / "app"
    packages = sorted(
        str(init.parent.relative_to(ROOT)) + "/"
        for init in app.rglob("__init__.py")
        if "__pycache__" not in init.parts
    )
    modules = sorted(f"app/{path.name}" for path in app.glob("*.py") if path.name != "__init__.py")
    return packages + modules


def test_contributing_layout_names_every_package_and_module_of_app() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    named = layout_paths(text)
    entries = app_entries()
    assert "app/upstream/httpclient/" in entries and "app/wiring.py" in entries
    assert [entry for entry in entries if entry not in named] == []
    # The check can fail: a layout without a line misses what it named.
    shorter = layout_paths(text.replace("  tasks/  ", "  "))
    assert "app/tasks/" not in shorter
    nested = layout_paths(text.replace("    stdio/  ", "    "))
    assert "app/upstream/stdio/" not in nested and "app/upstream/httpclient/" in nested
