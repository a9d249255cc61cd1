"""Which era the upstream speaks: modern (2026-07-28, stateless) or legacy
(initialize and sessions).

The probe is the one the spec gives a dual-era client (2026-07-28
basic/transports/streamable-http "Backward Compatibility"): send a modern
request first, here `server/discover`. A `DiscoverResult`, or a recognised
modern JSON-RPC error (a header mismatch, a missing capability, an unsupported
version naming the `supported` ones), means the server is modern; a legacy
server's own refusal (a "missing session" error under an id of its own, an
unknown method, no POST endpoint at all) means legacy, and the gateway goes on
with `initialize` as before.

The era is stored for every caller, so it is decided only by an answer that
says which era the server speaks (`verdict`, the one decision, also used on a
call's error answer to tell whether it puts the era in doubt). A refusal that
says nothing of the era (429 from a rate limiter in front, a proxy's 502 page,
a timeout, any 5xx) is inconclusive: it changes nothing, and the caller whose
probe it was gets the upstream's status in its error. A spec-following client
would fall back to `initialize` there; a gateway that stored that fallback
for everyone would hand one caller's refusal to all of them.

The answer is cached for the upstream. `reprobe` probes again when an answer
puts the era in doubt (an upstream redeployed as modern, or back), and
`MCP_SHIM_UPSTREAM_ERA=modern|legacy` skips the probe altogether.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from app import jsonio
from app.call import Message
from app.upstream.errors import UpstreamAuthChallenge, UpstreamError, UpstreamHttpError
from app.upstream.modern.upstream import ModernHttpUpstream, standard_headers
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
# What a legacy server answers a `server/discover` under its id: it does not
# know the method (-32601), or refuses it as an invalid request or params
# (the mcp 1.x SDK validates the method against the requests it knows).
_UNKNOWN_TO_LEGACY = frozenset({-32600, -32601, -32602})
# Statuses that say "not now" whatever the body: a rate limiter's 429, a
# timeout, a server or proxy failure. They say nothing of the era.
_NOT_NOW = frozenset({408, 425, 429})
# No POST endpoint at the URL: what an HTTP+SSE (2024-11-05) server answers a
# POST there (2025-03-26 streamable-http "Backward Compatibility"); a modern
# server takes every request by POST at its one endpoint.
_NO_POST_ENDPOINT = frozenset({404, 405})
DISCOVER = "server/discover"

Verdict = Literal["modern", "legacy", "inconclusive"]


class EraInconclusive(UpstreamHttpError):
    """The probe was refused, or answered with something that names no era:
    nothing is stored, and the caller learns the upstream's status."""


def _is_answer(message: object) -> bool:
    return isinstance(message, dict) and ("result" in message or "error" in message)


def verdict(status: int, answer: object, request_id: object, method: str | None) -> Verdict:
    """Which era an upstream's answer shows, or that it shows none (pure;
    unit-tested). `answer` is the answer's JSON-RPC message (None: the body
    had none), to the request `request_id` for `method`. The one decision
    behind the era probe (`era_of`) and behind the doubt a call's error answer
    casts on the stored era (`doubts`)."""
    if status in _NOT_NOW or status >= 500:
        return "inconclusive"
    if not _is_answer(answer):
        if status in _NO_POST_ENDPOINT:
            return "legacy"
        if 200 <= status < 300 and method == DISCOVER:
            return "legacy"  # every modern server answers server/discover
        return "inconclusive"
    assert isinstance(answer, dict)
    error = answer.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        if code in MODERN_ERROR_CODES:
            return "modern"
        if answer.get("id") != request_id:
            # A refusal under an id of its own (the mcp 1.x SDK: "server-error";
            # the TypeScript SDK: null): a legacy server's transport refusing a
            # request without a session.
            return "legacy"
        if method == DISCOVER:
            return "legacy" if code in _UNKNOWN_TO_LEGACY else "inconclusive"
        return "modern" if code in _SHARED_CODES else "inconclusive"
    result = answer.get("result")
    if method == DISCOVER:
        modern = isinstance(result, dict) and isinstance(result.get("supportedVersions"), list)
        return "modern" if modern else "legacy"
    return "inconclusive"


def doubts(
    seen: EraName, status: int, answer: object, request_id: object, method: str | None
) -> bool:
    """A call's error answer says the upstream speaks the other era than `seen`
    (pure): worth a new probe. A 401/403 is the caller's own business."""
    if status < 400 or status in (401, 403):
        return False
    shown = verdict(status, answer, request_id, method)
    return shown != "inconclusive" and shown != seen


def answer_in(content_type: str | None, body: bytes) -> Message | None:
    """The JSON-RPC message of a JSON body, if it is one (pure)."""
    if content_type is not None and content_type != "application/json":
        return None
    try:
        parsed = jsonio.loads(body)
    except jsonio.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def newest_common(names: object) -> Version | None:
    """The newest modern version this gateway knows among `names`."""
    if not isinstance(names, list):
        return None
    known = [v for v in (get_version(n) for n in names) if v is not None]
    modern = [v for v in known if v in modern_versions()]
    return max(modern, key=lambda v: v.index) if modern else None


