"""The settings on the command line: the flags for the few settings people
type (each equal to its `MCP_SHIM_*` variable), and `mcp-shim config`, which
prints every effective setting with where it came from (a flag, the
environment, the settings file or the default).

A flag is written into this process's environment before the settings are
read (`apply_flags`): the settings then have one source, and the processes
this one starts inherit it (the re-exec that takes MCP_SHIM_STATE_KEY out of
the environment, app/serving/state_key.py; the supervisor and its workers,
app/serving/workers.py, which start with the environment and no flags).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Collection, MutableMapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

from app.config import Settings
from app.serving.workers import worker_count
from app.settings.check import mask_userinfo, variable
from app.settings.load import Loaded


@dataclass(frozen=True, slots=True)
class Flag:
    option: str
    field: str
    metavar: str
    help: str

    @property
    def dest(self) -> str:
        return "flag_" + self.field


FLAGS: Final = (
    Flag("--host", "host", "HOST", "address to listen on (default 127.0.0.1)"),
    Flag("--port", "port", "PORT", "port to listen on (default 8080)"),
    Flag("--upstream", "upstream_url", "URL", "the server's MCP endpoint, an http(s):// URL"),
    Flag(
        "--stdio",
        "upstream_command",
        "'CMD ARGS'",
        "a stdio MCP server the gateway starts, one quoted command line",
    ),
    Flag("--workers", "workers", "N", "gateway processes (default: the CPUs it may use)"),
    Flag("--config", "config", "FILE", "settings file, .toml or .env, below the environment"),
)
# The two ways of naming the upstream: one given as a flag replaces either variable.
_UPSTREAM = ("upstream_url", "upstream_command")
# The sources `mcp-shim config` names.
DEFAULT, ENVIRONMENT, FILE, FLAG = "default", "environment", "file", "flag"


def add_flags(parser: argparse.ArgumentParser, *, suppress_defaults: bool = False) -> None:
    """The flags on `parser`; `suppress_defaults` on a subcommand's, so that a flag
    given before the subcommand (`mcp-shim --port 9000 serve`) is not reset."""
    group = parser.add_argument_group(
        "settings", "each equal to the variable beside it; a flag wins over its variable"
    )
    upstream = group.add_mutually_exclusive_group()
    for flag in FLAGS:
        target = upstream if flag.field in _UPSTREAM else group
        target.add_argument(
            flag.option,
            dest=flag.dest,
            metavar=flag.metavar,
            default=argparse.SUPPRESS if suppress_defaults else None,
            help=f"{flag.help} [{variable(flag.field)}]",
        )


def given_flags(args: argparse.Namespace) -> dict[str, str]:
    """The settings given as flags, by variable name."""
    given = {}
    for flag in FLAGS:
        value = getattr(args, flag.dest, None)
        if value is not None:
            given[variable(flag.field)] = value
    return given


def apply_flags(args: argparse.Namespace, environ: MutableMapping[str, str]) -> dict[str, str]:
    """Write the flags into `environ` (os.environ) as their variables; the ones
    written. A flag naming the upstream replaces both upstream variables:
    exactly one may be set, and the flag is the operator's latest word."""
    given = given_flags(args)
    if given.keys() & {variable(field) for field in _UPSTREAM}:
        for field in _UPSTREAM:
            _unset(environ, variable(field))
    for name, value in given.items():
        _unset(environ, name)
        environ[name] = value
    return given


def with_flag_names(message: str, given: Collection[str]) -> str:
    """A settings error `message` naming, under it, the flag that set each
    variable it names: a `--port 70000` is reported as MCP_SHIM_PORT='70000'."""
    for flag in FLAGS:
        name = variable(flag.field)
        if name in given and name in message:
            message += f"\n  ({name} was given as {flag.option})"
    return message


def _unset(environ: MutableMapping[str, str], name: str) -> None:
    # pydantic-settings reads names without regard to case.
    for key in [key for key in environ if key.upper() == name]:
        del environ[key]


# -- mcp-shim config ----------------------------------------------------------------

# Settings unset by default whose effective value the code derives: what it is
# derived from, and the value.
DERIVED: Final[dict[str, tuple[str, Callable[[Settings], object]]]] = {
    "workers": ("the CPUs this process may use", worker_count),
    "max_sessions_per_credential": (
        "a quarter of MCP_SHIM_MAX_SESSIONS",
        lambda s: s.session_share(),
    ),
    "max_legacy_sessions_per_credential": (
        "a quarter of MCP_SHIM_MAX_LEGACY_SESSIONS",
        lambda s: s.legacy_session_share(),
    ),
    "stdio_max_processes_per_credential": (
        "three quarters of MCP_SHIM_STDIO_MAX_PROCESSES, never all of them",
        lambda s: s.stdio_process_share(),
    ),
    "task_max_sessions": (
        "three quarters of MCP_SHIM_MAX_SESSIONS",
        lambda s: s.task_limits(s.max_sessions).sessions,
    ),
    "task_max_sessions_per_credential": (
        "three quarters of MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL",
        lambda s: s.task_limits(s.max_sessions).sessions_per_credential,
    ),
    "task_max_connections": (
        "three quarters of MCP_SHIM_MAX_UPSTREAM_CONNECTIONS",
        lambda s: s.task_limits(s.max_sessions).connections,
    ),
    "task_max_connections_per_credential": (
        "a quarter of MCP_SHIM_TASK_MAX_CONNECTIONS",
        lambda s: s.task_limits(s.max_sessions).connections_per_credential,
    ),
}
# What an unset setting without a derived value means.
UNSET: Final = {
    "metrics_port": "/metrics on MCP_SHIM_PORT",
    "worker_port_base": "any free ports",
    "state_key": "one random key per process",
    "config": "no settings file",
}
# The shape of `config --json`; raised only when a field changes meaning or goes.
JSON_SHAPE = 1


