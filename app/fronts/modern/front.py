"""A modern (2026-07-28) client's validated call, to its answer: passed through
unchanged to an upstream of its era (app/fronts/modern/passthrough.py), or
translated by the gateway (app/fronts/modern/gateway.py).

The era is read here once per call (`era_transport.era_for`: the probe's
cached verdict, a probe only when none is known) and decides the path; the
pass-through is bound to that era, so an answer saying the upstream changed
era is judged against the era the call was routed by, and the call is then
served by the gateway in the same request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from starlette.responses import Response

from app.call import CallState, ModernCall
from app.fronts.modern.gateway import Gateway
from app.fronts.modern.passthrough import PassThrough
from app.fronts.shared.answer import CallAnswer
from app.subscriptions import listen as subscriptions_listen
from app.upstream.choice import Upstream
from app.upstream.modern.upstream import passed_headers
from app.upstream.sessions import era_transport

# What a call's answer reports when it is done: its HTTP status, and how it
# ended when that is not the gateway's own outcome (a client gone).
Done = Callable[[int, str | None], None]


class ModernFront:
    def __init__(self, gateway: Gateway, upstream: Upstream, *, write_timeout_s: float) -> None:
        self._gateway = gateway
        self._upstream = upstream
        self._write_timeout_s = write_timeout_s

    async def answer(
        self,
        call: ModernCall,
        body: bytes,
        headers: Mapping[str, str],
        state: CallState,
        done: Done,
        *,
        sse_ok: bool,
        json_ok: bool,
    ) -> Response:
        """The call's response: `body` and `headers` as the client sent them
        (the pass-through sends them on), `done` told once it is written."""
        authorization = headers.get("authorization")
        era = await era_transport.era_for(self._upstream.era, authorization)

        def translated() -> CallAnswer:
            return CallAnswer(
                self._gateway.run(call, authorization, state),
                accepts_sse=sse_ok,
                accepts_json=json_ok,
                on_done=done,
                write_timeout_s=self._write_timeout_s,
            )

        passing = self._upstream.passes_through(era)
        if passing is None:
            return translated()

        # The cheapest path: nothing to translate.
        async def fallback() -> Response:
            return translated()

        def passed(status: int, disconnected: bool, outcome: str) -> None:
            state.upstream_version = call.version.name
            state.outcome = outcome
            done(status, "client_disconnected" if disconnected else None)

        return PassThrough(
            passing,
            body,
            passed_headers(headers),
            call_id=call.id,
            method=call.method,
            long_lived=call.method == subscriptions_listen.METHOD,
            fallback=fallback,
            on_done=passed,
            gateway_url=state.gateway_url,
            write_timeout_s=self._write_timeout_s,
        )