def era_of(status: int, answer: Message | None) -> Era | None:
    """The era the answer to the probe shows; None: inconclusive (pure; unit-tested)."""
    shown = verdict(status, answer, PROBE_ID, DISCOVER)
    if shown == "inconclusive":
        return None
    if shown == "legacy":
        return Era("legacy")
    assert answer is not None
    result = answer.get("result")
    if isinstance(result, dict):
        return Era("modern", newest_common(result.get("supportedVersions")), result)
    error = answer["error"]
    data = error.get("data")
    supported = data.get("supported") if isinstance(data, dict) else None
    return Era("modern", newest_common(supported) if supported is not None else LATEST_MODERN)


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
) -> tuple[int, Message | None]:
    """One `server/discover`: the answer's HTTP status and its JSON-RPC answer
    (None: the body had none). Transport failures and 401/403 raise."""
    message = probe_message(version)
    headers = standard_headers(message, version.name)
    if authorization is not None:
        headers["authorization"] = authorization
    try:
        exchange = await upstream.request(message, headers)
    except UpstreamHttpError as exc:
        return exc.http_status, None  # an error status without a JSON body
    try:
        async for answer in exchange:
            if answer.get("id") == PROBE_ID and ("result" in answer or "error" in answer):
                return exchange.status, answer
            if "id" in answer and "method" not in answer:
                return exchange.status, answer  # a refusal under an id of its own
        return exchange.status, None
    finally:
        await exchange.aclose(drain=True)


async def probe_era(
    upstream: ModernHttpUpstream, version: Version, authorization: str | None
) -> Era:
    """The era one `server/discover` shows; `EraInconclusive` when it shows none."""
    status, answer = await discover(upstream, version, authorization)
    era = era_of(status, answer)
    if era is None:
        log.warning("upstream_era_inconclusive", http_status=status)
        raise EraInconclusive(
            f"upstream answered server/discover with HTTP {status}, which tells "
            "nothing of the protocol era it speaks; nothing was changed, retry later",
            status,
        )
    return era


class EraProbe:
    def __init__(self, upstream: ModernHttpUpstream | None, setting: str = "auto") -> None:
        # None: an upstream with no HTTP endpoint to probe (stdio); the setting is fixed.
        assert upstream is not None or setting == "legacy"
        self._upstream = upstream
        self._setting = setting
        self._era: Era | None = None
        self._lock = asyncio.Lock()
        # The last probe sent, whatever it showed: re-probes are spaced from it.
        self._tried_at: float | None = None
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
        callers that saw it fail together). With a fixed setting, nothing changes.
        A probe that tells nothing (`EraInconclusive`, a transport failure)
        raises and leaves the stored era as it was."""
        if self.fixed:
            return await self.current(authorization)
        async with self._lock:
            if self._era is not None and self._era is not seen:
                return self._era  # another caller already probed again
            tried = self._tried_at
            recent = tried is not None and time.monotonic() - tried < REPROBE_MIN_S
            if self._era is not None and recent:
                return self._era  # an upstream refusing many calls costs one probe
            previous = seen.name if seen is not None else None
            era = await self._probe(authorization)
            self._era = era
            if previous != era.name:
                log.info("upstream_era_changed", previous=previous, **era.describe())
            return era

    async def recheck(
        self,
        seen: Era,
        status: int,
        answer: object,
        request_id: object,
        method: str | None,
        authorization: str | None,
    ) -> Era:
        """The era after a call made in `seen`'s era got this error answer: a
        new probe when the answer says the other era (`doubts`), else `seen`.
        A probe that tells nothing leaves `seen`: the caller's answer stands
        as the upstream gave it. The one place the pass-through, a legacy
        client's modern session and a legacy session act on such an answer."""
        if self.fixed or not doubts(seen.name, status, answer, request_id, method):
            return seen
        try:
            return await self.reprobe(authorization, seen=seen)
        except UpstreamError as exc:
            log.info("upstream_era_kept", era=seen.name, reason=exc.message)
            return seen

    async def _probe(self, authorization: str | None) -> Era:
        assert self._upstream is not None  # only a fixed era has none
        self._tried_at = time.monotonic()
        try:
            era = await probe_era(self._upstream, LATEST_MODERN, authorization)
        except UpstreamAuthChallenge:
            # A protected upstream: its era is learnt with the first caller's
            # credentials; callers without any go the legacy way meanwhile.
            self.protected = True
            raise
        self.legacy_handshake = None
        if era.name == "modern" and era.discover is None and era.version is not None:
            # A recognised modern error: ask again in a version it supports.
            try:
                era = await probe_era(self._upstream, era.version, authorization)
            except EraInconclusive:
                pass  # the first answer already said modern
        log.info("upstream_era_probed", **era.describe())
        return era
