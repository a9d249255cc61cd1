"""Settings a person can handle: unknown variables named with the closest
setting, errors that quote the value and show what to write (never a
secret's), the flags and their sources, and what `mcp-shim config` masks."""

from __future__ import annotations

import argparse
import os
import re

import pytest
from pydantic import SecretStr

from app.config import Settings, SettingsError
from app.serving.cli import _command_word, not_a_command, parse_args
from app.settings import command as settings_command
from app.settings.check import NOT_SETTINGS, closest, mask_userinfo, unknown_variables
from app.settings.load import load_settings

KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="  # 32 bytes in base64


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("MCP_SHIM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_URL", "http://127.0.0.1:3001/mcp")


def refused(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    return str(caught.value)


# -- unknown variables ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("MCP_SHIM_PROT", "MCP_SHIM_PORT"),
        ("MCP_SHIM_MAX_SESIONS", "MCP_SHIM_MAX_SESSIONS"),
        ("MCP_SHIM_UPSTREAM", "MCP_SHIM_UPSTREAM_URL"),
        ("mcp_shim_log_levl", "MCP_SHIM_LOG_LEVEL"),
        ("MCP_SHIM_XYZZY_QUUX", None),
    ],
)
def test_the_closest_setting_is_named(name: str, expected: str | None) -> None:
    known = [f"MCP_SHIM_{field.upper()}" for field in Settings.model_fields]
    assert closest(name, known) == expected


def test_an_unknown_variable_is_an_error_naming_the_closest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = refused(monkeypatch, MCP_SHIM_PROT="9000")
    assert "MCP_SHIM_PROT is not a setting; did you mean MCP_SHIM_PORT?" in message


def test_settings_in_any_case_and_the_scripts_own_names_are_not_unknown() -> None:
    environ = ["mcp_shim_port", "MCP_SHIM_PORT", *NOT_SETTINGS, "PATH", "MCP_SHIMMER"]
    assert unknown_variables(environ, Settings.model_fields) == []


def test_every_tolerated_name_is_no_setting() -> None:
    settings = {f"MCP_SHIM_{field.upper()}" for field in Settings.model_fields}
    assert not settings & set(NOT_SETTINGS)


# -- errors that say what to write ----------------------------------------------


def test_a_url_without_its_scheme_gets_the_corrected_example(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = refused(monkeypatch, MCP_SHIM_UPSTREAM_URL="127.0.0.1:3001/mcp")
    assert (
        "MCP_SHIM_UPSTREAM_URL='127.0.0.1:3001/mcp' is not a URL: add the scheme, e.g. "
        "MCP_SHIM_UPSTREAM_URL=http://127.0.0.1:3001/mcp"
    ) in message
    assert "relative URL" not in message


def test_a_url_password_is_never_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    message = refused(monkeypatch, MCP_SHIM_UPSTREAM_URL="user:hunter2@gw:3001/mcp")
    assert "hunter2" not in message and "MCP_SHIM_UPSTREAM_URL" in message


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (
            "MCP_SHIM_PORT",
            "70000",
            "MCP_SHIM_PORT='70000' is out of range: it must be from 1 to 65535, "
            "e.g. MCP_SHIM_PORT=8080",
        ),
        ("MCP_SHIM_PORT", "http", "MCP_SHIM_PORT='http' is not a whole number (from 1 to 65535)"),
        (
            "MCP_SHIM_MOVE_CONNECTIONS",
            "maybe",
            "write MCP_SHIM_MOVE_CONNECTIONS=true or MCP_SHIM_MOVE_CONNECTIONS=false",
        ),
        ("MCP_SHIM_LOG_LEVEL", "warn", "e.g. MCP_SHIM_LOG_LEVEL=warning"),
        ("MCP_SHIM_READ_TIMEOUT_S", "soon", "is not a number (above 0 and at most 3600)"),
        (
            "MCP_SHIM_ALLOWED_ORIGINS",
            '["https://a.example", "https://b.example"]',
            "lists are comma-separated: write "
            "MCP_SHIM_ALLOWED_ORIGINS=https://a.example,https://b.example",
        ),
    ],
)
def test_common_mistakes_get_what_to_write(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    message = refused(monkeypatch, **{name: value})
    assert expected in message, message


def test_secrets_are_never_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    message = refused(
        monkeypatch,
        MCP_SHIM_STATE_KEY="notakey-hunter2",
        MCP_SHIM_TASK_STORE="redis://:hunter2@cache:notaport/0",
    )
    assert "MCP_SHIM_STATE_KEY" in message and "MCP_SHIM_TASK_STORE" in message
    assert "hunter2" not in message


def test_mask_userinfo() -> None:
    assert mask_userinfo("http://u:pw@h/x") == "http://u:***@h/x"
    assert mask_userinfo("http://h:80/x") == "http://h:80/x"
    assert mask_userinfo("u:pw@h:80/x") == "u:***@h:80/x"
    assert mask_userinfo("h:80/x@y") == "h:80/x@y"


# -- flags ------------------------------------------------------------------------


def test_flags_map_to_their_variables_and_win() -> None:
    args = parse_args(["--port", "9000", "serve", "--host", "0.0.0.0", "--workers", "2"])
    environ = {"MCP_SHIM_PORT": "8000", "mcp_shim_host": "127.0.0.1"}
    given = settings_command.apply_flags(args, environ)
    assert given == {"MCP_SHIM_HOST": "0.0.0.0", "MCP_SHIM_PORT": "9000", "MCP_SHIM_WORKERS": "2"}
    assert environ == given


def test_an_upstream_flag_replaces_either_upstream_variable() -> None:
    environ = {"MCP_SHIM_UPSTREAM_COMMAND": "server"}
    settings_command.apply_flags(parse_args(["config", "--upstream", "http://h/mcp"]), environ)
    assert environ == {"MCP_SHIM_UPSTREAM_URL": "http://h/mcp"}


def test_both_upstream_flags_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_args(["--upstream", "http://h/mcp", "--stdio", "server"])
    assert caught.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_no_flag_no_variable() -> None:
    assert settings_command.apply_flags(parse_args(["probe"]), {}) == {}


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["--port", "9000"], None),
        (["--port", "9000", "9000"], "9000"),
        (["--state-key-fd", "3", "worker", "--index", "0"], "worker"),
        (["--port=9000", "config"], "config"),
        (["--upstream", "http://h/mcp", "http://x"], "http://x"),
    ],
)
def test_the_command_word(argv: list[str], word: str | None) -> None:
    assert _command_word(argv) == word


