"""The rules `MCP_SHIM_*` values keep, checked as `Settings` (app/config.py) is
built: each value's form (comma-separated lists, the stdio command line, the task
store URL, the state keys, environment variable names) and settings against
each other (parked calls within the upstream connections and sessions, tasks
leaving a reserve, the call deadline within the read timeout). `SettingsRules`
holds these validators and `Settings` inherits them: pydantic applies them to the
fields declared there, in the order they are declared, and refuses a validator
naming no field.
"""

from __future__ import annotations

import re
import shlex
import shutil
from urllib.parse import urlsplit

from pydantic import AnyHttpUrl, SecretStr, ValidationInfo, field_validator

from app import settings_check

# Upstream connections kept free of parked exchanges for everything else.
_SPARE_CONNECTIONS = 64
# MCP_SHIM_STATE_KEY's length: the key list travels between the gateway's
# processes in a pipe written at once (app/serving/state_key.py), which holds at least
# one page. About 90 keys of 32 bytes.
STATE_KEY_MAX_CHARS = 4096


class SettingsRules:
    """The validators of `Settings`' fields (app/config.py); the rules that read
    the settings themselves (`model_validator`s) are declared with the fields."""

    @field_validator(
        "allowed_origins", "allowed_hosts", "upstream_env", "task_tools", mode="before"
    )
    @classmethod
    def _csv(cls, value: object, info: ValidationInfo) -> object:
        # Lists come as comma-separated strings: JSON arrays in environment
        # variables are a common source of quoting mistakes in compose files.
        return settings_check.csv_list(value, info.field_name or "")

    @field_validator("metrics_port", "workers", "worker_port_base", mode="before")
    @classmethod
    def _unset_if_empty(cls, value: object) -> object:
        # `MCP_SHIM_METRICS_PORT=` (an empty value in a compose file) means unset.
        return None if value == "" else value

    @field_validator("metrics_port")
    @classmethod
    def _other_port(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and value == info.data.get("port"):
            raise ValueError("must differ from MCP_SHIM_PORT (or be unset: /metrics on that port)")
        return value

    @field_validator("upstream_command")
    @classmethod
    def _command_line(cls, value: str | None) -> str | None:
        if value is not None:
            command_argv(value)  # ValueError says what is wrong with it
        return value

    @field_validator("upstream_env")
    @classmethod
    def _env_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if name.upper().startswith("MCP_SHIM_"):
                # The gateway's own settings include its secrets (MCP_SHIM_STATE_KEY).
                raise ValueError(f"{name} is the gateway's own setting; it is never passed on")
        return value

    @field_validator("upstream_protocol_version")
    @classmethod
    def _known_legacy(cls, value: str) -> str:
        from translators.registry import Era, get_version

        version = get_version(value)
        if version is None or version.era is not Era.LEGACY:
            raise ValueError(f"{value!r} is not a legacy MCP protocol version this gateway knows")
        return value

    @field_validator("state_key")
    @classmethod
    def _state_keys(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            if len(value.get_secret_value()) > STATE_KEY_MAX_CHARS:
                raise ValueError(f"longer than {STATE_KEY_MAX_CHARS} characters")
            from app.cluster.sealing import parse_keys

            parse_keys(value.get_secret_value())  # ValueError names the bad key, not its value
        return value

    @field_validator("task_store")
    @classmethod
    def _task_store(cls, value: SecretStr) -> SecretStr:
        task_store_url(value.get_secret_value())  # ValueError says what is wrong, never the value
        return value

    @field_validator("advertise_url")
    @classmethod
    def _base_url(cls, value: AnyHttpUrl | None) -> AnyHttpUrl | None:
        if value is not None and (value.query or value.fragment):
            raise ValueError("must be a base URL such as http://10.0.0.5:8080 (no query, no #)")
        return value

    @field_validator("public_url")
    @classmethod
    def _endpoint_url(cls, value: AnyHttpUrl | None) -> AnyHttpUrl | None:
        if value is not None and (value.query or value.fragment):
            raise ValueError("must be the MCP endpoint URL such as https://mcp.example.com/mcp")
        return value

    @field_validator("mrtr_ttl_s")
    @classmethod
    def _ttl_below_read_timeout(cls, value: float, info: ValidationInfo) -> float:
        # A parked call's upstream stream is silent while it waits; the upstream
        # read timeout must not end it before the TTL does.
        timeout = info.data.get("request_timeout_s")
        if isinstance(timeout, float | int) and value >= timeout:
            raise ValueError(
                f"must be below MCP_SHIM_REQUEST_TIMEOUT_S ({timeout:g}): a parked call's "
                "upstream stream would time out first"
            )
        return value

    @field_validator("max_parked")
    @classmethod
    def _parked_fit_connections(cls, value: int, info: ValidationInfo) -> int:
        # Parked calls keep their upstream connections; the rest of the traffic
        # must still find free ones, or every call would wait for a parked one.
        connections = info.data.get("max_upstream_connections")
        if isinstance(connections, int) and 2 * value + _SPARE_CONNECTIONS > connections:
            raise ValueError(
                f"{value} parked exchanges hold up to {2 * value} upstream connections; "
                f"raise MCP_SHIM_MAX_UPSTREAM_CONNECTIONS ({connections}) to at least "
                f"{2 * value + _SPARE_CONNECTIONS} or lower MCP_SHIM_MAX_PARKED"
            )
        return value

    @field_validator("max_parked")
    @classmethod
    def _parked_fit_sessions(cls, value: int, info: ValidationInfo) -> int:
        # Each parked exchange keeps its lane, an upstream session of its own.
        sessions = info.data.get("max_sessions")
        if isinstance(sessions, int) and value > sessions:
            raise ValueError(
                f"{value} parked exchanges hold {value} upstream sessions (lanes); raise "
                f"MCP_SHIM_MAX_SESSIONS ({sessions}) to at least {value} or lower "
                "MCP_SHIM_MAX_PARKED"
            )
        return value

    @field_validator("task_max_sessions")
    @classmethod
    def _task_sessions_leave_a_reserve(cls, value: int | None, info: ValidationInfo) -> int | None:
        sessions = info.data.get("max_sessions")
        if value is not None and isinstance(sessions, int) and value >= sessions:
            raise ValueError(
                f"must be below MCP_SHIM_MAX_SESSIONS ({sessions}): calls that are not tasks "
                "keep the rest"
            )
        return value

    @field_validator("task_max_connections")
    @classmethod
    def _task_connections_leave_a_reserve(
        cls, value: int | None, info: ValidationInfo
    ) -> int | None:
        connections = info.data.get("max_upstream_connections")
        if value is not None and isinstance(connections, int) and value >= connections:
            raise ValueError(
                f"must be below MCP_SHIM_MAX_UPSTREAM_CONNECTIONS ({connections}): calls "
                "that are not tasks keep the rest"
            )
        return value

    @field_validator("mrtr_gather_max_ms")
    @classmethod
    def _gather_after_quiet(cls, value: int, info: ValidationInfo) -> int:
        quiet = info.data.get("mrtr_quiet_ms")
        if isinstance(quiet, int) and value < quiet:
            raise ValueError(f"must be at least MCP_SHIM_MRTR_QUIET_MS ({quiet})")
        return value

    @field_validator("call_deadline_s")
    @classmethod
    def _deadline_fits(cls, value: float, info: ValidationInfo) -> float:
        # Above the upstream read timeout, a silent upstream would be cut by
        # that timeout first and the deadline would never be the one to answer.
        timeout = info.data.get("request_timeout_s")
        if isinstance(timeout, float | int) and value > timeout:
            raise ValueError(
                f"must be at most MCP_SHIM_REQUEST_TIMEOUT_S ({timeout:g}): a silent "
                "upstream would hit that read timeout first"
            )
        # A turn of a multi round-trip call gathers the upstream's questions
        # before it answers; the deadline must leave it that time.
        gather = info.data.get("mrtr_gather_max_ms")
        if isinstance(gather, int) and value * 1000 <= gather:
            raise ValueError(
                f"must be above MCP_SHIM_MRTR_GATHER_MAX_MS ({gather} ms): a turn of a "
                "multi round-trip call could not gather the upstream's questions"
            )
        return value


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


def task_store_url(value: str) -> str | None:
    """The shared store's URL in MCP_SHIM_TASK_STORE, None for `memory` (or empty);
    ValueError naming what is wrong, never quoting the value (it may hold a password)."""
    value = value.strip()
    if value in ("", "memory"):
        return None
    forms = "use memory, redis://host:port/db or rediss://host:port/db"
    parts = urlsplit(value)
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError(f"is neither memory nor a redis:// or rediss:// URL; {forms}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"has a port that is not a number from 0 to 65535; {forms}") from None
    if not parts.hostname or port == 0:
        raise ValueError(f"names no host, or port 0; {forms}")
    if parts.path not in ("", "/") and not re.fullmatch(r"/\d{1,5}", parts.path):
        raise ValueError(f"has a path that is not a database number; {forms}")
    if parts.query or parts.fragment:
        raise ValueError(f"has a query or #fragment, which are not supported; {forms}")
    return value
