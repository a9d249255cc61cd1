"""The servers file: many upstream servers behind one gateway.

`MCP_SHIM_SERVERS_FILE` names a JSON file in the `mcpServers` shape of the
clients' own configuration files (Claude Desktop, Cursor, Cline...), and
`MCP_SHIM_SERVERS` holds the same JSON inline:

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "PACKAGE"], "env": {"K": "v"}},
        "search": {"url": "https://example.com/mcp", "headers": {"X-Key": "..."},
                   "mcpShim": {"request_timeout_s": 60}}}}

An entry with `command` is a stdio server, one with `url` an HTTP one (its
transport and era detected as for MCP_SHIM_UPSTREAM_URL). `mcpShim` holds the
entry's overrides of the gateway's upstream settings, by field name, limited
to `OVERRIDABLE`, plus `aggregate` (whether the server joins the aggregated
`/mcp`). The clients' own keys are read (`type`, `disabled`) or ignored
(`IGNORED`); any other key is a fault.

Pure: text in, `Servers` out, or `SettingsError` naming the file, the server
and the fault (the only I/O, reading a header's secret file, is `read_servers`'
and `_header_value`'s, at start).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from app.config import Settings, SettingsError
from app.settings import rules

# Letters, digits and single `-` or `_` between them: a route segment
# (`/servers/NAME/mcp`) and a prefix of aggregated names, whose separator `__`
# a name must never hold.
NAME = re.compile(r"^[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*$")
MAX_NAME = 32
# Servers in one file at most: each holds a graph of its own (pools, processes).
MAX_SERVERS = 64
SHIM_KEY = "mcpShim"

# The upstream settings one server may set for itself (MCP_SHIM_<NAME> without
# the prefix, lower case): its era and transport, timeouts, process and session
# bounds, the client capabilities offered. Everything else (the listener,
# client-facing bounds, tasks, MRTR) is the gateway's, shared by every server.
OVERRIDABLE = frozenset(
    {
        "upstream_era",
        "upstream_protocol_version",
        "upstream_transport",
        "upstream_http_transport",
        "upstream_client_capabilities",
        "upstream_keepalive_s",
        "upstream_env",
        "connect_timeout_s",
        "request_timeout_s",
        "call_deadline_s",
        "session_idle_s",
        "ready_max_age_s",
        "listen_call_timeout_s",
        "max_sessions",
        "max_sessions_per_credential",
        "max_legacy_sessions",
        "max_legacy_sessions_per_credential",
        "max_upstream_connections",
        "max_upstream_answer_bytes",
        "stdio_max_processes",
        "stdio_max_processes_per_credential",
        "stdio_start_timeout_s",
        "stdio_liveness_s",
        "stdio_cancel",
    }
)
# The one override that is no setting: membership of the aggregated `/mcp`.
AGGREGATE_KEY = "aggregate"

# Keys of the clients' files that mean nothing to a gateway (approval lists,
# the client's own timeouts and descriptions): logged at start, ignored.
IGNORED = frozenset(
    {
        "timeout",
        "autoApprove",
        "alwaysAllow",
        "disabledTools",
        "transportType",
        "description",
        "watchPaths",
        "icon",
    }
)
_STDIO_KEYS = frozenset({"command", "args", "env", "cwd"})
_HTTP_KEYS = frozenset({"url", "headers"})
_READ_KEYS = frozenset({"type", "disabled", SHIM_KEY})
# `type` values of the clients' files, and the upstream transport each names.
_TYPES: Mapping[str, Literal["stdio", "auto", "streamable-http", "sse"]] = {
    "stdio": "stdio",
    "http": "auto",
    "streamable-http": "streamable-http",
    "streamableHttp": "streamable-http",
    "sse": "sse",
}
# Header names: RFC 9110 tokens.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """One server of the file, as the gateway serves it at `/servers/NAME/`."""

    name: str
    url: str | None = None  # an HTTP server's MCP endpoint
    command: str | None = None  # a stdio server's command line (shell quoting)
    env: Mapping[str, str] = field(default_factory=dict)  # a stdio server's own variables
    cwd: str | None = None  # a stdio server's working directory
    headers: Mapping[str, str] = field(default_factory=dict)  # fixed upstream headers: secrets
    overrides: Mapping[str, Any] = field(default_factory=dict)  # Settings fields
    aggregate: bool = True
    ignored: tuple[str, ...] = ()  # the clients' keys read and ignored, for the start log

    def __repr__(self) -> str:  # never the secrets of env or headers
        kind = "stdio" if self.command is not None else "http"
        return f"ServerSpec({self.name!r}, {kind})"


@dataclass(frozen=True, slots=True)
class Servers:
    specs: tuple[ServerSpec, ...]
    disabled: tuple[str, ...] = ()  # entries with `"disabled": true`, not served


class _Fault(Exception):
    """One fault of one server; `parse_servers` adds the file and the server."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Fault(f"the key {key!r} appears twice in one object")
        seen[key] = value
    return seen


