"""Gateway settings, read once from `MCP_SHIM_*` environment variables."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AnyHttpUrl, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


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
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Origins allowed besides loopback ones; '*' allows any",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host header values allowed besides loopback ones; '*' allows any",
    )
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    request_timeout_s: float = Field(default=300.0, gt=0)
    session_idle_s: float = Field(default=300.0, gt=0)
    max_sessions: int = Field(default=256, ge=1)
    max_upstream_connections: int = Field(default=200, ge=1)
    # httpx's API either way; the aiohttp transport is the measured default
    # (bench/README.md). "httpx" keeps httpx's own transport for comparison.
    upstream_http_transport: Literal["aiohttp", "httpx"] = "aiohttp"
    cache_ttl_ms: int = Field(default=60_000, ge=0)
    cache_scope: Literal["public", "private"] = "private"

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
