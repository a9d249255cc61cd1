"""Every script under bench/ still starts: its imports resolve and its options
parse (`--help`). Two merges this session moved helpers between bench modules
and left a script importing a name that was gone; mypy does not check bench/,
and the scripts run only when someone measures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(
    p.name
    for p in BENCH.glob("*.py")
    if p.name != "common.py" and "__main__" in p.read_text(encoding="utf-8")
)


def test_the_bench_scripts_are_found() -> None:
    assert {"wrk.py", "workers.py", "soak.py", "parked.py", "stdio.py", "isolation.py"} <= set(
        SCRIPTS
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_bench_script_starts(script: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"],
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower(), done.stdout[-500:]
