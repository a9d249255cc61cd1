"""Gateway settings: `Settings`, its fields, the rules that read them whole
(one upstream, its transport) and the limits derived from them (shares, what
tasks may hold). It imports nothing of the gateway, so every layer may import
it. The rules on single values and of settings against each other run on the
built model (app/settings/rules.py); the sources, flags, environment and
settings file, are read by app/settings/load.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AnyHttpUrl, Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
# MCP_SHIM_MAX_TASK_RESULT_BYTES' default, the task stores' own (app/tasks/store.py).
DEFAULT_MAX_RECORD_BYTES = 4 * 1024 * 1024
# MCP_SHIM_MAX_JSON_DEPTH's ceiling: orjson serialises about 254 levels, and the
# gateway wraps a message in a few levels of its own (app/jsonio.py `deeper_than`).
MAX_JSON_DEPTH_CEILING = 200


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MCP_SHIM_", extra="ignore", frozen=True)

    # Exactly one of these two: the upstream is an HTTP endpoint or a command (stdio).
    upstream_url: AnyHttpUrl | None = Field(
        default=None, description="MCP endpoint of the legacy server"
    )
    upstream_command: str | None = Field(
        default=None,
        description="command line (shell quoting rules, no shell) of a stdio MCP server the "
        "gateway starts itself",
    )
    # Read by app/settings/load.py below the environment; never inside the file itself.
    config: str | None = Field(
        default=None,
        description="settings file: a .toml file of the settings' lower-case names, or a "
        ".env file of MCP_SHIM_* lines; the environment and flags win over it",
    )
    # Many servers instead, each at /servers/NAME/mcp (app/settings/servers.py).
    servers_file: str | None = Field(
        default=None, description="JSON file of the servers behind the gateway (mcpServers)"
    )
    servers: SecretStr | None = Field(default=None, description="the servers file's JSON, inline")
    # The aggregated /mcp (app/servers/aggregate/; docs/settings.md says what each does).
    aggregate: bool = True
    aggregate_separator: str = Field(default="__", pattern=r"^[A-Za-z0-9_.-]{1,8}$")
    aggregate_list_timeout_s: float = Field(default=5.0, gt=0, le=60)
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    # /metrics on a port of its own (same host), not beside /mcp; unset: on `port`.
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Gateway processes on `port` (app/serving/workers.py); unset: the CPUs this process may use.
    workers: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="gateway processes sharing MCP_SHIM_PORT; unset: the CPUs the container "
        "may use (affinity and cgroup CPU quota, whichever is smaller)",
    )
    # Idle connections moved between workers as the load asks (app/serving/balance.py).
    move_connections: bool = Field(
        default=True,
        description="with several workers, gather a light load's connections on one worker "
        "and spill a saturated worker's to an idle one",
    )
    worker_port_base: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="with several workers, worker i also listens on this port + i (the "
        "address in its MCP_SHIM_ADVERTISE_URL); unset or 0: any free ports",
    )

    upstream_protocol_version: str = Field(
        default="2025-11-25", description="version offered to the upstream at initialize"
    )
    upstream_era: Literal["auto", "modern", "legacy"] = Field(
        default="auto",
        description="the upstream's era: probed with server/discover (auto), or fixed",
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Origins allowed besides loopback ones; '*' allows any",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host header values allowed besides loopback ones; '*' allows any",
    )
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    max_json_depth: int = Field(
        default=64,
        ge=2,
        le=MAX_JSON_DEPTH_CEILING,
        description="objects and arrays nested deeper than this in a message are refused (400)",
    )
    # An answer whose client reads nothing for this long is closed
    # (app/fronts/shared/answer.py, app/serving/http_protocol.py).
    write_timeout_s: float = Field(default=30.0, gt=0)
    read_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="a request's headers, then its body, must each arrive within this long",
    )
    max_connections: int = Field(
        default=1024,
        ge=1,
        description="client connections open at once (kept within the file-descriptor limit)",
    )
    connect_timeout_s: float = Field(default=5.0, gt=0)
    request_timeout_s: float = Field(default=300.0, gt=0)
    session_idle_s: float = Field(default=300.0, gt=0)
    # Every upstream session counts: pooled, being opened, and the MRTR bridge's
    # lanes (one per running or parked input-capable call), hence room for
    # MCP_SHIM_MAX_PARKED of them.
    max_sessions: int = Field(default=1024, ge=1)
    max_sessions_per_credential: int | None = Field(
        default=None,
        ge=1,
        description="upstream sessions one Authorization value (or all anonymous callers "
        "together) may hold; unset: a quarter of MCP_SHIM_MAX_SESSIONS",
    )
    # Legacy clients' own sessions (app/fronts/legacy/bound.py): bounded apart from the
    # pooled ones above, which they can never take from a modern caller.
    max_legacy_sessions: int = Field(
        default=1024,
        ge=1,
        description="legacy clients' sessions at most (each holds one upstream session)",
    )
    max_legacy_sessions_per_credential: int | None = Field(
        default=None,
        ge=1,
        description="legacy sessions one Authorization value (or all anonymous callers "
        "together) may hold; unset: a quarter of MCP_SHIM_MAX_LEGACY_SESSIONS",
    )
    legacy_session_reclaim_idle_s: float = Field(
        default=60.0,
        gt=0,
        description="at the legacy bound, a session idle this long is ended to make room",
    )
    # A 2025-11-25 client's tasks on a modern upstream with the tasks extension
    # (app/upstream/modern/tasks.py): the record tasks/list answers from.
    legacy_tasks_per_session: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="tasks one legacy session's record keeps (oldest forgotten first); "
        "tasks/list lists them, and a task no longer in it is unknown to that session",
    )
    # JSON-RPC batches of 2024-11-05 / 2025-03-26 clients (app/fronts/legacy).
    max_batch: int = Field(default=50, ge=1, description="messages in one legacy JSON-RPC batch")
    # A 2024-11-05 HTTP+SSE channel (GET /sse) holds a connection from its start;
    # until its initialize it holds nothing else, so it is bounded apart.
    sse_init_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="an HTTP+SSE channel (GET /sse) not initialized within this long is closed",
    )
    max_uninitialized_sse_per_address: int = Field(
        default=4,
        ge=1,
        description="HTTP+SSE channels one client address may hold open before their initialize",
    )
    # Each call parked by the MRTR bridge holds two upstream connections open
    # (its answer stream and its lane's GET stream; app/mrtr/lanes.py): see max_parked.
    max_upstream_connections: int = Field(default=2048, ge=1)
    # One upstream answer's body (decoded: a gzip body is inflated no further
    # than this), as the stdio line limit bounds a stdio answer.
    max_upstream_answer_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="bytes of one upstream answer (decoded); a larger one ends the call "
        "with -32603 and its connection is closed",
    )
    # The bytes of large upstream answers (from app/splice.py's MIN_BODY up) held
    # at once, across all callers: an answer waits up to 5 s for room, then its
    # caller gets 503; one larger than this is served alone (bench/answers.py).
    max_answer_bytes_in_flight: int = Field(
        default=256 * 1024 * 1024,
        ge=1024 * 1024,
        description="bytes of large upstream answers in flight across all callers; beyond "
        "them an answer waits up to 5 s, then its caller gets 503 with Retry-After",
    )
    # An idle pooled upstream connection is dropped after this long: shorter
    # than the idle timeout of the common servers (uvicorn's and Node's are
    # 5 s), so the gateway never picks a connection the server is closing at
    # that moment (a POST lost to that race: app/upstream/streamable_http/transport.py
    # `resendable`, measured with bench/parked.py). httpx's default, 5 s,
    # was the same as theirs.
    upstream_keepalive_s: float = Field(
        default=4.0,
        gt=0,
        description="seconds an idle upstream connection is kept for reuse; keep it "
        "under the upstream server's own keep-alive timeout",
    )
    # h1: a session's POSTs on app/upstream/httpclient/h1.py, the rest on httpx over
    # aiohttp (the measured default, bench/upstream_post.py); aiohttp: the POSTs on
    # aiohttp too. httpx's own transport is no option: twice the CPU per call,
    # and it pools connections by origin, not by credential (docs/architecture.md).
    upstream_http_transport: Literal["h1", "aiohttp"] = "h1"
    # Sent on every request to an HTTP upstream (app/upstream/httpclient/client.py);
    # resolved by app/settings/headers.py (`{"file": ...}` values read at start).
    upstream_headers: Annotated[dict[str, SecretStr], NoDecode] = Field(
        default_factory=dict,
        description="headers sent on every upstream request, a JSON object; a value may be "
        '{"file": "/path"}; a fixed Authorization replaces the client\'s',
    )
    # Which MCP transport MCP_SHIM_UPSTREAM_URL speaks (app/upstream/http_sse/transport.py).
    upstream_transport: Literal["auto", "streamable-http", "sse"] = Field(
        default="auto",
        description="auto: Streamable HTTP, then HTTP+SSE (2024-11-05) if initialize is "
        "answered 400/404/405, as 2025-03-26 basic/transports tells clients",
    )
    # stdio upstreams (app/upstream/stdio/transport.py).
    upstream_env: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="names of environment variables passed to the stdio server besides "
        "PATH, HOME and LANG",
    )
    stdio_max_processes: int = Field(
        default=8, ge=1, description="stdio server processes running at once, lanes included"
    )
    stdio_max_processes_per_credential: int | None = Field(
        default=None,
        ge=1,
        description="stdio server processes one Authorization value (or all anonymous "
        "callers together) may hold; unset: three quarters of MCP_SHIM_STDIO_MAX_PROCESSES, "
        "never all of them",
    )
    stdio_start_timeout_s: float = Field(
        default=30.0, gt=0, description="longest wait for a new stdio server's initialize answer"
    )
    stdio_liveness_s: float = Field(
        default=30.0,
        gt=0,
        description="a stdio server silent this long with calls in flight is pinged; one that "
        "does not answer the ping within as long is stopped",
    )
    stdio_cancel: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="notifications/cancelled to a stdio server for a call its caller abandoned "
        "(optional in the legacy revisions): auto sends it until a server process exits after "
        "one with no later request answered, as the Python SDK 1.x's can (python-sdk issue "
        "2610), and from then on no more; always; never",
    )
    cache_ttl_ms: int = Field(default=60_000, ge=0)
    cache_scope: Literal["public", "private"] = "private"
    # subscriptions/listen (app/subscriptions).
    listen_keepalive_s: float = Field(
        default=15.0,
        gt=0,
        description="SSE comment on a quiet long-lived stream (listen, legacy GET, /sse) "
        "after this long",
    )
    listen_queue_size: int = Field(
        default=256,
        ge=1,
        description="notifications a listen stream may fall behind before it is closed",
    )
    listen_ready_timeout_s: float = Field(
        default=0.5,
        ge=0,
        description="longest wait for the upstream GET stream before acknowledging a listen",
    )
    listen_call_timeout_s: float = Field(
        default=10.0, gt=0, description="bound on one upstream resources/(un)subscribe"
    )
    shutdown_grace_s: float = Field(
        default=5.0,
        ge=0,
        description="on shutdown, how long listen streams get to send their closing result "
        "and running tasks get to finish",
    )
    # Tasks (app/tasks): where their records are kept, and their bounds.
    task_store: SecretStr = Field(
        default=SecretStr(""),
        description="where task records are kept: empty or `memory` (this process), or "
        "redis://host:port/db (rediss:// for TLS; a password may be in the URL)",
    )
    task_store_prefix: str = Field(
        default="mcp-shim",
        pattern=r"^[A-Za-z0-9_.:-]{1,64}$",
        description="first part of every key in a shared task store, so that deployments "
        "sharing one server keep apart",
    )
    task_store_timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="longest wait for one operation of a shared task store, connecting "
        "included; then the store is reported unavailable",
    )
    # One default each, for both stores and every kind of task. 32 live tasks:
    # each running one holds an upstream connection, and a gateway-run one a
    # lane counted in MCP_SHIM_MAX_SESSIONS; with 4 MiB results, one credential's
    # finished tasks take at most 128 MiB of memory (or of the Redis server).
    max_tasks_per_credential: int = Field(
        default=32,
        ge=1,
        description="live tasks one Authorization value (or all anonymous callers "
        "together) may hold; one more is refused",
    )
    max_task_result_bytes: int = Field(
        default=DEFAULT_MAX_RECORD_BYTES,
        ge=1024,
        le=512 * 1024 * 1024,  # a Redis string's own bound
        description="bytes of one task's result as kept (its record's JSON: the result "
        "and its status); a larger result makes the task failed",
    )
    # Milliseconds, the unit of the wire's ttl (2025-11-25) and ttlMs (2026-07-28).
    task_ttl_ms: int = Field(
        default=3_600_000,
        ge=1000,
        le=7 * 24 * 3_600_000,
        description="how long a task and its result are kept (the ttl asked of the "
        "upstream; an upstream's longer grant is cut to it)",
    )
    # What running tasks may hold of the upstream (app/tasks/bounds.py): a task
    # outlives its request, so without bounds of their own tasks could take every
    # session and connection from the calls that are not tasks. Unset: three
    # quarters, so that a quarter always stays for the rest.
    task_max_sessions: int | None = Field(
        default=None,
        ge=1,
        description="upstream sessions tasks may pin (below MCP_SHIM_MAX_SESSIONS); unset: "
        "three quarters of it",
    )
    task_max_sessions_per_credential: int | None = Field(
        default=None,
        ge=1,
        description="upstream sessions one credential's tasks may pin; unset: three "
        "quarters of MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL",
    )
    task_max_connections: int | None = Field(
        default=None,
        ge=2,
        description="upstream connections tasks may hold open (below "
        "MCP_SHIM_MAX_UPSTREAM_CONNECTIONS); unset: three quarters of it",
    )
    task_max_connections_per_credential: int | None = Field(
        default=None,
        ge=2,  # a gateway-run task holds two
        description="upstream connections one credential's tasks may hold open; unset: a "
        "quarter of MCP_SHIM_TASK_MAX_CONNECTIONS",
    )
    # The multi round-trip bridge (app/mrtr).
    state_key: SecretStr | None = Field(
        default=None,
        description="AES-GCM key(s) sealing requestState: comma-separated base64, the first "
        "seals, all open (rotation); shared by every replica. Unset: one random key per process",
    )
    advertise_url: AnyHttpUrl | None = Field(
        default=None,
        description="base URL at which other replicas reach this one; retries that land on "
        "another replica are forwarded here",
    )
    # Operations (docs/operations.md).
    public_url: AnyHttpUrl | None = Field(
        default=None,
        description="the gateway's MCP endpoint URL as clients reach it (e.g. "
        "https://mcp.example.com/mcp): the `resource` of its OAuth protected-resource "
        "metadata and the base of the metadata URL in relayed WWW-Authenticate challenges",
    )
    upstream_client_capabilities: Literal["caller", "all"] = Field(
        default="caller",
        description="capabilities upstream sessions declare at initialize: the caller's, or "
        "the caller's plus every input capability (for servers that check before asking)",
    )
    ready_max_age_s: float = Field(
        default=30.0,
        gt=0,
        description="/readyz is 200 if the upstream answered within this long; else it probes",
    )
    mrtr_ttl_s: float = Field(
        default=120.0, gt=0, description="how long a parked exchange waits for its retry"
    )
    max_parked: int = Field(
        default=500, ge=1, description="parked exchanges held at once; more are refused"
    )
    mrtr_quiet_ms: int = Field(
        default=50,
        ge=0,
        le=10_000,
        description="questions the upstream sends within this quiet period go out together",
    )
    mrtr_gather_max_ms: int = Field(
        default=500,
        ge=0,
        le=60_000,
        description="upper bound on gathering questions after the first one",
    )

    # Tasks (app/tasks, docs/tasks.md).
    task_tools: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="tools (comma-separated globs) the gateway runs as tasks for modern "
        "clients when the upstream has none; empty: off",
    )
    task_poll_ms: int = Field(
        default=1000,
        ge=1,
        le=600_000,
        description="pollIntervalMs told to clients when the upstream names none",
    )

    # Total time of one call as its client sees it (one turn of a multi
    # round-trip call; a subscriptions/listen stream is exempt). Declared after
    # the settings it is checked against.
    call_deadline_s: float = Field(
        default=120.0,
        gt=0,
        description="total deadline of one call; then -32603 with HTTP 504 and the "
        "upstream call cancelled",
    )

    @model_validator(mode="after")
    def _one_upstream(self) -> Settings:
        if self.servers_file is not None or self.servers is not None:
            return self  # many servers: app/settings/rules.py `_one_source`
        if (self.upstream_url is None) == (self.upstream_command is None):
            state = "both are" if self.upstream_url is not None else "neither is"
            raise ValueError(
                "exactly one of MCP_SHIM_UPSTREAM_URL (an HTTP MCP endpoint) and "
                f"MCP_SHIM_UPSTREAM_COMMAND (a stdio MCP server to start) must be set; {state}"
            )
        if self.upstream_command is not None and self.upstream_era == "modern":
            raise ValueError(
                "MCP_SHIM_UPSTREAM_ERA=modern needs MCP_SHIM_UPSTREAM_URL: the gateway's stdio "
                "transport speaks the legacy revisions (initialize) only"
            )
        return self

    @model_validator(mode="after")
    def _transport_of_a_url(self) -> Settings:
        if self.upstream_command is not None and self.upstream_transport != "auto":
            raise ValueError(
                "MCP_SHIM_UPSTREAM_TRANSPORT applies to MCP_SHIM_UPSTREAM_URL only; "
                "MCP_SHIM_UPSTREAM_COMMAND is always stdio"
            )
        if self.upstream_command is not None and self.upstream_headers:
            raise ValueError(
                "MCP_SHIM_UPSTREAM_HEADERS applies to MCP_SHIM_UPSTREAM_URL only; a stdio "
                "server takes its credentials from MCP_SHIM_UPSTREAM_ENV"
            )
        return self

    @field_validator(
        "allowed_origins", "allowed_hosts", "upstream_env", "task_tools", mode="before"
    )
    @classmethod
    def _csv(cls, value: object, info: ValidationInfo) -> object:
        # Lists come as comma-separated strings: JSON arrays in environment
        # variables are a common source of quoting mistakes in compose files.
        return csv_list(value, info.field_name or "")

    @field_validator("metrics_port", "workers", "worker_port_base", mode="before")
    @classmethod
    def _unset_if_empty(cls, value: object) -> object:
        # `MCP_SHIM_METRICS_PORT=` (an empty value in a compose file) means unset.
        return None if value == "" else value

    def session_share(self) -> int:
        """MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL, or its default: a quarter of the pool."""
        if self.max_sessions_per_credential is not None:
            return min(self.max_sessions_per_credential, self.max_sessions)
        return max(1, self.max_sessions // 4)

    def task_limits(self, max_sessions: int) -> TaskLimits:
        """What tasks may hold of `max_sessions` upstream sessions (the upstream's
        bound) and of the upstream connections: the MCP_SHIM_TASK_MAX_* settings,
        or three quarters (`default_limits` below; app/tasks/bounds.py counts what
        tasks hold against them); a share never above its total."""
        share = min(self.session_share(), max_sessions)
        default = default_limits(max_sessions, share, self.max_upstream_connections)
        sessions = min(self.task_max_sessions or default.sessions, max_sessions)
        connections = self.task_max_connections or default.connections
        return TaskLimits(
            sessions=sessions,
            sessions_per_credential=min(
                self.task_max_sessions_per_credential or default.sessions_per_credential,
                sessions,
            ),
            connections=connections,
            connections_per_credential=min(
                self.task_max_connections_per_credential or max(2, connections // 4),
                connections,
            ),
        )

    def legacy_session_share(self) -> int:
        """MCP_SHIM_MAX_LEGACY_SESSIONS_PER_CREDENTIAL, or its default: a quarter of the bound."""
        if self.max_legacy_sessions_per_credential is not None:
            return min(self.max_legacy_sessions_per_credential, self.max_legacy_sessions)
        return max(1, self.max_legacy_sessions // 4)

    def stdio_process_share(self) -> int:
        """MCP_SHIM_STDIO_MAX_PROCESSES_PER_CREDENTIAL, or its default: three quarters
        of the processes, and never all of them when there is more than one. A stdio
        gateway mostly serves one client, whose parked and listening calls each hold
        a process (half left the conformance suite's anonymous client short of
        them); the quarter kept back still serves every other credential."""
        if self.stdio_max_processes_per_credential is not None:
            return min(self.stdio_max_processes_per_credential, self.stdio_max_processes)
        processes = self.stdio_max_processes
        return 1 if processes == 1 else min(processes - 1, processes - processes // 4)

    def task_store_url(self) -> str | None:
        """MCP_SHIM_TASK_STORE's redis:// or rediss:// URL, or None for the in-memory store."""
        return task_store_url(self.task_store.get_secret_value())

    def fixed_upstream_headers(self) -> dict[str, str]:
        """MCP_SHIM_UPSTREAM_HEADERS as sent: names and values, files already read."""
        return {name: value.get_secret_value() for name, value in self.upstream_headers.items()}


