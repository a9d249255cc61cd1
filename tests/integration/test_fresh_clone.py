"""A fresh clone tests itself: the README's test command needs nothing beside it.

The development machines have the spec and the peers next to the working
tree; a user's clone has neither. This clones the committed HEAD into an
empty temporary folder and, with the clone as the current directory and
pytest's rootdir, collects the whole suite (no error, as many tests as the
working tree) and runs the unit tests, in one pytest run: the integration
tests are collected and deselected, so the run's summary counts them. The
peers (.peers) are absent there: collection must not need them, only running
the integration tests does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
_COLLECTED = re.compile(r"^(\d+) tests? collected", re.MULTILINE)
# Every outcome of a collected test that a passing run's last line can count.
_COUNTED = re.compile(r"(\d+) (passed|skipped|xfailed|xpassed|deselected)\b")


def _env() -> dict[str, str]:
    # The outer pytest's own variables must not steer the inner runs.
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S
    )


def _collect(cwd: Path) -> int:
    proc = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(cwd),
        ],
        cwd,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"collection in {cwd} failed:\n{output[-4000:]}"
    assert "error" not in output.splitlines()[-1].lower(), output[-4000:]
    found = _COLLECTED.search(output)
    assert found is not None, output[-4000:]
    return int(found.group(1))


def test_no_file_refers_to_a_folder_beside_the_repository() -> None:
    # Spelled in pieces so that this file does not match itself.
    beside = r"\.\./" + "shared|" + "shared/(spec|DESIGN)"
    found = _run(["git", "grep", "-nE", beside, "--", ".", ":!.ci"], ROOT)
    assert found.returncode == 1, f"files refer to a folder a clone does not have:\n{found.stdout}"


def _uncommitted() -> str:
    return _run(["git", "status", "--porcelain"], ROOT).stdout.strip()


@pytest.mark.slow
def test_a_fresh_clone_collects_the_suite_and_passes_its_unit_tests(tmp_path: Path) -> None:
    clone = tmp_path / "mcp-shim"
    cloned = _run(["git", "clone", "--quiet", str(ROOT), str(clone)], tmp_path)
    assert cloned.returncode == 0, cloned.stderr
    # Nothing beside the clone: no spec folder next to it, no peers.
    assert [p.name for p in tmp_path.iterdir()] == ["mcp-shim"]
    assert not (clone / ".peers").exists(), ".peers is committed: a clone would not have it"

    # The clone's own code is what runs there, not the working tree's editable install.
    where = _run(
        [sys.executable, "-c", "import app, tests, translators; print(app.__file__)"], clone
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(clone), where.stdout

    # The whole suite collected (an error there fails the run), the unit tests run.
    unit = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(clone),
            "--deselect",
            "tests/integration/",
        ],
        clone,
    )
    output = unit.stdout + unit.stderr
    assert unit.returncode == 0, f"the unit tests fail in a fresh clone:\n{output[-4000:]}"
    summary = unit.stdout.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary), unit.stdout[-2000:]
    assert re.search(r"\d+ deselected", summary), unit.stdout[-2000:]
    in_clone = sum(int(n) for n, _ in _COUNTED.findall(summary))
    in_tree = _collect(ROOT)
    assert in_clone == in_tree, (
        f"a fresh clone collects {in_clone} tests, the working tree {in_tree}. "
        "A clone gets only what is committed; uncommitted here:\n" + (_uncommitted() or "(none)")
    )
