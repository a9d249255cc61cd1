"""/readyz: is the upstream answering?

Liveness (`/healthz`) says the process serves HTTP. Readiness says a call
would reach an upstream that answers: the pool notes every answer the
upstream gives (`SessionPool.note_answer`: an `initialize`, any response).
If the last one is older than `MCP_SHIM_READY_MAX_AGE_S`, or a call failed to
reach the upstream since (`SessionPool.note_failure`: refused, broken, timed
out), the check opens a session of its own with `initialize` (no tool, no side
effect), closes it, and keeps the outcome for a few seconds, so a storm of
probes costs the upstream one handshake at a time. So an upstream that died
turns `/readyz` 503 at the first failed call, and without traffic at most
`MCP_SHIM_READY_MAX_AGE_S` after its last answer (plus the probe's own time).

An upstream that refuses the probe with 401/403 is up (it answered); it is
protected, and the probe has no credentials: ready, with the version of
the last authorized answer if there was one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import structlog

from app.upstream.errors import UpstreamAuthChallenge, UpstreamError
from app.upstream.sessions.pool import SessionPool
from translators.registry import Version

log = structlog.get_logger("mcp_shim.readiness")

# Longest a probe may take; an upstream slower than this to initialize is not ready.
PROBE_TIMEOUT_S = 10.0
# A probe's outcome is reused this long (at most the max age).
PROBE_CACHE_S = 5.0


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    body: dict[str, Any]

    @property
    def status(self) -> int:
        return 200 if self.ready else 503


def _upstream(version: Version | None, age_s: float | None, source: str) -> dict[str, Any]:
    return {
        "era": version.era.value if version is not None else None,
        "protocol_version": version.name if version is not None else None,
        "last_answer_age_s": round(age_s, 3) if age_s is not None else None,
        "source": source,
    }


class ReadinessCheck:
    def __init__(self, pool: SessionPool, offered: Version, *, max_age_s: float) -> None:
        self._pool = pool
        self._offered = offered
        self._max_age_s = max_age_s
        self._cache_s = min(PROBE_CACHE_S, max_age_s)
        self._probed: tuple[float, Readiness] | None = None
        self._lock = asyncio.Lock()

    def _failed_since(self, moment: float) -> bool:
        failure = self._pool.last_failure
        return failure is not None and failure >= moment

    def _recent(self) -> Readiness | None:
        last = self._pool.last_answer
        if last is None or self._failed_since(last[0]):
            return None  # a call failed after the last answer: ask the upstream now
        age = time.monotonic() - last[0]
        if age > self._max_age_s:
            return None
        return Readiness(True, {"status": "ready", "upstream": _upstream(last[1], age, "traffic")})

    async def check(self) -> Readiness:
        recent = self._recent()
        if recent is not None:
            return recent
        async with self._lock:  # concurrent checks share one probe
            probed = self._probed
            if (
                probed is not None
                and time.monotonic() - probed[0] < self._cache_s
                and not (probed[1].ready and self._failed_since(probed[0]))
            ):
                return probed[1]
            outcome = await self._probe()
            self._probed = (time.monotonic(), outcome)
            return outcome

    async def _probe(self) -> Readiness:
        key = self._pool.key_for({}, self._offered, None)
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                pooled = await self._pool.open_detached(key, {}, None)
                await pooled.session.close()
        except UpstreamAuthChallenge as exc:
            last = self._pool.last_answer
            version = last[1] if last is not None else None
            age = time.monotonic() - last[0] if last is not None else None
            upstream = _upstream(version, age, "probe")
            upstream["authorization_required"] = exc.status
            return Readiness(True, {"status": "ready", "upstream": upstream})
        except UpstreamError as exc:
            log.warning("readiness_probe_failed", error=exc.message)
            return Readiness(False, {"status": "not_ready", "reason": exc.message})
        except TimeoutError:
            log.warning("readiness_probe_failed", error="timed out")
            return Readiness(
                False,
                {
                    "status": "not_ready",
                    "reason": f"upstream did not answer initialize within {PROBE_TIMEOUT_S:g}s",
                },
            )
        return Readiness(
            True, {"status": "ready", "upstream": _upstream(pooled.version, 0.0, "probe")}
        )
