"""The rules `MCP_SHIM_*` values keep beyond their type and range, checked on
the built `Settings` (app/config.py) by `load_settings` (app/settings/load.py):
each value's form where it needs more than the model knows (the stdio command
on PATH, the state keys, a known protocol version, environment variable names,
the task store URL, base URLs) and settings against each other (parked calls
within the upstream connections and sessions, tasks leaving a reserve, the
call deadline within the read timeout).

`problems` returns one line per broken rule, `MCP_SHIM_X: what is wrong`, as
app/settings/check.py says a refused value; the model imports nothing of the
gateway, so the rules that need other modules (app/cluster/sealing.py,
translators/registry.py) live here, above it.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Callable

from app.config import Settings, task_store_url
from app.settings.check import variable

# Upstream connections kept free of parked exchanges for everything else.
_SPARE_CONNECTIONS = 64
# MCP_SHIM_STATE_KEY's length: the key list travels between the gateway's
# processes in a pipe written at once (app/serving/state_key.py), which holds at least
# one page. About 90 keys of 32 bytes.
STATE_KEY_MAX_CHARS = 4096

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def problems(settings: Settings) -> list[str]:
    """One line for each rule `settings` breaks, naming the variable."""
    lines = []
    for field, rule in _RULES:
        try:
            rule(settings)
        except ValueError as exc:
            lines.append(f"{variable(field)}: {exc}")
    return lines


def command_argv(command: str) -> list[str]:
    """MCP_SHIM_UPSTREAM_COMMAND split with shell quoting rules (no shell runs it);
    ValueError when it cannot be, or its program cannot be found."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:  # "No closing quotation"
        raise ValueError(f"cannot be split into arguments: {exc}") from None
    if not argv:
        raise ValueError("is empty")
    if shutil.which(argv[0]) is None:
        raise ValueError(f"{argv[0]!r} is not an executable file nor found on PATH")
    return argv


def _command_line(s: Settings) -> None:
    if s.upstream_command is not None:
        command_argv(s.upstream_command)


def _one_source(s: Settings) -> None:
    """One upstream, or the servers of a servers file (app/settings/servers.py)."""
    named = (
        ("MCP_SHIM_UPSTREAM_URL", s.upstream_url),
        ("MCP_SHIM_UPSTREAM_COMMAND", s.upstream_command),
        ("MCP_SHIM_SERVERS_FILE", s.servers_file),
        ("MCP_SHIM_SERVERS", s.servers),
    )
    both = [name for name, value in named if value is not None]
    if both[-1:] in (["MCP_SHIM_SERVERS_FILE"], ["MCP_SHIM_SERVERS"]) and s.upstream_headers:
        raise ValueError(
            "MCP_SHIM_UPSTREAM_HEADERS is the single server's; give each server "
            'of the file its own "headers"'
        )
    if len(both) > 1:
        raise ValueError(
            f"{' and '.join(both)} are set together; set either one upstream "
            "(MCP_SHIM_UPSTREAM_URL or _COMMAND) or the servers (MCP_SHIM_SERVERS_FILE "
            "or MCP_SHIM_SERVERS), only one of them"
        )


def _other_port(s: Settings) -> None:
    if s.metrics_port is not None and s.metrics_port == s.port:
        raise ValueError("must differ from MCP_SHIM_PORT (or be unset: /metrics on that port)")


