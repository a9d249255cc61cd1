"""stdio upstream settings (issue 11): the command line, the child's environment,
exactly one upstream. Pure code: no process is started here."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from app.config import Settings, SettingsError
from app.settings.load import load_settings
from app.settings.rules import command_argv
from app.upstream.stdio.process import child_environment

_UPSTREAM_VARS = (
    "MCP_SHIM_UPSTREAM_URL",
    "MCP_SHIM_UPSTREAM_COMMAND",
    "MCP_SHIM_UPSTREAM_ENV",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _UPSTREAM_VARS:
        monkeypatch.delenv(name, raising=False)


def test_command_line_follows_shell_quoting() -> None:
    assert command_argv("env A=1 'python3' -c 'print(1 + 1)'") == [
        "env",
        "A=1",
        "python3",
        "-c",
        "print(1 + 1)",
    ]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("python3 'unbalanced", "cannot be split into arguments"),
        ("no-such-program-mcp-shim --x", "'no-such-program-mcp-shim' is not an executable"),
    ],
)
def test_bad_command_lines_are_refused(command: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        command_argv(command)


def test_child_environment_is_the_base_and_the_allow_list_only() -> None:
    source = {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "MCP_SHIM_STATE_KEY": "secret",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "API_TOKEN": "tok",
    }
    assert child_environment(source, ["API_TOKEN", "NOT_SET"]) == {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "API_TOKEN": "tok",
    }


def test_child_environment_always_has_a_path() -> None:
    assert "PATH" in child_environment({}, [])


@pytest.mark.parametrize(
    ("env", "state"),
    [
        ({}, "neither is"),
        (
            {"MCP_SHIM_UPSTREAM_URL": "http://x/mcp", "MCP_SHIM_UPSTREAM_COMMAND": "python3"},
            "both are",
        ),
    ],
)
def test_exactly_one_upstream(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], state: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    text = str(caught.value)
    assert "MCP_SHIM_UPSTREAM_URL" in text and "MCP_SHIM_UPSTREAM_COMMAND" in text
    assert state in text


def test_a_command_alone_is_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_COMMAND", "python3 -m some_server --flag 'a b'")
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_ENV", "API_TOKEN, OTHER")
    settings = load_settings()
    assert settings.upstream_url is None
    assert settings.upstream_env == ["API_TOKEN", "OTHER"]
    assert settings.stdio_max_processes == 8


@pytest.mark.parametrize(
    ("processes", "share", "expected"),
    [
        ("8", None, 6),
        ("4", None, 3),
        ("3", None, 2),
        ("2", None, 1),
        ("1", None, 1),
        ("4", "3", 3),
        ("4", "9", 4),
    ],
)
def test_a_credentials_share_of_the_processes(
    monkeypatch: pytest.MonkeyPatch, processes: str, share: str | None, expected: int
) -> None:
    """Unset: three quarters, and with more than one process never all of them."""
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_COMMAND", "python3 -m some_server")
    monkeypatch.setenv("MCP_SHIM_STDIO_MAX_PROCESSES", processes)
    if share is not None:
        monkeypatch.setenv("MCP_SHIM_STDIO_MAX_PROCESSES_PER_CREDENTIAL", share)
    assert load_settings().stdio_process_share() == expected


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ("MCP_SHIM_STATE_KEY", "never passed on"),
        ("mcp_shim_state_key", "never passed on"),
        ("BAD-NAME", "not an environment variable name"),
    ],
)
def test_the_allow_list_refuses_the_gateways_own_settings(
    monkeypatch: pytest.MonkeyPatch, names: str, message: str
) -> None:
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_COMMAND", "python3")
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_ENV", names)
    with pytest.raises(SettingsError, match=message):
        load_settings()


def test_settings_error_at_start_up_exits_2_naming_both() -> None:
    env = {"PATH": "/usr/bin:/bin", "MCP_SHIM_UPSTREAM_URL": "http://127.0.0.1:9/mcp"}
    env["MCP_SHIM_UPSTREAM_COMMAND"] = "python3"
    proc = subprocess.run(
        [sys.executable, "-m", "app.serving.cli"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "MCP_SHIM_UPSTREAM_URL" in proc.stderr and "MCP_SHIM_UPSTREAM_COMMAND" in proc.stderr


def test_settings_type_allows_a_url_alone() -> None:
    settings = Settings(upstream_url="http://127.0.0.1:3001/mcp")  # type: ignore[arg-type]
    assert settings.upstream_command is None


def test_a_stdio_upstream_cannot_be_declared_modern() -> None:
    # The stdio transport runs the legacy handshake; no era probe runs over it.
    with pytest.raises(ValidationError, match="MCP_SHIM_UPSTREAM_ERA=modern"):
        Settings(upstream_command="sh -c true", upstream_era="modern")  # type: ignore[call-arg]
    assert Settings(upstream_command="sh -c true").upstream_era == "auto"  # type: ignore[call-arg]