def parse_servers(text: str, where: str) -> Servers:
    """The servers of a file's `text`; `where` names it in every fault
    (MCP_SHIM_SERVERS_FILE=path, or MCP_SHIM_SERVERS)."""
    try:
        document = json.loads(text, object_pairs_hook=_no_duplicates)
    except _Fault as exc:
        raise _error(where, None, str(exc)) from None
    except json.JSONDecodeError as exc:
        fault = f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        raise _error(where, None, fault) from None
    if not isinstance(document, dict) or not isinstance(document.get("mcpServers"), dict):
        raise _error(where, None, 'not an object with an "mcpServers" object')
    extra = sorted(set(document) - {"mcpServers", "$schema"})
    if extra:
        raise _error(where, None, f"unknown top-level key(s) {extra}: only mcpServers is read")
    entries: dict[str, Any] = document["mcpServers"]
    if not entries:
        raise _error(where, None, "mcpServers names no server")
    if len(entries) > MAX_SERVERS:
        raise _error(where, None, f"{len(entries)} servers; at most {MAX_SERVERS}")
    specs: list[ServerSpec] = []
    disabled: list[str] = []
    for name, entry in entries.items():
        try:
            _check_name(name)
            spec = _server(name, entry)
        except _Fault as exc:
            raise _error(where, name, str(exc)) from None
        if spec is None:
            disabled.append(name)
        else:
            specs.append(spec)
    folded = [spec.name.lower() for spec in specs]
    for spec in specs:
        if folded.count(spec.name.lower()) > 1:
            raise _error(where, spec.name, "another server's name differs from it only in case")
    if not specs:
        raise _error(where, None, "every server is disabled")
    return Servers(tuple(specs), tuple(disabled))


def _error(where: str, server: str | None, fault: str) -> SettingsError:
    about = f" server {server!r}:" if server is not None else ""
    return SettingsError(f"invalid configuration:\n  {where}:{about} {fault}")


def _check_name(name: str) -> None:
    if len(name) > MAX_NAME:
        raise _Fault(f"the name is {len(name)} characters long; at most {MAX_NAME}")
    if not NAME.match(name):
        raise _Fault(
            "invalid name: letters, digits and single '-' or '_' between them (never '__', "
            "the aggregated names' separator)"
        )


