"""`mcp-shim probe`: the other era. Whether the upstream answers in the era the
gateway does not use with it too (a dual-era server), and what each
MCP_SHIM_UPSTREAM_ERA then gives 2026-07-28 clients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.config import Settings
from app.probe.asking import Found, Step, initialize_request
from app.upstream.base import Transport
from app.upstream.errors import (
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.modern.upstream import ModernHttpUpstream
from app.upstream.sessions.era import EraInconclusive, probe_era
from translators.explain import pass_through as modern_translations
from translators.explain import translations
from translators.registry import LATEST_MODERN, Version, get_version

# What of the other era's refusal goes into the report.
REASON_CHARS = 300


@dataclass(frozen=True)
class OtherEra:
    """What the upstream answered in the era the gateway does not use with it:
    `accepted` None when its answer told nothing (a timeout, a challenge)."""

    era: str
    accepted: bool | None
    version: Version | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None

    def describe(self) -> dict[str, Any]:
        reason = self.reason
        if reason is not None and len(reason) > REASON_CHARS:
            reason = reason[:REASON_CHARS] + "..."  # the upstream's words, bounded
        return {
            "era": self.era,
            "accepted": self.accepted,
            "protocolVersion": self.version.name if self.version is not None else None,
            "reason": reason,
        }


async def legacy_handshake(settings: Settings, transport: Transport, step: Step) -> OtherEra:
    """Whether a modern upstream also accepts `initialize`: one session opened
    and closed again (DELETE), nothing asked in it."""
    step.now = "initialize (does the modern upstream also serve legacy sessions?)"
    try:
        session, result = await transport.open_session(
            initialize_request(settings.upstream_protocol_version), {}
        )
    except (UpstreamTimeout, UpstreamUnavailable, UpstreamAuthChallenge) as exc:
        return OtherEra("legacy", None, reason=exc.message)
    except UpstreamError as exc:
        return OtherEra("legacy", False, reason=exc.message)
    try:
        version = get_version(result.get("protocolVersion"))
        capabilities = result.get("capabilities")
    finally:
        step.now = "closing the session"
        await session.close()
    return OtherEra(
        "legacy",
        True,
        version,
        capabilities if isinstance(capabilities, dict) else {},
    )


async def modern_answer(upstream: ModernHttpUpstream, step: Step) -> OtherEra:
    """Whether an upstream the gateway treats as legacy (MCP_SHIM_UPSTREAM_ERA=legacy)
    also answers `server/discover` as a modern server."""
    step.now = "server/discover (does the upstream also speak 2026-07-28?)"
    try:
        era = await probe_era(upstream, LATEST_MODERN, None)
    except (UpstreamTimeout, UpstreamUnavailable, UpstreamAuthChallenge, EraInconclusive) as exc:
        return OtherEra("modern", None, reason=exc.message)
    except UpstreamError as exc:
        return OtherEra("modern", False, reason=exc.message)
    if era.name != "modern" or era.version is None:
        return OtherEra("modern", False, reason="it refused server/discover")
    result = era.discover or {}
    capabilities = result.get("capabilities")
    return OtherEra(
        "modern", True, era.version, capabilities if isinstance(capabilities, dict) else {}
    )


def era_choices(found: Found, other: OtherEra | None, setting: str) -> list[dict[str, Any]]:
    """For a dual-era upstream, what each MCP_SHIM_UPSTREAM_ERA gives 2026-07-28
    clients (docs/probe.md, "When to force legacy"); nothing for one of one era."""
    if other is None or not other.accepted or other.version is None:
        return []
    if found.era == "modern":
        modern, legacy, legacy_capabilities = found.version, other.version, other.capabilities
    else:
        modern, legacy, legacy_capabilities = other.version, found.version, found.capabilities
    chosen = "legacy" if setting == "legacy" else "modern"
    return [
        {
            "era": "modern",
            "setting": "MCP_SHIM_UPSTREAM_ERA=auto|modern",
            "protocolVersion": modern.name,
            "chosen": chosen == "modern",
            "summary": "passed through: the server's own multi round-trip (input_required) "
            "for the input it asks; legacy clients get the server's own sessions",
            "translations": modern_translations(),
        },
        {
            "era": "legacy",
            "setting": "MCP_SHIM_UPSTREAM_ERA=legacy",
            "protocolVersion": legacy.name,
            "chosen": chosen == "legacy",
            "summary": "the gateway's translation: initialize sessions held and pooled by "
            "the gateway, the server's requests for input bridged to input_required "
            "results; for a server that asks for input on legacy sessions only",
            "translations": translations(legacy, legacy_capabilities),
        },
    ]