@pytest.mark.parametrize(
    ("word", "hint"),
    [
        ("9000", "--port 9000 or MCP_SHIM_PORT=9000"),
        ("http://h:3001/mcp", "--upstream http://h:3001/mcp"),
        ("confg", "Did you mean config?"),
    ],
)
def test_a_word_that_is_no_command_gets_a_hint(word: str, hint: str) -> None:
    message = not_a_command(word)
    assert hint in message and "serve" in message and "config" in message
    assert "worker" not in message


def test_no_error_of_the_public_command_line_names_the_worker(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (["9000"], ["--help"], ["probe", "--bogus"], ["--bogus"]):
        with pytest.raises(SystemExit):
            parse_args(argv)
        out = capsys.readouterr()
        assert not re.search(r"(?<![-\w])worker\b", out.out + out.err), argv


def test_the_worker_command_still_parses() -> None:
    args = parse_args(["worker", "--index", "1", "--listen-fd", "3", "--internal-fd", "4"])
    assert (args.command, args.index, args.state_key_fd) == ("worker", 1, None)


# -- mcp-shim config ----------------------------------------------------------------


def test_sources_and_derived_defaults() -> None:
    settings = Settings(max_sessions=1000, max_parked=100, port=9000, workers=3)
    table = {
        row.variable: row
        for row in settings_command.rows(
            settings, {"MCP_SHIM_PORT"}, {"MCP_SHIM_UPSTREAM_URL", "MCP_SHIM_MAX_SESSIONS"}
        )
    }
    assert table["MCP_SHIM_PORT"].source == "flag"
    assert table["MCP_SHIM_MAX_SESSIONS"].source == "environment"
    assert table["MCP_SHIM_HOST"].source == "default"
    share = table["MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL"]
    assert (share.value, share.note) == (250, "default: a quarter of MCP_SHIM_MAX_SESSIONS")
    assert table["MCP_SHIM_TASK_MAX_SESSIONS"].value == settings.task_limits(1000).sessions
    assert set(table) == {f"MCP_SHIM_{field.upper()}" for field in Settings.model_fields}


def test_secrets_are_masked() -> None:
    settings = Settings(
        state_key=SecretStr(KEY),
        task_store=SecretStr("rediss://app:hunter2@cache.internal:6380/3"),
        upstream_url="https://svc:hunter3@mcp.example/mcp?token=hunter4",  # type: ignore[arg-type]
    )
    table = {row.variable: row.value for row in settings_command.rows(settings, set(), set())}
    assert table["MCP_SHIM_STATE_KEY"] == "(set, hidden)"
    assert table["MCP_SHIM_TASK_STORE"] == "rediss://app:***@cache.internal:6380/3"
    assert table["MCP_SHIM_UPSTREAM_URL"] == "https://svc:***@mcp.example/mcp?(hidden)"
    printed = settings_command.render(settings_command.rows(settings, set(), set()))
    printed += settings_command.as_json(settings_command.rows(settings, set(), set()))
    assert KEY not in printed and "hunter" not in printed


def test_an_unusable_store_value_is_hidden_whole() -> None:
    assert settings_command.masked_store("memory") == "memory"
    assert settings_command.masked_store("hunter2") == "(set, hidden)"


def test_flag_help_names_the_variable() -> None:
    parser = argparse.ArgumentParser()
    settings_command.add_flags(parser)
    text = parser.format_help()
    for flag in settings_command.FLAGS:
        assert flag.option in text and f"MCP_SHIM_{flag.field.upper()}" in text


def test_an_error_names_the_flag_that_set_the_variable() -> None:
    message = "invalid configuration:\n  MCP_SHIM_PORT='70000' is out of range"
    noted = settings_command.with_flag_names(message, {"MCP_SHIM_PORT", "MCP_SHIM_HOST"})
    assert noted == message + "\n  (MCP_SHIM_PORT was given as --port)"
    assert settings_command.with_flag_names(message, set()) == message
