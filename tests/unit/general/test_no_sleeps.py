"""The unit tier waits on events, conditions, tests/waiting.py or a faked
clock, never on a fixed sleep: a sleep is a guess at how long something takes,
too short on a loaded machine (a flaky failure) and too long everywhere else
(a slow suite). A sleep that *is* the behaviour under test (a deadline that
must pass, a window measured) says so in a comment on its line, with the
words "behaviour under test". Nor is a test's outcome read off the wall
clock: how long a wait took is checked against the loop's timers
(`tests.waiting.clock_marks`), which run in the order of their time."""

from __future__ import annotations

import ast
import re
from pathlib import Path

UNIT = Path(__file__).resolve().parents[1]
MARK = "behaviour under test"
# `assert <clock>() - started < 5`: an outcome read off a clock.
CLOCK_ASSERT = re.compile(r"\bassert\b.*(monotonic|perf_counter|\.time)\(\)\s*-")


def _sources() -> list[Path]:
    return sorted(p for p in UNIT.rglob("*.py") if p.resolve() != Path(__file__).resolve())


def _sleeps(tree: ast.AST) -> list[int]:
    """Lines of every call of a function named sleep (time.sleep, asyncio.sleep, ...)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "sleep":
                lines.append(node.lineno)
    return lines


def test_every_sleep_in_the_unit_tier_is_the_behaviour_under_test() -> None:
    unmarked = []
    for path in _sources():
        text = path.read_text()
        lines = text.splitlines()
        for lineno in _sleeps(ast.parse(text)):
            if MARK not in lines[lineno - 1]:
                unmarked.append(f"{path.relative_to(UNIT)}:{lineno}: {lines[lineno - 1].strip()}")
    assert unmarked == [], (
        "a sleep used to wait for something: wait on an event, a condition "
        "(tests.waiting.until) or a faked clock instead:\n" + "\n".join(unmarked)
    )


def test_no_outcome_is_read_off_the_wall_clock() -> None:
    found = [
        f"{path.relative_to(UNIT)}:{n}: {line.strip()}"
        for path in _sources()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if CLOCK_ASSERT.search(line)
    ]
    assert found == [], "check against the loop's timers (tests.waiting.clock_marks):\n" + (
        "\n".join(found)
    )


def test_the_checks_find_what_they_look_for() -> None:
    # Each check can fail: an unmarked sleep and a clock assertion are found.
    assert _sleeps(ast.parse("import asyncio\nawait asyncio.sleep(0.1)\n")) == [2]
    assert _sleeps(ast.parse("from time import sleep\nsleep(1)\n")) == [2]
    assert CLOCK_ASSERT.search("    assert time.monotonic() - started < 5")
    assert CLOCK_ASSERT.search("assert loop.time() - t0 >= 0.1")
