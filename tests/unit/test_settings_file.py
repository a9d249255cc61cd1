"""The settings file MCP_SHIM_CONFIG: flags > environment > file > defaults,
its unknown keys named with the closest setting, a file that does not parse
named with its line, and `mcp-shim config` saying where each value came from."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from app.config import SettingsError
from app.serving.cli import main
from app.settings import command
from app.settings.file import read
from app.settings.load import load, load_settings

URL = "http://127.0.0.1:3001/mcp"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("MCP_SHIM_"):
            monkeypatch.delenv(name)


def _file(tmp_path: Path, name: str, text: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    monkeypatch.setenv("MCP_SHIM_CONFIG", str(path))
    return path


def _refused() -> str:
    with pytest.raises(SettingsError) as caught:
        load_settings()
    return str(caught.value)


def test_toml_values_are_read_by_field_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _file(
        tmp_path,
        "gateway.toml",
        f'upstream_url = "{URL}"\nport = 9000\nallowed_hosts = ["a.example", "b"]\n'
        'log_level = "debug"\nmove_connections = false\nconnect_timeout_s = 2\n',
        monkeypatch,
    )
    loaded = load()
    settings = loaded.settings
    assert (str(settings.upstream_url), settings.port) == (URL, 9000)
    assert settings.allowed_hosts == ["a.example", "b"]
    assert (settings.log_level, settings.move_connections) == ("debug", False)
    assert settings.connect_timeout_s == 2.0
    assert loaded.from_file == {
        "upstream_url",
        "port",
        "allowed_hosts",
        "log_level",
        "move_connections",
        "connect_timeout_s",
    }


def test_the_environment_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _file(tmp_path, "gateway.toml", f'upstream_url = "{URL}"\nport = 9000\n', monkeypatch)
    monkeypatch.setenv("mcp_shim_port", "9100")  # names are read without case
    loaded = load()
    assert loaded.settings.port == 9100
    assert loaded.from_file == {"upstream_url"}


def test_a_flag_wins_over_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, "gateway.toml", f'upstream_url = "{URL}"\nport = 9000\n', monkeypatch)
    monkeypatch.setenv("MCP_SHIM_PORT", "9100")
    monkeypatch.delenv("MCP_SHIM_CONFIG")
    main(["--config", str(path), "config", "--port", "9200", "--json"])
    rows = {row["variable"]: row for row in json.loads(capsys.readouterr().out)["settings"]}
    assert (rows["MCP_SHIM_PORT"]["value"], rows["MCP_SHIM_PORT"]["source"]) == (9200, "flag")
    assert rows["MCP_SHIM_UPSTREAM_URL"]["source"] == "file"
    assert rows["MCP_SHIM_CONFIG"] == {
        "variable": "MCP_SHIM_CONFIG",
        "value": str(path),
        "source": "flag",
        "note": None,
    }
    assert rows["MCP_SHIM_HOST"]["source"] == "default"


def test_the_config_table_names_each_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _file(tmp_path, "gateway.toml", f'upstream_url = "{URL}"\nport = 9000\n', monkeypatch)
    monkeypatch.setenv("MCP_SHIM_HOST", "0.0.0.0")
    table = {
        row.variable: row.source
        for row in command.rows(load(), set(), {"MCP_SHIM_HOST", "MCP_SHIM_CONFIG"})
    }
    assert table["MCP_SHIM_PORT"] == table["MCP_SHIM_UPSTREAM_URL"] == "file"
    assert table["MCP_SHIM_HOST"] == table["MCP_SHIM_CONFIG"] == "environment"
    assert table["MCP_SHIM_LOG_LEVEL"] == "default"


def test_dotenv_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _file(
        tmp_path,
        "gateway.env",
        "# the gateway\n\n"
        f"MCP_SHIM_UPSTREAM_URL={URL}  # a comment\n"
        'export MCP_SHIM_ALLOWED_HOSTS="a.example,b"\n'
        'MCP_SHIM_UPSTREAM_HEADERS=\'{"X-Tenant": "acme #1"}\'\n'
        "mcp_shim_port = 9000\n",
        monkeypatch,
    )
    settings = load_settings()
    assert (str(settings.upstream_url), settings.port) == (URL, 9000)
    assert settings.allowed_hosts == ["a.example", "b"]
    assert settings.fixed_upstream_headers() == {"X-Tenant": "acme #1"}


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("g.toml", "prot = 9000\n", "g.toml: prot is not a setting; did you mean port?"),
        (
            "g.toml",
            "MCP_SHIM_PORT = 9000\n",
            "MCP_SHIM_PORT is not a setting; did you mean port? (a .toml file names settings "
            "without the MCP_SHIM_ prefix",
        ),
        ("g.toml", "[upstream]\nurl = 1\n", "g.toml: upstream is not a setting"),
        (
            "g.env",
            "MCP_SHIM_MAX_SESIONS=64\n",
            "MCP_SHIM_MAX_SESIONS is not a setting; did you mean MCP_SHIM_MAX_SESSIONS?",
        ),
        ("g.env", "OTHER=1\n", "g.env: OTHER is not a setting"),
        ("g.toml", 'config = "other.toml"\n', "names the settings file, which cannot name"),
    ],
)
def test_an_unknown_key_names_the_file_the_key_and_the_closest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str, says: str
) -> None:
    _file(tmp_path, name, f"{text}", monkeypatch)
    message = _refused()
    assert says in message
    assert str(tmp_path) in message


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("g.toml", 'port = 9000\nupstream_url = "x\n', "not valid TOML: .* \\(at line 2, column"),
        ("g.toml", "port = \n", "at line 1"),
        ("g.env", "MCP_SHIM_PORT=9000\nnot an assignment\n", "g.env, line 2: expected NAME=value"),
        ("g.env", 'MCP_SHIM_PORT="9000\n', "line 1: the value's \" quote is not closed"),
        ("g.env", "MCP_SHIM_PORT=1\nMCP_SHIM_PORT=2\n", "line 2: MCP_SHIM_PORT is set twice"),
        ("g.yaml", "port: 1\n", "a settings file is a .toml file"),
    ],
)
def test_a_file_that_does_not_parse_names_the_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str, says: str
) -> None:
    _file(tmp_path, name, text, monkeypatch)
    message = _refused()
    assert re.search(says, message), message
    # The file's faults alone, not the faults of the settings without it.
    assert "exactly one of" not in message


def test_a_missing_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SHIM_CONFIG", str(tmp_path / "absent.toml"))
    assert "absent.toml', which cannot be read: No such file" in _refused()


def test_a_bad_value_names_the_key_and_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _file(tmp_path, "g.toml", f'upstream_url = "{URL}"\nport = 70000\n', monkeypatch)
    message = _refused()
    assert "MCP_SHIM_PORT='70000' is out of range: it must be from 1 to 65535" in message
    assert f"(set as port in {tmp_path / 'g.toml'})" in message


def test_an_empty_variable_means_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SHIM_CONFIG", "")
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_URL", URL)
    assert load().file is None


def test_read_keeps_each_key_as_written(tmp_path: Path) -> None:
    path = tmp_path / "x.env"
    path.write_text("mcp_shim_port=1\n", encoding="utf-8")
    found = read(str(path), {"port", "host"})
    assert found.values == {"port": "1"}
    assert found.origin("port") == f"mcp_shim_port in {path}"


@pytest.mark.parametrize("argv", [["config"], ["config", "--json"], ["probe"], ["serve"], []])
def test_every_command_exits_2_on_a_bad_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(f'upstream_url = "{URL}"\nprot = 9000\n', encoding="utf-8")
    # The flag is written into os.environ: undone after the test with this.
    monkeypatch.setenv("MCP_SHIM_CONFIG", "")
    with pytest.raises(SystemExit) as caught:
        main(["--config", str(path), *argv])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert f"{path}: prot is not a setting; did you mean port?" in err


def test_headers_as_a_toml_table_and_their_faults_name_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "token"
    secret.write_text("Bearer from-a-file\n", encoding="utf-8")
    path = _file(
        tmp_path,
        "g.toml",
        f'upstream_url = "{URL}"\n[upstream_headers]\nAuthorization = {{ file = "{secret}" }}\n',
        monkeypatch,
    )
    loaded = load()
    assert loaded.settings.fixed_upstream_headers() == {"Authorization": "Bearer from-a-file"}
    assert "upstream_headers" in loaded.from_file
    path.write_text(f'upstream_url = "{URL}"\nupstream_headers = {{ "Bad Name" = "x" }}\n')
    assert f"upstream_headers in {path}: 'Bad Name' is not a header name" in _refused()
    # The environment's value wins over the file's, a bad one in the file unread.
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_HEADERS", '{"X-Tenant": "acme"}')
    assert load().settings.fixed_upstream_headers() == {"X-Tenant": "acme"}
