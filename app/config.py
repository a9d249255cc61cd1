"""Gateway settings, read once from `MCP_SHIM_*` environment variables."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AnyHttpUrl,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
# Upstream connections kept free of parked exchanges for everything else.
_SPARE_CONNECTIONS = 64


def _split_csv(value: object) -> object:
    # Lists come as comma-separated strings: JSON arrays in environment
    # variables are a common source of quoting mistakes in compose files.
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MCP_SHIM_", extra="ignore", frozen=True)

    upstream_url: AnyHttpUrl = Field(description="MCP endpoint of the legacy server")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

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
    # An SSE answer whose client reads nothing for this long is closed.
    write_timeout_s: float = Field(default=30.0, gt=0)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    request_timeout_s: float = Field(default=300.0, gt=0)
    session_idle_s: float = Field(default=300.0, gt=0)
    max_sessions: int = Field(default=256, ge=1)
    # JSON-RPC batches of 2024-11-05 / 2025-03-26 clients (app/legacy).
    max_batch: int = Field(default=50, ge=1, description="messages in one legacy JSON-RPC batch")
    # Each call parked by the MRTR bridge holds two upstream connections open
    # (its answer stream and its lane's GET stream; app/mrtr/lanes.py): see max_parked.
    max_upstream_connections: int = Field(default=2048, ge=1)
    # httpx's API either way; the aiohttp transport is the measured default
    # (bench/README.md). "httpx" keeps httpx's own transport for comparison.
    upstream_http_transport: Literal["aiohttp", "httpx"] = "aiohttp"
    cache_ttl_ms: int = Field(default=60_000, ge=0)
    cache_scope: Literal["public", "private"] = "private"
    # subscriptions/listen (app/subscriptions).
    listen_keepalive_s: float = Field(
        default=15.0, gt=0, description="SSE comment on a quiet listen stream after this long"
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
        description="on shutdown, how long listen streams get to send their closing result",
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

    @field_validator("allowed_origins", "allowed_hosts", mode="before")
    @classmethod
    def _csv(cls, value: object) -> object:
        return _split_csv(value)

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
            from app.mrtr.state import parse_keys

            parse_keys(value.get_secret_value())  # ValueError names the bad key, not its value
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

    @field_validator("mrtr_gather_max_ms")
    @classmethod
    def _gather_after_quiet(cls, value: int, info: ValidationInfo) -> int:
        quiet = info.data.get("mrtr_quiet_ms")
        if isinstance(quiet, int) and value < quiet:
            raise ValueError(f"must be at least MCP_SHIM_MRTR_QUIET_MS ({quiet})")
        return value

    def state_keys(self) -> list[bytes] | None:
        """The decoded MCP_SHIM_STATE_KEY keys (validated at load), or None if unset."""
        if self.state_key is None:
            return None
        from app.mrtr.state import parse_keys

        return parse_keys(self.state_key.get_secret_value())


class SettingsError(Exception):
    """Start-up configuration is invalid; the message names each bad variable."""


def load_settings() -> Settings:
    try:
        return Settings()  # type: ignore[call-arg]
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            lines.append(f"MCP_SHIM_{field.upper()}: {err['msg']}")
        raise SettingsError("invalid configuration:\n  " + "\n  ".join(lines)) from None
