"""The hop to the replica that holds a parked exchange.

With several gateway replicas behind a load balancer, a retry can land on a
replica other than the one whose memory holds the parked exchange (and whose
upstream connection carries the live call). The sealed `requestState` names
that replica by the base URL it advertises (`MCP_SHIM_ADVERTISE_URL`); the
receiving replica sends the retry there, as it came, and streams the answer
back. The target comes only from a state this deployment sealed, never from
the client, and a forwarded request carries `Mcp-Shim-Hop` so it is never
forwarded again (a misconfigured advertise URL cannot make a loop).

The hop itself is app/cluster/replicas.py's `ReplicaRelay`, the one relay legacy
sessions use too; this module re-derives the request from the validated call
and reads the owner's answer as frames for the bridge. That answer is bounded
as an upstream's is (MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES: a JSON body, one SSE
event), while it is read: the owner relays what its upstream sent, and a
replica that is not ours, or a defect, must not make this one hold more.
Beyond it the caller gets the error of an oversized upstream answer.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing

import httpx
import structlog

from app import jsonio
from app.call import ModernCall
from app.cluster.replicas import HOP_HEADER, RelayFailed, ReplicaRelay
from app.headers.header_values import NAME_FIELDS
from app.mrtr.results import Frame
from app.quoting import quoted
from app.rejections import INTERNAL_ERROR, Rejection
from app.upstream.errors import too_large
from app.upstream.httpclient import h1
from app.upstream.httpclient.sse_decoder import EventTooLarge
from app.upstream.httpclient.sse_decoder import events as sse_events

log = structlog.get_logger("mcp_shim.mrtr.forwarding")

__all__ = ["HOP_HEADER", "ReplicaForwarder", "hop_headers", "mirrored"]


def mirrored(value: str) -> str:
    """A header value as streamable-http "Request Metadata" mirrors it (Base64 sentinel
    for anything that is not plain visible ASCII)."""
    if all(0x20 <= ord(ch) <= 0x7E for ch in value) and value == value.strip():
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def hop_headers(call: ModernCall, authorization: str | None) -> dict[str, str]:
    """The headers of the forwarded request: what a conforming client sent, re-derived."""
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": call.version.name,
        "mcp-method": call.method,
        HOP_HEADER: "1",
    }
    field = NAME_FIELDS.get(call.method)
    name = call.params.get(field) if field is not None else None
    if isinstance(name, str):
        headers["mcp-name"] = mirrored(name)
    for param, value in call.param_headers.items():
        headers[f"mcp-param-{param}"] = value
    if authorization is not None:
        headers["authorization"] = authorization
    return headers


class ReplicaForwarder:
    def __init__(self, relay: ReplicaRelay, max_answer_bytes: int = h1.DEFAULT_MAX_ANSWER_BYTES):
        self._relay = relay
        # MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES: the owner's JSON answer, one of its events.
        self._limit = max_answer_bytes

    async def forward(
        self, call: ModernCall, authorization: str | None, replica: str
    ) -> AsyncGenerator[Frame, None]:
        started = time.perf_counter()
        ending = "client_disconnected"  # the client went away, unless set below
        try:
            try:
                response = await self._relay.send(
                    replica,
                    "POST",
                    "/mcp",
                    hop_headers(call, authorization).items(),
                    jsonio.dumps(call.message),
                )
            except RelayFailed as exc:
                log.warning("mrtr_forward_failed", replica=replica, error=str(exc))
                ending = "owner_unreachable"
                yield _unreachable(call)
                return
            try:
                kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
                if kind == "text/event-stream":
                    stream = sse_events(response.aiter_bytes(), self._limit)
                    async with aclosing(stream) as events:
                        async for event in events:
                            message = jsonio.loads(event.data)
                            if not isinstance(message, dict):
                                continue
                            final = message.get("id") == call.id and (
                                "result" in message or "error" in message
                            )
                            if final:
                                ending = "relayed"
                            yield Frame(message, final)
                            if final:
                                return
                    ending = "owner_broke_off"
                    yield _unreachable(call)
                    return
                message = jsonio.loads(await self._body(response))
                if not isinstance(message, dict):
                    ending = "owner_broke_off"
                    yield _unreachable(call)
                    return
                ending = "relayed"
                yield Frame(message, True, response.status_code)
            except (httpx.HTTPError, jsonio.JSONDecodeError) as exc:
                log.warning("mrtr_forward_failed", replica=replica, error=type(exc).__name__)
                ending = "owner_broke_off"
                yield _unreachable(call)
            except (_TooLarge, EventTooLarge):
                log.warning("mrtr_forward_failed", replica=replica, error="answer_too_large")
                ending = "owner_broke_off:answer_too_large"
                # What an oversized upstream answer gives (the caller's front
                # turns it into its 502); the relayed connection is closed below.
                raise too_large(self._limit, quoted(call.method)) from None
            finally:
                await response.aclose()
        finally:
            self._relay.ended("mrtr_call", ending, time.perf_counter() - started, stream=False)

    async def _body(self, response: httpx.Response) -> bytes:
        """The owner's JSON answer, decoded, read no further than the bound."""
        announced = response.headers.get("content-length", "")
        if announced.isdigit() and int(announced) > self._limit:
            raise _TooLarge
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self._limit:
                raise _TooLarge
        return bytes(body)


class _TooLarge(Exception):
    """The owner's answer is over MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES."""


def _unreachable(call: ModernCall) -> Frame:
    rejection = Rejection(
        INTERNAL_ERROR,
        "Internal error: the gateway replica holding this exchange could not be reached",
        call.id,
        status=502,
    )
    return Frame(rejection.to_message(), True, rejection.http_status)
