"""A modern client in front of a modern upstream: the cheapest path.

The front has validated the request (app/fronts/modern/checks.py) exactly as for any
upstream, and chosen this path from the era it read once for the call
(app/fronts/modern/front.py); then nothing is translated. The body goes upstream as it came, with
the client's headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
`Mcp-Param-*`, `Authorization`, trace context), so its `_meta`,
`requestState` and `inputResponses` are untouched; the upstream's status,
content type and body come back as they are read, chunk by chunk: a JSON
answer, an SSE answer with its progress, a `subscriptions/listen` stream for
as long as it lasts. The client going away closes the upstream stream, which
is a modern client's cancellation (2026-07-28 streamable-http "Cancellation").

Sending, and the one thing looked at (an error status that may say the
upstream was redeployed as a legacy server), are the modern upstream's
capability (app/upstream/modern/passthrough.py); when the era changed, the
call is served by the translating gateway instead, in the same request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from starlette.responses import Response

from app import jsonio, write_coalescer
from app.connection.held import ClientHeld, Receive, Scope, Send
from app.fronts.shared import auth
from app.rejections import INTERNAL_ERROR, Rejection
from app.upstream.errors import UpstreamAnswerTooLarge, UpstreamError
from app.upstream.modern.passthrough import PassThroughUpstream
from app.upstream.modern.upstream import ModernResponse

log = structlog.get_logger("mcp_shim.passthrough")


class AnswerCutShort(Exception):
    """A passed-through JSON answer over the limit after its head went out."""


class PassThrough(Response):
    def __init__(
        self,
        upstream: PassThroughUpstream,
        body: bytes,
        headers: dict[str, str],
        *,
        call_id: Any,
        method: str,
        long_lived: bool,
        fallback: Callable[[], Awaitable[Response]],
        on_done: Callable[[int, bool, str], None],
        gateway_url: str | None,
        write_timeout_s: float,
    ) -> None:
        super().__init__(status_code=200)
        self._upstream = upstream
        self._body = body
        self._forward = headers
        self._call_id = call_id
        self._method = method
        self._long_lived = long_lived
        self._fallback = fallback
        self._on_done = on_done
        self._gateway_url = gateway_url
        self._write_timeout_s = write_timeout_s
        self._status = 200
        self._outcome = "passed_through"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        answer: ModernResponse | None = None
        fallback: Response | None = None
        held = ClientHeld(receive, scope)
        try:
            async with held:
                passed = await self._upstream.send(
                    self._body,
                    self._forward,
                    call_id=self._call_id,
                    method=self._method,
                    long_lived=self._long_lived,
                )
                if passed is None:
                    self._outcome = "era_changed"
                    fallback = await self._fallback()
                else:
                    answer = passed.answer
                    await self._relay(answer, passed.peeked, send)
            if fallback is not None:
                # Answered by the legacy path, which watches the client itself.
                await fallback(scope, receive, send)  # type: ignore[arg-type]
            else:
                await write_coalescer.let_writes_out()
        except UpstreamError as exc:
            self._outcome = "upstream_error"
            rejection = Rejection(
                INTERNAL_ERROR, f"Upstream error: {exc.message}", self._call_id, status=exc.status
            )
            body = jsonio.dumps(rejection.to_message())
            await self._send_whole(send, rejection.http_status, body)
        finally:
            if answer is not None:
                with contextlib.suppress(Exception):
                    await answer.aclose()
            self._on_done(self._status, held.disconnected.is_set(), self._outcome)

    async def _relay(self, answer: ModernResponse, peeked: bytes | None, send: Send) -> None:
        headers = []
        for name, value in answer.headers:
            if name == "www-authenticate":
                # The challenge names the gateway's metadata, not the upstream's.
                ours = auth.metadata_url(self._gateway_url) if self._gateway_url else None
                value = auth.rewrite_challenge(value, ours)
            headers.append((name.encode("latin-1"), value.encode("latin-1")))
        if answer.content_type == "text/event-stream":
            headers.append((b"x-accel-buffering", b"no"))
        self._status = answer.status
        if peeked is not None:
            headers.append((b"content-length", str(len(peeked)).encode()))
            await send({"type": "http.response.start", "status": answer.status, "headers": headers})
            await send({"type": "http.response.body", "body": peeked})
            return
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        try:
            async for chunk in answer.chunks():
                if not chunk:
                    continue
                try:
                    async with asyncio.timeout(self._write_timeout_s):
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except TimeoutError:
                    self._outcome = "client_stalled"
                    return
        except UpstreamAnswerTooLarge as exc:
            await self._cut(answer, exc, send)
            return
        await send({"type": "http.response.body", "body": b""})

    async def _cut(self, answer: ModernResponse, exc: UpstreamAnswerTooLarge, send: Send) -> None:
        """An answer over MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES after its head went
        out: an SSE stream ends with the call's -32603 as its last event; a
        JSON body cannot say it, so the client's connection is closed before
        the body's end (it sees a broken answer, never a short valid one)."""
        self._outcome = "upstream_error"
        if answer.content_type != "text/event-stream":
            # Not an UpstreamError (answered with a body of its own): the head is
            # out, and an exception now makes the server close the connection.
            raise AnswerCutShort(exc.message) from exc
        rejection = Rejection(INTERNAL_ERROR, f"Upstream error: {exc.message}", self._call_id)
        event = b"\n\nevent: message\ndata: %s\n\n" % jsonio.dumps(rejection.to_message())
        await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def _send_whole(self, send: Send, status: int, body: bytes) -> None:
        self._status = status
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