@dataclass(frozen=True, slots=True)
class Row:
    variable: str
    value: object  # as JSON would hold it; a secret masked
    source: str
    note: str | None = None  # "default: a quarter of ..." or "unset: ..."


def source_of(
    name: str,
    flags: Collection[str],
    environment: Collection[str],
    from_file: Collection[str] = (),
) -> str:
    """Where variable `name` came from: `environment` holds the names set before
    the flags were applied, in capitals; `from_file` the fields the settings
    file gave."""
    if name in flags:
        return FLAG
    if name in environment:
        return ENVIRONMENT
    return FILE if name.removeprefix("MCP_SHIM_").lower() in from_file else DEFAULT


def rows(
    settings: Settings | Loaded, flags: Collection[str], environment: Collection[str]
) -> list[Row]:
    """Every setting, in declaration order; given `Loaded`, the ones the
    settings file gave say so."""
    from_file: Collection[str] = ()
    if isinstance(settings, Loaded):
        from_file = settings.from_file
        settings = settings.settings
    out = []
    for field in Settings.model_fields:
        name = variable(field)
        value = getattr(settings, field)
        note = None
        if value is None and field in DERIVED:
            what, derive = DERIVED[field]
            value, note = derive(settings), f"default: {what}"
        elif value is None:
            note = f"unset: {UNSET[field]}" if field in UNSET else "unset"
        source = source_of(name, flags, environment, from_file)
        out.append(Row(name, shown(field, value), source, note))
    return out


def shown(field: str, value: object) -> object:
    """`value` as printed: JSON's types, a secret masked, a URL without its password."""
    if field == "task_store" and isinstance(value, SecretStr):
        return masked_store(value.get_secret_value())
    if isinstance(value, SecretStr):
        return "(set, hidden)"
    if isinstance(value, dict):  # MCP_SHIM_UPSTREAM_HEADERS: the names, never a value
        return {str(name): "(set, hidden)" for name in value}
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list):
        return [str(item) for item in value]
    return masked_url(str(value))


def masked_url(url: str) -> str:
    """A URL with its password, if any, as *** and its query hidden (either may
    hold a credential)."""
    parts = urlsplit(url)
    query = "(hidden)" if parts.query else ""
    return mask_userinfo(urlunsplit((parts.scheme, parts.netloc, parts.path, query, "")))


def masked_store(value: str) -> str:
    """MCP_SHIM_TASK_STORE as printed: `memory`, or its URL's scheme, host, port and
    database with the password masked; a value that is no URL is hidden."""
    value = value.strip()
    if value in ("", "memory"):
        return "memory"
    parts = urlsplit(value)
    if not parts.hostname:
        return "(set, hidden)"
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    user = parts.username or ""
    if parts.password is not None:
        user += ":***"
    netloc = f"{user}@{host}" if user else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def render(table: list[Row]) -> str:
    width = max(len(row.variable) for row in table)
    lines = [f"# {'variable':<{width - 2}}  {'source':<11}  value"]
    for row in table:
        value = _text(row.value)
        if row.note is not None:
            value = f"{value} ({row.note})" if row.value is not None else f"({row.note})"
        lines.append(f"{row.variable:<{width}}  {row.source:<11}  {value}")
    return "\n".join(lines)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, dict):
        return json.dumps(value)
    return "" if value is None else str(value)


def as_json(table: list[Row]) -> str:
    settings: list[dict[str, Any]] = [
        {"variable": row.variable, "value": row.value, "source": row.source, "note": row.note}
        for row in table
    ]
    return json.dumps({"shape": JSON_SHAPE, "settings": settings}, indent=2)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the settings as JSON")


CONFIG_DESCRIPTION = """\
Print every setting the gateway would run with: its variable, where its value
came from (default, the settings file MCP_SHIM_CONFIG, environment or flag)
and the value. Secrets are masked: MCP_SHIM_STATE_KEY is only said to be set,
MCP_SHIM_UPSTREAM_HEADERS shows its header names only, MCP_SHIM_TASK_STORE
shows its host without the password, a URL never its password or query. A setting whose
default is derived (a per-credential share, the worker count) shows the
derived value and what it is derived from. The settings are checked as
`serve` checks them: an invalid one exits 2 with the same message."""