def _server(name: str, entry: object) -> ServerSpec | None:
    """The entry's spec; None when it is disabled."""
    if not isinstance(entry, dict):
        raise _Fault("not an object")
    known = _STDIO_KEYS | _HTTP_KEYS | _READ_KEYS | IGNORED
    unknown = sorted(set(entry) - known)
    if unknown:
        raise _Fault(
            f"unknown key(s) {unknown}; a server has command/args/env/cwd or url/headers, "
            f'and the gateway\'s own settings go under "{SHIM_KEY}"'
        )
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise _Fault('"disabled" is not true or false')
    kind = _kind(entry)
    overrides, aggregate = _overrides(entry.get(SHIM_KEY, {}))
    if disabled:
        return None
    ignored = tuple(sorted(set(entry) & IGNORED))
    if kind == "stdio":
        return ServerSpec(
            name,
            command=_command(entry),
            env=_string_map(entry.get("env", {}), "env", _ENV_NAME),
            cwd=_optional_string(entry.get("cwd"), "cwd"),
            overrides=overrides,
            aggregate=aggregate,
            ignored=ignored,
        )
    url = entry["url"]
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise _Fault('"url" is not an http:// or https:// URL')
    if kind != "auto":
        if overrides.get("upstream_transport", kind) != kind:
            raise _Fault(f'"type" and {SHIM_KEY}.upstream_transport disagree')
        overrides = {**overrides, "upstream_transport": kind}
    return ServerSpec(
        name,
        url=url,
        headers=_fixed_headers(entry.get("headers", {}), "headers"),
        overrides=overrides,
        aggregate=aggregate,
        ignored=ignored,
    )


def _kind(entry: Mapping[str, Any]) -> str:
    """`stdio`, or the HTTP transport the entry names (`auto` when it names none)."""
    stdio = sorted(set(entry) & _STDIO_KEYS)
    http = sorted(set(entry) & _HTTP_KEYS)
    if "command" in entry and "url" in entry:
        raise _Fault('both "command" (stdio) and "url" (HTTP); a server is one or the other')
    if "command" not in entry and "url" not in entry:
        raise _Fault('neither "command" (a stdio server) nor "url" (an HTTP server)')
    kind = "stdio" if "command" in entry else "auto"
    if kind == "stdio" and http:
        raise _Fault(f"{http} belong to an HTTP server, and this one has a command")
    if kind == "auto" and stdio:
        raise _Fault(f"{stdio} belong to a stdio server, and this one has a url")
    if "type" in entry:
        named = _TYPES.get(entry["type"]) if isinstance(entry["type"], str) else None
        if named is None:
            raise _Fault(f'"type" is none of {sorted(_TYPES)}')
        if (named == "stdio") != (kind == "stdio"):
            raise _Fault(f'"type" {entry["type"]!r} does not fit a server with a {_what(kind)}')
        kind = named
    return kind


def _what(kind: str) -> str:
    return "command" if kind == "stdio" else "url"


def _command(entry: Mapping[str, Any]) -> str:
    """The command line: `command` and `args` quoted into one (the form of
    MCP_SHIM_UPSTREAM_COMMAND); `command` alone is taken as a whole line."""
    command = entry["command"]
    if not isinstance(command, str) or not command.strip():
        raise _Fault('"command" is not a non-empty string')
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise _Fault('"args" is not a list of strings')
    return shlex.join([command, *args]) if args else command


