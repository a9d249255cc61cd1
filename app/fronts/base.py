"""What the routes call on each front: a request the route has parsed goes in,
the client's answer comes out.

The three eras differ in what a request is, so each has its own small
interface rather than one that would hide that:

- a modern call (`CallFront`) is one parsed, validated message; the front
  answers it (passed through, or translated by the gateway and written with
  `CallAnswer`) and reports to the route's `done` once the answer is written;
- a legacy Streamable HTTP client (`SessionFront`) posts messages the route
  has only claimed for the legacy era (`Claim`: the bytes and the era), and
  reads or ends its session with GET and DELETE;
- an HTTP+SSE client (`ChannelFront`) opens a channel with `GET /sse` and
  posts its messages to it.

The concrete fronts are `modern.front.ModernFront`, `legacy.front.LegacyFront`
and `http_sse.front.HttpSseFront`; app/wiring.py builds them and checks that
each fits its interface.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from starlette.responses import Response

from app.call import CallState, ModernCall
from app.fronts.legacy.checks import Claim


class CallFront(Protocol):
    """A modern client's call, validated (`ModernCall`), to its answer: `body`
    and `headers` as the client sent them, `done(status, ending)` once written."""

    async def answer(
        self,
        call: ModernCall,
        body: bytes,
        headers: Mapping[str, str],
        state: CallState,
        done: Callable[[int, str | None], None],
        *,
        sse_ok: bool,
        json_ok: bool,
    ) -> Response: ...


class SessionFront(Protocol):
    """A legacy client's `POST`, `GET` and `DELETE /mcp`, on its session."""

    async def post(
        self,
        claim: Claim,
        headers: Mapping[str, str],
        *,
        sse_ok: bool,
        json_ok: bool,
        gateway_url: str | None = None,
    ) -> Response: ...

    async def get(
        self, headers: Mapping[str, str], *, sse_ok: bool, gateway_url: str | None = None
    ) -> Response: ...

    async def delete(self, headers: Mapping[str, str]) -> Response: ...


class ChannelFront(Protocol):
    """A 2024-11-05 HTTP+SSE client's `GET /sse` and `POST /messages`."""

    def open(self, headers: Mapping[str, str], address: str | None = None) -> Response: ...

    async def post(
        self,
        channel_id: str | None,
        body: bytes,
        headers: Mapping[str, str],
        *,
        gateway_url: str | None = None,
    ) -> Response: ...