def _env_names(s: Settings) -> None:
    for name in s.upstream_env:
        if not _ENV_NAME.match(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        if name.upper().startswith("MCP_SHIM_"):
            # The gateway's own settings include its secrets (MCP_SHIM_STATE_KEY).
            raise ValueError(f"{name} is the gateway's own setting; it is never passed on")


def _known_legacy(s: Settings) -> None:
    from translators.registry import Era, get_version

    version = get_version(s.upstream_protocol_version)
    if version is None or version.era is not Era.LEGACY:
        raise ValueError(
            f"{s.upstream_protocol_version!r} is not a legacy MCP protocol version this "
            "gateway knows"
        )


def _state_keys(s: Settings) -> None:
    if s.state_key is None:
        return
    text = s.state_key.get_secret_value()
    if len(text) > STATE_KEY_MAX_CHARS:
        raise ValueError(f"longer than {STATE_KEY_MAX_CHARS} characters")
    from app.cluster.sealing import parse_keys

    parse_keys(text)  # ValueError names the bad key, not its value


def _task_store(s: Settings) -> None:
    task_store_url(s.task_store.get_secret_value())  # says what is wrong, never the value


def _base_url(s: Settings) -> None:
    url = s.advertise_url
    if url is not None and (url.query or url.fragment):
        raise ValueError("must be a base URL such as http://10.0.0.5:8080 (no query, no #)")


def _endpoint_url(s: Settings) -> None:
    url = s.public_url
    if url is not None and (url.query or url.fragment):
        raise ValueError("must be the MCP endpoint URL such as https://mcp.example.com/mcp")


def _ttl_below_read_timeout(s: Settings) -> None:
    # A parked call's upstream stream is silent while it waits; the upstream
    # read timeout must not end it before the TTL does.
    if s.mrtr_ttl_s >= s.request_timeout_s:
        raise ValueError(
            f"must be below MCP_SHIM_REQUEST_TIMEOUT_S ({s.request_timeout_s:g}): a parked "
            "call's upstream stream would time out first"
        )


def _parked_fit(s: Settings) -> None:
    # Parked calls keep their upstream connections; the rest of the traffic
    # must still find free ones, or every call would wait for a parked one.
    value, connections = s.max_parked, s.max_upstream_connections
    if 2 * value + _SPARE_CONNECTIONS > connections:
        raise ValueError(
            f"{value} parked exchanges hold up to {2 * value} upstream connections; "
            f"raise MCP_SHIM_MAX_UPSTREAM_CONNECTIONS ({connections}) to at least "
            f"{2 * value + _SPARE_CONNECTIONS} or lower MCP_SHIM_MAX_PARKED"
        )
    # Each parked exchange keeps its lane, an upstream session of its own.
    if value > s.max_sessions:
        raise ValueError(
            f"{value} parked exchanges hold {value} upstream sessions (lanes); raise "
            f"MCP_SHIM_MAX_SESSIONS ({s.max_sessions}) to at least {value} or lower "
            "MCP_SHIM_MAX_PARKED"
        )


def _task_sessions_leave_a_reserve(s: Settings) -> None:
    if s.task_max_sessions is not None and s.task_max_sessions >= s.max_sessions:
        raise ValueError(
            f"must be below MCP_SHIM_MAX_SESSIONS ({s.max_sessions}): calls that are not "
            "tasks keep the rest"
        )


def _task_connections_leave_a_reserve(s: Settings) -> None:
    connections = s.max_upstream_connections
    if s.task_max_connections is not None and s.task_max_connections >= connections:
        raise ValueError(
            f"must be below MCP_SHIM_MAX_UPSTREAM_CONNECTIONS ({connections}): calls "
            "that are not tasks keep the rest"
        )


def _gather_after_quiet(s: Settings) -> None:
    if s.mrtr_gather_max_ms < s.mrtr_quiet_ms:
        raise ValueError(f"must be at least MCP_SHIM_MRTR_QUIET_MS ({s.mrtr_quiet_ms})")


def _deadline_fits(s: Settings) -> None:
    # Above the upstream read timeout, a silent upstream would be cut by
    # that timeout first and the deadline would never be the one to answer.
    if s.call_deadline_s > s.request_timeout_s:
        raise ValueError(
            f"must be at most MCP_SHIM_REQUEST_TIMEOUT_S ({s.request_timeout_s:g}): a silent "
            "upstream would hit that read timeout first"
        )
    # A turn of a multi round-trip call gathers the upstream's questions
    # before it answers; the deadline must leave it that time.
    if s.call_deadline_s * 1000 <= s.mrtr_gather_max_ms:
        raise ValueError(
            f"must be above MCP_SHIM_MRTR_GATHER_MAX_MS ({s.mrtr_gather_max_ms} ms): a turn "
            "of a multi round-trip call could not gather the upstream's questions"
        )


# In the order of the fields they are reported under.
_RULES: tuple[tuple[str, Callable[[Settings], None]], ...] = (
    ("upstream_command", _command_line),
    ("servers_file", _one_source),
    ("metrics_port", _other_port),
    ("upstream_protocol_version", _known_legacy),
    ("upstream_env", _env_names),
    ("task_store", _task_store),
    ("state_key", _state_keys),
    ("advertise_url", _base_url),
    ("public_url", _endpoint_url),
    ("mrtr_ttl_s", _ttl_below_read_timeout),
    ("max_parked", _parked_fit),
    ("task_max_sessions", _task_sessions_leave_a_reserve),
    ("task_max_connections", _task_connections_leave_a_reserve),
    ("mrtr_gather_max_ms", _gather_after_quiet),
    ("call_deadline_s", _deadline_fits),
)
