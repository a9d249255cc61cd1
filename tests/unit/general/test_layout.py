"""tests/unit mirrors app/: each test file sits in a folder named like the
package of app/ whose code it tests (tests/unit/fronts/ for app/fronts/, and
so on; `translators/` for the translators package beside app/), so the tests
of a package are found where its name says. Three folders are not packages:

- `general/`: checks across the whole tree (the import graph, the docs, the
  function bound, the bench scripts, the deployment manifests, these rules);
- `leaves/`: the modules at the root of app/ (deadline, quoting, metrics,
  logs, tracing, the write coalescer, splice);
- `asgi/`: the in-process HTTP tier, the application driven whole through
  httpx.ASGITransport (see its package docstring).

Modules that are not tests (conftest.py and the helpers several folders
share) stay at the root of tests/unit. Every folder is a package
(`__init__.py`), so two folders may hold files of one name."""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[1]
ROOT = UNIT.parents[1]
TIERS = {"general", "leaves", "asgi"}
# Layer packages of docs/architecture.md whose modules a tree may still keep
# at the root of app/: there, their folder's check is an expected failure
# (strict: it must fail), and it passes once app/<name>/ is a package.
LAYERS = {"serving", "cluster", "settings"}


def _packages() -> set[str]:
    app = {p.parent.name for p in (ROOT / "app").glob("*/__init__.py")}
    return app | {"translators"}


def _folders() -> list[str]:
    return sorted(p.name for p in UNIT.iterdir() if p.is_dir() and p.name != "__pycache__")


def test_no_test_file_sits_at_the_root() -> None:
    loose = sorted(p.name for p in UNIT.glob("test_*.py"))
    assert loose == [], f"put each in the folder of the app package it tests: {loose}"


def _cases() -> list[object]:
    packages = _packages()
    cases: list[object] = []
    for folder in _folders():
        pending = folder in LAYERS and folder not in packages
        why = f"app/{folder}/ is not a package in this tree: its modules sit at the root of app/"
        marks = [pytest.mark.xfail(strict=True, reason=why)] if pending else []
        cases.append(pytest.param(folder, marks=marks, id=folder))
    return cases


def test_every_folder_is_a_package() -> None:
    missing = [f for f in _folders() if not (UNIT / f / "__init__.py").is_file()]
    assert missing == [], f"not packages: {missing}"


@pytest.mark.parametrize("folder", _cases())
def test_each_folder_is_an_app_package_or_a_documented_tier(folder: str) -> None:
    assert folder in _packages() | TIERS, (
        f"tests/unit/{folder}/ names no package of app/ (and is not one of {sorted(TIERS)})"
    )


def test_every_test_file_is_one_folder_deep() -> None:
    deep = [
        str(p.relative_to(UNIT))
        for p in UNIT.rglob("test_*.py")
        if len(p.relative_to(UNIT).parts) != 2
    ]
    assert deep == [], deep


def test_the_check_can_fail() -> None:
    assert "no_such_package" not in _packages() | TIERS
    assert "fronts" in _packages() and "upstream" in _packages()
