"""What a legacy client is answered when it gets no call's stream: JSON bodies,
refusals with an id when one is readable, and the guard every entry point
wears so that a failure still answers JSON."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

import structlog
from starlette.responses import Response

from app import jsonio
from app.call import Message
from app.fronts.legacy import checks as front
from app.fronts.shared import auth
from app.fronts.shared.auth import AuthRelay
from app.rejections import INTERNAL_ERROR, INVALID_REQUEST, Rejection, RequestId
from app.upstream.errors import UpstreamAuthChallenge, UpstreamError

log = structlog.get_logger("mcp_shim.legacy")


def json_response(
    message: Message, status: int, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        jsonio.dumps(message), status_code=status, media_type="application/json", headers=headers
    )


def json_list(messages: list[Message]) -> Response:
    return Response(jsonio.dumps(messages), status_code=200, media_type="application/json")


def refuse(rejection: Rejection, headers: Mapping[str, str] | None = None) -> Response:
    log.info("request_rejected", era="legacy", code=rejection.code, status=rejection.http_status)
    return json_response(front.error_message(rejection), rejection.http_status, headers)


@dataclasses.dataclass(frozen=True, slots=True)
class AtLimit(Rejection):
    """A refusal at one of the gateway's bounds (429, 503), with the seconds after
    which a retry may find room: the answer's Retry-After."""

    retry_after_s: int = 1


def internal_error(request_id: RequestId | None) -> Rejection:
    return Rejection(
        INTERNAL_ERROR,
        "Internal error: the gateway failed to serve the request",
        request_id,
        status=500,
    )


def auth_refusal(
    exc: UpstreamAuthChallenge,
    request_id: RequestId | None,
    gateway_url: str | None,
    relay: AuthRelay | None,
) -> tuple[Rejection, tuple[tuple[str, str], ...]]:
    """An upstream 401/403 as the modern front relays it (app/fronts/shared/auth.py): the same
    status and its challenge, `resource_metadata` naming the gateway, so an
    OAuth-capable legacy client starts its flow against the gateway."""
    log.info("upstream_auth_refused", era="legacy", status=exc.status)
    if relay is not None:
        relay.note(exc.www_authenticate)
    return auth.refusal(request_id, exc, gateway_url)


_P = ParamSpec("_P")
_Owner = TypeVar("_Owner")


def guarded(
    handler: Callable[Concatenate[_Owner, _P], Awaitable[Response]],
) -> Callable[Concatenate[_Owner, _P], Coroutine[Any, Any, Response]]:
    """An entry point whose failures still answer JSON: an upstream 401/403 as
    `auth_refusal`, a defect of ours as -32603 with 500 and one `call_failed`
    line with its stack (never a plain-text 500). What the handler took is
    released by its own try/finally and context managers on the way out."""

    async def guard(owner: _Owner, /, *args: _P.args, **kwargs: _P.kwargs) -> Response:
        try:
            return await handler(owner, *args, **kwargs)
        except UpstreamAuthChallenge as exc:
            relay = getattr(owner, "auth_relay", None)
            url = kwargs.get("gateway_url")
            gateway_url = url if isinstance(url, str) else None
            refusal, headers = auth_refusal(exc, _request_id(args), gateway_url, relay)
            return refuse(refusal, dict(headers))
        except Exception:
            log.exception("call_failed", era="legacy", route=handler.__name__)
            return refuse(internal_error(_request_id(args)))

    functools.update_wrapper(guard, handler)
    return guard


def _request_id(args: tuple[Any, ...]) -> RequestId | None:
    """The id of the message an entry point was serving (its claim or body), if readable."""
    for arg in args:
        if isinstance(arg, front.Claim):
            return front.readable_id(arg.body)
        if isinstance(arg, bytes):
            with contextlib.suppress(jsonio.JSONDecodeError):
                return front.readable_id(jsonio.loads(arg))
    return None


def session_not_found(request_id: RequestId | None = None) -> Rejection:
    # 2025-11-25 streamable-http "Session Management": a request with a session
    # id the server does not know MUST get 404; the client then initialises again.
    return Rejection(
        INVALID_REQUEST,
        "Session not found: it expired or was ended; send initialize to start a new one",
        request_id,
        status=404,
    )


def owner_unreachable(request_id: RequestId | None = None) -> Rejection:
    # The session lives in another replica's memory and that replica does not
    # answer: for this client the session is gone, and the 2025-11-25
    # streamable-http answer to a session the server does not have is 404,
    # upon which the client initialises again (app/cluster/replicas.py).
    return Rejection(
        INVALID_REQUEST,
        "Session not found: the gateway replica holding it cannot be reached; send "
        "initialize to start a new one",
        request_id,
        status=404,
    )


def upstream_failure(exc: UpstreamError, request_id: RequestId | None) -> Rejection:
    return Rejection(
        INTERNAL_ERROR,
        f"Internal error: the upstream MCP server could not serve the request ({exc.message})",
        request_id,
        status=exc.status,
    )