def _optional_string(value: object, key: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _Fault(f'"{key}" is not a string')
    return value


def _string_map(value: object, key: str, names: re.Pattern[str]) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _Fault(f'"{key}" is not an object')
    for name, item in value.items():
        if not names.match(name):
            raise _Fault(f'"{key}" has an invalid name {name!r}')
        if not isinstance(item, str):
            raise _Fault(f'"{key}.{name}" is not a string')
    return dict(value)


def _fixed_headers(raw: object, where: str) -> dict[str, str]:
    """Fixed upstream headers: `{"Name": "value"}`, a value may be
    `{"file": "/path"}` (read now, its trailing newline stripped). Secrets:
    never said in a fault."""
    if not isinstance(raw, dict):
        raise _Fault(f'"{where}" is not an object')
    headers: dict[str, str] = {}
    for name, value in raw.items():
        if not _HEADER_NAME.match(name):
            raise _Fault(f'"{where}" has an invalid header name {name!r}')
        headers[name] = _header_value(value, f"{where}.{name}")
    return headers


def _header_value(value: object, where: str) -> str:
    if isinstance(value, dict) and set(value) == {"file"} and isinstance(value["file"], str):
        try:
            text = Path(value["file"]).read_text(encoding="utf-8").removesuffix("\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise _Fault(f'"{where}": cannot read {value["file"]!r} ({exc})') from None
        value = text.removesuffix("\r")
    if not isinstance(value, str):
        raise _Fault(f'"{where}" is neither a string nor {{"file": "/path"}}')
    if any(ch in value for ch in "\r\n\0"):
        raise _Fault(f'"{where}" holds a line break or NUL')
    return value


def _overrides(raw: object) -> tuple[dict[str, Any], bool]:
    """The `mcpShim` object: its settings, and the aggregate membership."""
    if not isinstance(raw, dict):
        raise _Fault(f'"{SHIM_KEY}" is not an object')
    aggregate = raw.get(AGGREGATE_KEY, True)
    if not isinstance(aggregate, bool):
        raise _Fault(f'"{SHIM_KEY}.{AGGREGATE_KEY}" is not true or false')
    settings = {k: v for k, v in raw.items() if k != AGGREGATE_KEY}
    for key in sorted(settings):
        if key not in OVERRIDABLE:
            raise _Fault(
                f'"{SHIM_KEY}.{key}" is not a per-server setting; those are '
                f"{sorted(OVERRIDABLE | {AGGREGATE_KEY})}"
            )
    return settings, aggregate


def server_settings(base: Settings, spec: ServerSpec, where: str) -> Settings:
    """The gateway's settings with this server as the upstream and its
    overrides applied, validated as the environment's are."""
    values: dict[str, Any] = {name: getattr(base, name) for name in Settings.model_fields}
    values.update(
        servers_file=None,
        servers=None,
        upstream_url=spec.url,
        upstream_command=spec.command,
        **spec.overrides,
    )
    if spec.cwd is not None and not Path(spec.cwd).is_dir():
        raise _error(where, spec.name, f'"cwd" {spec.cwd!r} is not a directory')
    if base.public_url is not None:
        # MCP_SHIM_PUBLIC_URL names the gateway's /mcp; the server's is beside it.
        public = str(base.public_url).rstrip("/").removesuffix("/mcp")
        values["public_url"] = f"{public}/servers/{spec.name}/mcp"
    if base.advertise_url is not None:
        # Owned ids name the server's route on their replica: a relay to the
        # owner (its /mcp, its notes) reaches that server's app there.
        values["advertise_url"] = f"{str(base.advertise_url).rstrip('/')}/servers/{spec.name}"
    # Its own fixed headers (MCP_SHIM_UPSTREAM_HEADERS is the single server's).
    values["upstream_headers"] = dict(spec.headers)
    try:
        own = Settings.model_validate(values)
    except ValidationError as exc:
        faults = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise _error(where, spec.name, faults) from None
    broken = rules.problems(own)
    if broken:
        raise _error(where, spec.name, "; ".join(broken))
    return own


def read_servers(settings: Settings) -> Servers | None:
    """The servers MCP_SHIM_SERVERS_FILE or MCP_SHIM_SERVERS names; None when
    neither is set (one server, MCP_SHIM_UPSTREAM_URL or _COMMAND)."""
    if settings.servers_file is not None:
        where = f"MCP_SHIM_SERVERS_FILE={settings.servers_file}"
        try:
            text = Path(settings.servers_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise _error(where, None, f"cannot be read ({exc})") from None
        return parse_servers(text, where)
    if settings.servers is not None:
        return parse_servers(settings.servers.get_secret_value(), "MCP_SHIM_SERVERS")
    return None


def where_of(settings: Settings) -> str:
    """How faults name the servers' source."""
    if settings.servers_file is not None:
        return f"MCP_SHIM_SERVERS_FILE={settings.servers_file}"
    return "MCP_SHIM_SERVERS"


def names(specs: Sequence[ServerSpec]) -> list[str]:
    return [spec.name for spec in specs]


def settled(settings: Settings) -> Settings:
    """The settings a gateway with a servers file runs with, every server's
    checked now (exit 2 at start, not at its first call). Its workers are a
    single server's: each serves every server (app/serving/workers.py)."""
    servers = read_servers(settings)
    if servers is None:
        return settings
    where = where_of(settings)
    for spec in servers.specs:
        server_settings(settings, spec, where)
    return settings