# What running tasks may hold of the upstream (`Settings.task_limits`);
# app/tasks/bounds.py's `TaskBounds` counts what they hold against it.
@dataclass(frozen=True, slots=True)
class TaskLimits:
    sessions: int  # upstream sessions pinned by tasks, in all
    sessions_per_credential: int
    connections: int  # upstream connections held open by tasks, in all
    connections_per_credential: int


def three_quarters(total: int) -> int:
    """The default share of tasks: a quarter (at least one) stays for the rest,
    unless there is only one to share."""
    return max(1, total - max(1, -(-total // 4)))


def default_limits(max_sessions: int, session_share: int, max_connections: int) -> TaskLimits:
    """The bounds when none is set: tasks may hold three quarters of the
    sessions and connections; one credential's tasks three quarters of its
    session share and a quarter of the tasks' connections (at least two: a
    gateway-run task holds two)."""
    sessions = three_quarters(max_sessions)
    connections = three_quarters(max_connections)
    return TaskLimits(
        sessions=sessions,
        sessions_per_credential=min(sessions, three_quarters(session_share)),
        connections=connections,
        connections_per_credential=min(connections, max(2, connections // 4)),
    )


class SettingsError(Exception):
    """Start-up configuration is invalid; the message names each bad variable."""


def csv_list(value: object, field: str) -> object:
    """A list setting's comma-separated string as its items. A JSON array is
    refused with the comma-separated form to write instead: taken as one item
    it would be silently wrong (an origin `["https://a.example"]`)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            items = [str(item) for item in json.loads(text)]
        except (ValueError, TypeError):
            items = [item.strip().strip("'\"") for item in text[1:-1].split(",")]
        raise ValueError(
            f"{value!r} is a JSON array; lists are comma-separated: write "
            f"MCP_SHIM_{field.upper()}={','.join(item for item in items if item)}"
        )
    return [item.strip() for item in value.split(",") if item.strip()]


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
