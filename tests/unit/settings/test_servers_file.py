"""The servers file (app/settings/servers.py): every entry it accepts, every fault
it refuses naming the file, the server and the fault."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from app.config import Settings, SettingsError
from app.settings import rules
from app.settings.servers import (
    MAX_NAME,
    ServerSpec,
    parse_servers,
    read_servers,
    server_settings,
    settled,
)

WHERE = "MCP_SHIM_SERVERS_FILE=/etc/mcp/servers.json"


def doc(servers: dict[str, Any], **top: Any) -> str:
    return json.dumps({"mcpServers": servers, **top})


def fault(text: str) -> str:
    with pytest.raises(SettingsError) as caught:
        parse_servers(text, WHERE)
    message = str(caught.value)
    assert WHERE in message
    return message


@pytest.fixture(autouse=True)
def _no_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("URL", "COMMAND"):
        monkeypatch.delenv(f"MCP_SHIM_UPSTREAM_{name}", raising=False)
    monkeypatch.delenv("MCP_SHIM_SERVERS_FILE", raising=False)
    monkeypatch.delenv("MCP_SHIM_SERVERS", raising=False)


def test_stdio_and_http_servers_of_the_clients_files() -> None:
    servers = parse_servers(
        doc(
            {
                "files": {
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-everything", "a b"],
                    "env": {"TOKEN": "t"},
                    "autoApprove": ["echo"],
                    "timeout": 60,
                },
                "old_one": {"url": "http://127.0.0.1:3001/mcp", "type": "sse"},
                "new-one": {
                    "url": "https://example.com/mcp",
                    "type": "streamable-http",
                    "headers": {"X-Key": "k"},
                    "mcpShim": {"request_timeout_s": 60, "aggregate": False},
                },
            }
        ),
        WHERE,
    )
    files, old, new = servers.specs
    assert files.command == "npx -y @modelcontextprotocol/server-everything 'a b'"
    assert files.env == {"TOKEN": "t"} and files.url is None
    assert files.ignored == ("autoApprove", "timeout")
    assert old.url == "http://127.0.0.1:3001/mcp"
    assert old.overrides == {"upstream_transport": "sse"}
    assert new.headers == {"X-Key": "k"} and not new.aggregate
    assert new.overrides == {"request_timeout_s": 60, "upstream_transport": "streamable-http"}
    assert "k" not in repr(new) and "t" not in repr(files).replace("stdio", "")


def test_a_command_alone_is_a_whole_command_line() -> None:
    (spec,) = parse_servers(doc({"s": {"command": "uvx my-server --flag"}}), WHERE).specs
    assert spec.command == "uvx my-server --flag"


def test_disabled_servers_are_not_served() -> None:
    servers = parse_servers(
        doc({"on": {"url": "http://a/mcp"}, "off": {"command": "x", "disabled": True}}), WHERE
    )
    assert [s.name for s in servers.specs] == ["on"] and servers.disabled == ("off",)
    assert "every server is disabled" in fault(doc({"off": {"command": "x", "disabled": True}}))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not json", "not JSON"),
        ("[]", '"mcpServers"'),
        (doc({}), "names no server"),
        (doc({"a": {"command": "x"}}, inputs=[]), "unknown top-level key"),
        ('{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}', "'a' appears twice"),
        ('{"mcpServers": {"a": {"command": "x", "command": "y"}}}', "'command' appears twice"),
    ],
)
def test_file_faults(text: str, words: str) -> None:
    assert words in fault(text)


@pytest.mark.parametrize(
    "name",
    ["a__b", "-a", "a-", "a b", "a/b", "", "é", "a--b", "a_-b", "x" * (MAX_NAME + 1)],
)
def test_invalid_names(name: str) -> None:
    message = fault(doc({name: {"command": "x"}}))
    assert repr(name) in message


@pytest.mark.parametrize("name", ["a", "a-b_c", "A1", "x" * MAX_NAME])
def test_valid_names(name: str) -> None:
    assert parse_servers(doc({name: {"command": "x"}}), WHERE).specs[0].name == name


def test_names_differing_only_in_case_are_refused() -> None:
    assert "only in case" in fault(doc({"Files": {"command": "x"}, "files": {"command": "y"}}))


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("x", "not an object"),
        ({}, "neither"),
        ({"command": "x", "url": "http://a/mcp"}, "both"),
        ({"command": "x", "headers": {}}, "belong to an HTTP server"),
        ({"url": "http://a/mcp", "args": []}, "belong to a stdio server"),
        ({"command": "x", "envFile": ".env"}, "unknown key(s) ['envFile']"),
        ({"url": "http://a/mcp", "request_timeout_s": 5}, '"mcpShim"'),
        ({"command": "x", "type": "http"}, "does not fit"),
        ({"url": "http://a/mcp", "type": "stdio"}, "does not fit"),
        ({"url": "http://a/mcp", "type": "websocket"}, '"type" is none of'),
        ({"url": "ftp://a/mcp"}, "http://"),
        ({"command": ""}, "non-empty"),
        ({"command": "x", "args": "y"}, "list of strings"),
        ({"command": "x", "env": {"A": 1}}, "not a string"),
        ({"command": "x", "env": {"A=B": "1"}}, "invalid name"),
        ({"command": "x", "disabled": "yes"}, "true or false"),
        ({"url": "http://a/mcp", "headers": {"Bad Name": "v"}}, "invalid header name"),
        ({"url": "http://a/mcp", "headers": {"X": "a\r\nB: c"}}, "line break"),
        ({"url": "http://a/mcp", "headers": {"X": {"file": "/nonexistent/x"}}}, "cannot read"),
        ({"command": "x", "mcpShim": {"port": 1}}, "not a per-server setting"),
        ({"command": "x", "mcpShim": {"aggregate": "no"}}, "true or false"),
        ({"command": "x", "mcpShim": []}, "not an object"),
        (
            {"url": "http://a/mcp", "type": "sse", "mcpShim": {"upstream_transport": "auto"}},
            "disagree",
        ),
    ],
)
def test_server_faults(entry: object, words: str) -> None:
    message = fault(doc({"srv": entry}))
    assert "server 'srv'" in message and words in message


def test_a_header_may_come_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("Bearer s3cret\n")
    text = doc({"s": {"url": "http://a/mcp", "headers": {"Authorization": {"file": str(secret)}}}})
    (spec,) = parse_servers(text, WHERE).specs
    assert spec.headers == {"Authorization": "Bearer s3cret"}


def test_a_fault_never_says_a_secret() -> None:
    message = fault(doc({"s": {"url": "http://a/mcp", "headers": {"X": "s3cret\n"}}}))
    assert "s3cret" not in message


def test_per_server_settings_apply_the_overrides() -> None:
    base = Settings(servers=SecretStr("{}"), request_timeout_s=300, max_sessions=1000)
    overrides = {"request_timeout_s": 200.0, "max_sessions": 700}
    spec = ServerSpec("s", url="http://127.0.0.1:1/mcp", overrides=overrides)
    mine = server_settings(base, spec, WHERE)
    assert str(mine.upstream_url) == "http://127.0.0.1:1/mcp" and mine.upstream_command is None
    assert (mine.request_timeout_s, mine.max_sessions) == (200.0, 700)
    assert mine.servers is None and mine.servers_file is None
    assert base.request_timeout_s == 300


def test_per_server_settings_are_validated() -> None:
    base = Settings(servers=SecretStr("{}"))
    spec = ServerSpec("s", command="sh", overrides={"upstream_era": "modern"})
    with pytest.raises(SettingsError, match=r"server 's'.*MCP_SHIM_UPSTREAM_ERA=modern"):
        server_settings(base, spec, WHERE)
    spec = ServerSpec("s", command="sh", overrides={"max_sessions": 0})
    with pytest.raises(SettingsError, match="server 's': max_sessions"):
        server_settings(base, spec, WHERE)


def test_one_upstream_and_servers_together_exit_naming_both() -> None:
    both = rules.problems(Settings(upstream_url="http://a/mcp", servers_file="/x.json"))
    assert any("MCP_SHIM_UPSTREAM_URL and MCP_SHIM_SERVERS_FILE" in line for line in both)
    both = rules.problems(Settings(servers_file="/x.json", servers=SecretStr("{}")))
    assert any("MCP_SHIM_SERVERS_FILE and MCP_SHIM_SERVERS" in line for line in both)
    fixed = Settings(servers_file="/x.json", upstream_headers={"X": "y"})
    assert any("each server" in line for line in rules.problems(fixed))
    assert rules.problems(Settings(servers_file="/x.json")) == []


def test_read_servers(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(doc({"s": {"command": "x"}}))
    settings = Settings(servers_file=str(path))
    servers = read_servers(settings)
    assert servers is not None and servers.specs[0].name == "s"
    inline = Settings(servers=SecretStr(doc({"t": {"url": "http://a/mcp"}})))
    servers = read_servers(inline)
    assert servers is not None and servers.specs[0].name == "t"
    assert read_servers(Settings(upstream_url="http://a/mcp")) is None
    with pytest.raises(SettingsError, match="cannot be read"):
        read_servers(Settings(servers_file=str(tmp_path / "missing.json")))


def test_a_servers_public_and_advertised_urls_are_its_routes() -> None:
    base = Settings(
        servers=SecretStr("{}"),
        public_url="https://mcp.example.com/mcp",
        advertise_url="http://10.0.0.7:8080",
        state_key=SecretStr("A" * 43 + "="),
    )
    mine = server_settings(base, ServerSpec("s-1", url="http://a/mcp"), WHERE)
    assert str(mine.public_url) == "https://mcp.example.com/servers/s-1/mcp"
    assert str(mine.advertise_url) == "http://10.0.0.7:8080/servers/s-1"


def test_a_servers_file_runs_with_the_workers_a_single_server_would() -> None:
    servers = SecretStr(doc({"a": {"url": "http://a/mcp"}, "b": {"command": "sh"}}))
    for workers in (None, 1, 4):
        base = Settings(servers=servers, workers=workers)
        assert settled(base).workers == workers
    # Every server's settings are still checked at start.
    broken = SecretStr(doc({"a": {"url": "http://a/mcp", "mcpShim": {"upstream_era": "x"}}}))
    with pytest.raises(SettingsError, match="server 'a'"):
        settled(Settings(servers=broken, workers=2))


def test_a_cwd_must_be_a_directory(tmp_path: Path) -> None:
    base = Settings(servers=SecretStr("{}"))
    assert server_settings(base, ServerSpec("s", command="sh", cwd=str(tmp_path)), WHERE)
    with pytest.raises(SettingsError, match=r"server 's': \"cwd\" .* is not a directory"):
        server_settings(base, ServerSpec("s", command="sh", cwd=str(tmp_path / "no")), WHERE)


def test_a_servers_headers_are_its_fixed_upstream_headers() -> None:
    base = Settings(servers=SecretStr("{}"))
    spec = ServerSpec("s", url="http://a/mcp", headers={"X-Key": "k1"})
    assert server_settings(base, spec, WHERE).fixed_upstream_headers() == {"X-Key": "k1"}
    bare = server_settings(base, ServerSpec("t", url="http://a/mcp"), WHERE)
    assert bare.fixed_upstream_headers() == {}
