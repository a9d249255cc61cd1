"""The arithmetic of what tasks may hold (app/tasks/bounds.py) and its settings."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from app.config import Settings, SettingsError, TaskLimits, default_limits, three_quarters
from app.settings.load import load_settings
from app.tasks.bounds import (
    CONNECTION_SHARE_SETTING,
    CONNECTIONS_SETTING,
    SESSION_SHARE_SETTING,
    SESSIONS_SETTING,
    Refusal,
    TaskBounds,
)

LIMITS = TaskLimits(
    sessions=3, sessions_per_credential=2, connections=4, connections_per_credential=3
)


def test_three_quarters_always_leaves_a_quarter_when_there_is_more_than_one() -> None:
    assert [three_quarters(n) for n in (1, 2, 3, 4, 8, 40, 512, 1024, 2048)] == [
        1,
        1,
        2,
        3,
        6,
        30,
        384,
        768,
        1536,
    ]
    for n in range(2, 3000):
        assert n - three_quarters(n) >= max(1, n / 4)


def test_the_defaults_leave_room_for_calls_that_are_not_tasks() -> None:
    # Four credentials of ten tasks each at 40 sessions (a share of 10 each):
    # tasks take at most 7 per credential and 30 in all, so 10 stay free.
    limits = default_limits(40, 10, 2048)
    assert limits == TaskLimits(30, 7, 1536, 384)
    assert default_limits(1024, 256, 2048).sessions_per_credential == 192
    assert default_limits(1, 1, 66).connections_per_credential == 12


def test_tasks_on_one_session_count_it_once() -> None:
    bounds = TaskBounds(LIMITS)
    shared = object()
    for _ in range(5):
        assert bounds.pin(shared, "alice") is None
    assert bounds.sessions == 1
    for _ in range(4):
        bounds.unpin(shared)
    assert bounds.sessions == 1
    bounds.unpin(shared)
    assert bounds.sessions == 0
    bounds.unpin(shared)  # more releases than pins change nothing
    assert bounds.sessions == 0


def test_a_credential_beyond_its_share_then_every_credential_beyond_the_total() -> None:
    bounds = TaskBounds(LIMITS)
    a1, a2, a3, b1, b2, c1 = (object() for _ in range(6))
    assert bounds.pin(a1, "a") is None
    assert bounds.pin(a2, "a") is None
    refused = bounds.pin(a3, "a")
    assert refused == Refusal(2, SESSION_SHARE_SETTING, "upstream sessions", True)
    assert refused.http_status == 429
    assert bounds.pin(a1, "a") is None  # a session it pins already: no new room needed
    assert bounds.pin(b1, "b") is None
    refused = bounds.pin(b2, "b")
    assert refused == Refusal(3, SESSIONS_SETTING, "upstream sessions", False)
    assert refused.http_status == 503
    assert SESSIONS_SETTING in refused.message and "3 upstream sessions" in refused.message
    assert isinstance(bounds.pin(c1, "c"), Refusal)
    bounds.unpin(b1)
    assert bounds.pin(c1, "c") is None
    assert bounds.sessions == 3


def test_connections_in_all_and_per_credential() -> None:
    bounds = TaskBounds(LIMITS)
    assert bounds.take_connections("a", 2) is None
    refused = bounds.take_connections("a", 2)
    assert refused is not None and refused.setting == CONNECTION_SHARE_SETTING
    assert bounds.take_connections("b", 2) is None
    refused = bounds.take_connections("c")
    assert refused is not None and refused.setting == CONNECTIONS_SETTING
    bounds.give_connections("a", 2)
    assert bounds.connections == 2
    assert bounds.take_connections("c") is None


def test_a_hold_is_taken_whole_or_not_at_all_and_released_once() -> None:
    bounds = TaskBounds(LIMITS)
    assert bounds.take_connections("z", 3) is None
    refused = bounds.hold(object(), "a", connections=2)
    assert isinstance(refused, Refusal) and refused.setting == CONNECTIONS_SETTING
    assert bounds.sessions == 0  # the pin was given back
    bounds.give_connections("z", 3)
    hold = bounds.hold(object(), "a", connections=2)
    assert not isinstance(hold, Refusal)
    assert (bounds.sessions, bounds.connections) == (1, 2)
    hold.release()
    hold.release()
    assert (bounds.sessions, bounds.connections) == (0, 0)


def test_a_hold_moves_to_a_fresh_session_without_growing() -> None:
    bounds = TaskBounds(TaskLimits(1, 1, 2, 2))
    stale, fresh = object(), object()
    hold = bounds.hold(stale, "a")
    assert not isinstance(hold, Refusal)
    hold.move(fresh)
    assert bounds.sessions == 1
    assert isinstance(bounds.pin(object(), "a"), Refusal)
    assert bounds.pin(fresh, "a") is None  # the same session as the moved hold's
    bounds.unpin(fresh)
    hold.release()
    assert bounds.sessions == 0


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MCP_SHIM_"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_URL", "http://127.0.0.1:1/mcp")
    monkeypatch.setenv("MCP_SHIM_MAX_PARKED", "4")


@pytest.fixture
def _settings(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Settings]:
    def load(**env: str) -> Settings:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return load_settings()

    return load


def test_settings_defaults_and_explicit_values(_settings: Callable[..., Settings]) -> None:
    settings = _settings(MCP_SHIM_MAX_SESSIONS="40")
    assert settings.task_limits(40) == TaskLimits(30, 7, 1536, 384)
    settings = _settings(
        MCP_SHIM_MAX_SESSIONS="40",
        MCP_SHIM_TASK_MAX_SESSIONS="12",
        MCP_SHIM_TASK_MAX_SESSIONS_PER_CREDENTIAL="20",
        MCP_SHIM_TASK_MAX_CONNECTIONS="100",
        MCP_SHIM_TASK_MAX_CONNECTIONS_PER_CREDENTIAL="10",
    )
    # A share is never above its total.
    assert settings.task_limits(40) == TaskLimits(12, 12, 100, 10)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"MCP_SHIM_MAX_SESSIONS": "8", "MCP_SHIM_TASK_MAX_SESSIONS": "8"},
            "MCP_SHIM_TASK_MAX_SESSIONS",
        ),
        (
            {"MCP_SHIM_MAX_UPSTREAM_CONNECTIONS": "2048", "MCP_SHIM_TASK_MAX_CONNECTIONS": "4096"},
            "MCP_SHIM_TASK_MAX_CONNECTIONS",
        ),
        (
            {"MCP_SHIM_TASK_MAX_CONNECTIONS_PER_CREDENTIAL": "1"},
            "MCP_SHIM_TASK_MAX_CONNECTIONS_PER_CREDENTIAL",
        ),
        (
            {"MCP_SHIM_TASK_MAX_SESSIONS_PER_CREDENTIAL": "0"},
            "MCP_SHIM_TASK_MAX_SESSIONS_PER_CREDENTIAL",
        ),
    ],
)
def test_settings_that_leave_no_reserve_are_refused_naming_the_variable(
    _settings: Callable[..., Settings], env: dict[str, str], named: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        _settings(**env)
    assert named in str(refused.value)
