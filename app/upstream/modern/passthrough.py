"""The modern upstream's pass-through capability: a modern client's request
sent as it came, its answer handed back unparsed, and the one thing looked at
on the way, an error status that may say the upstream changed era.

The upstream kind decides whether a call can be passed through
(`choice.Upstream.passes_through`: a modern upstream whose era is modern for
the caller); the client side (app/fronts/modern/passthrough.py) only relays what `send`
returns, or lets the translating gateway serve the call when the era changed.
An error body that says the upstream speaks the legacy era is the era
decision's (`EraProbe.recheck`, app/upstream/sessions/era.py); a refusal that says
nothing of the era (a rate limiter's plain-text 429) is relayed as it came.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.upstream.errors import too_large
from app.upstream.modern.upstream import ModernHttpUpstream, ModernResponse
from app.upstream.sessions.era import Era, EraProbe, answer_in

# An error answer is small; one larger than this is relayed without a look.
_ERROR_PEEK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Passed:
    """The upstream's answer to a passed-through request; `peeked`: its whole
    body when it was read to look at an error (then relayed from here)."""

    answer: ModernResponse
    peeked: bytes | None


class PassThroughUpstream:
    """`seen`: the era the call was routed by (`choice.Upstream.passes_through`
    binds it), which a legacy answer is rechecked against."""

    __slots__ = ("_era", "_upstream", "seen")

    def __init__(
        self, upstream: ModernHttpUpstream, era: EraProbe, seen: Era | None = None
    ) -> None:
        self._upstream = upstream
        self._era = era
        self.seen = seen

    def bound(self, seen: Era) -> PassThroughUpstream:
        """This pass-through for one call routed by `seen`."""
        return PassThroughUpstream(self._upstream, self._era, seen)

    async def send(
        self,
        body: bytes,
        headers: Mapping[str, str],
        *,
        call_id: Any,
        method: str,
        long_lived: bool,
    ) -> Passed | None:
        """The upstream's answer, to relay; None when the upstream answered as a
        legacy server and the era probed again says so (the call is the
        translating gateway's then). An answer announced over
        MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES is refused before anything is relayed."""
        answer = await self._upstream.post(body, headers, long_lived=long_lived)
        try:
            peeked: bytes | None = None
            if answer.status >= 400 and answer.status not in (401, 403):
                peeked = await answer.read(_ERROR_PEEK_BYTES)
                if peeked is not None and self.seen is not None:
                    era = await self._era.recheck(
                        self.seen,
                        answer.status,
                        answer_in(answer.content_type, peeked),
                        call_id,
                        method,
                        headers.get("authorization"),
                    )
                    if era.name == "legacy":
                        await answer.aclose()
                        return None
            if peeked is None and answer.announced_too_large():
                raise too_large(answer.limit, "the passed-through request")
        except BaseException:
            await answer.aclose()
            raise
        return Passed(answer, peeked)
