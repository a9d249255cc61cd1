"""Which era the upstream speaks: modern (2026-07-28, stateless) or legacy
(initialize and sessions).

The probe is the one the spec gives a dual-era client (2026-07-28
basic/transports/streamable-http "Backward Compatibility"): send a modern
request first, here `server/discover`. A `DiscoverResult`, or a recognised
modern JSON-RPC error (a header mismatch, a missing capability, an unsupported
version naming the `supported` ones), means the server is modern; anything
else (an empty body, a legacy "missing session" refusal, an unknown method)
means legacy, and the gateway goes on with `initialize` as before.

The answer is cached for the upstream. `reprobe` forgets it when the
assumption fails (an upstream redeployed as modern, or back), and
`MCP_SHIM_UPSTREAM_ERA=modern|legacy` skips the probe altogether.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from app.upstream.base import Message
from app.upstream.errors import UpstreamAuthChallenge, UpstreamError, UpstreamHttpError
from app.upstream.modern_http import ModernHttpUpstream, standard_headers
from translators.registry import LATEST_MODERN, Version, get_version, modern_versions

log = structlog.get_logger("mcp_shim.era")

EraName = Literal["modern", "legacy"]
PROBE_ID = "mcp-shim-discover"
# Errors only a modern server gives (2026-07-28 basic/index and schema):
# header mismatch, missing required client capability, unsupported version.
MODERN_ERROR_CODES = frozenset({-32020, -32021, -32022})
# Refusals that put the era in doubt probe again at most this often.
REPROBE_MIN_S = 2.0


@dataclass(frozen=True, slots=True)
class Era:
    name: EraName
    # The modern version the gateway speaks with it (None: legacy, or none in common).
    version: Version | None = None
    # The upstream's DiscoverResult, when it gave one.
    discover: Message | None = None
    source: Literal["probe", "setting"] = "probe"

    def describe(self) -> dict[str, Any]:
        return {
            "era": self.name,
            "protocol_version": self.version.name if self.version is not None else None,
            "era_source": self.source,
        }


# JSON-RPC codes every era defines: a modern server uses them too.
_SHARED_CODES = frozenset({-32700, -32600, -32601, -32602, -32603})


def is_modern_error(message: object, request_id: object) -> bool:
    """A JSON-RPC error a modern server would send to the request `request_id`
    (pure; unit-tested). A legacy server refusing a session-less request
    answers -32600 under an id of its own (the Python SDK: "server-error"),
    or with no JSON-RPC body at all."""
    if not isinstance(message, dict) or not isinstance(message.get("error"), dict):
        return False
    code = message["error"].get("code")
    if code in MODERN_ERROR_CODES:
        return True
    return code in _SHARED_CODES and message.get("id") == request_id


def newest_common(names: object) -> Version | None:
    """The newest modern version this gateway knows among `names`."""
    if not isinstance(names, list):
        return None
    known = [v for v in (get_version(n) for n in names) if v is not None]
    modern = [v for v in known if v in modern_versions()]
    return max(modern, key=lambda v: v.index) if modern else None


def classify(answer: Message | None) -> Era:
    """The era an answer to the probe shows (pure; unit-tested)."""
    if answer is None:
        return Era("legacy")
    result = answer.get("result")
    if isinstance(result, dict) and isinstance(result.get("supportedVersions"), list):
        return Era("modern", newest_common(result["supportedVersions"]), result)
    error = answer.get("error")
    if isinstance(error, dict) and error.get("code") in MODERN_ERROR_CODES:
        data = error.get("data")
        supported = data.get("supported") if isinstance(data, dict) else None
        return Era("modern", newest_common(supported) if supported is not None else LATEST_MODERN)
    return Era("legacy")


def probe_message(version: Version) -> Message:
    return {
        "jsonrpc": "2.0",
        "id": PROBE_ID,
        "method": "server/discover",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": version.name,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "mcp-shim", "version": "1"},
            }
        },
    }


async def discover(
    upstream: ModernHttpUpstream, version: Version, authorization: str | None
) -> Message | None:
    """The answer to one `server/discover`, or None when there is none (an error
    status without a JSON-RPC body). Transport failures and 401/403 raise."""
    message = probe_message(version)
    headers = standard_headers(message, version.name)
    if authorization is not None:
        headers["authorization"] = authorization
    try:
        exchange = await upstream.request(message, headers)
    except UpstreamHttpError as exc:
        if 400 <= exc.http_status < 500:
            # A refusal without a JSON-RPC body (an HTTP+SSE server's 404 or 405
            # on POST): no modern server answers so. A 5xx tells nothing: raised.
            return None
        raise
    try:
        async for answer in exchange:
            if answer.get("id") == PROBE_ID and ("result" in answer or "error" in answer):
                return answer
            if "id" in answer and "method" not in answer:
                return answer  # an error with a null id: a legacy refusal
        return None
    finally:
        await exchange.aclose(drain=True)


class EraProbe:
    def __init__(self, upstream: ModernHttpUpstream | None, setting: str = "auto") -> None:
        # None: an upstream with no HTTP endpoint to probe (stdio); the setting is fixed.
        assert upstream is not None or setting == "legacy"
        self._upstream = upstream
        self._setting = setting
        self._era: Era | None = None
        self._lock = asyncio.Lock()
        self.probed_at: float | None = None
        # Whether a modern upstream also accepts `initialize` (a dual-era server):
        # None until a legacy client's session tried it, reset by a new probe.
        self.legacy_handshake: bool | None = None
        # The probe was refused for want of credentials (401/403).
        self.protected = False
        if setting == "legacy":
            self._era = Era("legacy", source="setting")
        elif setting == "modern":
            self._era = Era("modern", LATEST_MODERN, source="setting")

    @property
    def known(self) -> Era | None:
        return self._era

    @property
    def fixed(self) -> bool:
        return self._setting != "auto"

    async def current(self, authorization: str | None = None) -> Era:
        """The cached era, probing once if there is none. Upstream errors raise
        and cache nothing: an unreachable or protected upstream tells nothing."""
        era = self._era
        if era is not None:
            return era
        if self.protected and authorization is None:
            # Asking again without credentials would only be refused again.
            raise UpstreamAuthChallenge("the upstream wants credentials to be probed", 401, None)
        async with self._lock:
            if self._era is None:
                self._era = await self._probe(authorization)
            return self._era

    async def reprobe(self, authorization: str | None = None, *, seen: Era | None = None) -> Era:
        """The assumption `seen` failed: probe again (once for any number of
        callers that saw it fail together). With a fixed setting, nothing changes."""
        if self.fixed:
            return await self.current(authorization)
        async with self._lock:
            if self._era is not None and self._era is not seen:
                return self._era  # another caller already probed again
            probed = self.probed_at
            recent = probed is not None and time.monotonic() - probed < REPROBE_MIN_S
            if self._era is not None and recent:
                return self._era  # an upstream refusing many calls costs one probe
            self._era = None
            previous = seen.name if seen is not None else None
            try:
                self._era = await self._probe(authorization)
            except UpstreamError:
                raise
            if previous != self._era.name:
                log.info(
                    "upstream_era_changed",
                    previous=previous,
                    **self._era.describe(),
                )
            return self._era

    async def _probe(self, authorization: str | None) -> Era:
        try:
            assert self._upstream is not None  # only a fixed era has none
            answer = await discover(self._upstream, LATEST_MODERN, authorization)
        except UpstreamAuthChallenge:
            # A protected upstream: its era is learnt with the first caller's
            # credentials; callers without any go the legacy way meanwhile.
            self.protected = True
            raise
        era = classify(answer)
        self.legacy_handshake = None
        if era.name == "modern" and era.discover is None and era.version is not None:
            # A recognised modern error: ask again in a version it supports.
            assert self._upstream is not None
            retry = await discover(self._upstream, era.version, authorization)
            era = classify(retry) if retry is not None else era
        self.probed_at = time.monotonic()
        log.info("upstream_era_probed", **era.describe())
        return era
