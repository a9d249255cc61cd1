"""What the routes call on each front: a request the route has parsed goes in,
the client's answer comes out.

The three eras differ in what a request is, so each has its own small
interface rather than one that would hide that:

- a modern call (`CallFront`) is one parsed, validated message; its answer is
  the stream of `Outgoing`s the route writes with `CallAnswer`;
- a legacy Streamable HTTP client (`SessionFront`) posts messages the route
  has only claimed for the legacy era (`Claim`: the bytes and the era), and
  reads or ends its session with GET and DELETE;
- an HTTP+SSE client (`ChannelFront`) opens a channel with `GET /sse` and
  posts its messages to it.

The concrete fronts are `modern.gateway.Gateway`, `legacy.front.LegacyFront`
and `http_sse.front.HttpSseFront`; app/wiring.py builds them and checks that
each fits its interface.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Protocol

from starlette.responses import Response

from app.call import CallState, ModernCall, Outgoing
from app.fronts.legacy.checks import Claim


class CallFront(Protocol):
    """A modern client's call, validated (`ModernCall`), run to its answer."""

    def run(
        self, call: ModernCall, authorization: str | None, state: CallState
    ) -> AsyncGenerator[Outgoing, None]: ...


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
