"""What the bridge answers: to the client, and to the upstream on the client's behalf.

Pure builders:

- ``input_request``: a legacy server request as an `inputRequests` value
  (translated to the client's version, JSON-RPC framing and the key
  convention removed);
- ``input_required``: the `InputRequiredResult`;
- ``missing_capability``: the -32021 rejection;
- ``refusal_reply`` / ``abandon_reply``: the JSON-RPC responses the gateway
  sends the upstream itself, when the caller cannot or will not answer;
- ``do_not_cache``: the caching fields of a result reached through retries;
- ``Frame``: one message for the client, as the bridge yields it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from app.call import Message
from app.mrtr.keys import without_key_meta
from app.quoting import quoted
from app.rejections import INVALID_PARAMS, MISSING_CLIENT_CAPABILITY, Rejection, RequestId
from translators import translate
from translators.registry import Version

SERVER_INFO_META: Final = "io.modelcontextprotocol/serverInfo"
REQUEST_TIMEOUT: Final = -32001  # the SDKs' "request timed out", a legacy-range code
METHOD_NOT_FOUND: Final = -32601
INTERNAL_ERROR: Final = -32603


@dataclass(slots=True)
class Frame:
    """One message for the client (the gateway wraps it as its `Outgoing`)."""

    message: Message
    final: bool = False
    status: int = 200


def input_request(request: Mapping[str, Any], src: Version, dst: Version) -> Message:
    """The upstream's JSON-RPC request as an InputRequest ({method, params?}) in `dst`."""
    bare: Message = {"method": request.get("method")}
    params = request.get("params")
    if isinstance(params, Mapping):
        bare["params"] = without_key_meta(params)
    out = translate.request(bare, src, dst)
    return {k: v for k, v in out.items() if k in ("method", "params")}


def input_required(
    requests: Mapping[str, Message], state: str, server_info: Mapping[str, Any] | None
) -> Message:
    result: Message = {
        "resultType": "input_required",
        "inputRequests": dict(requests),
        "requestState": state,
    }
    if server_info is not None:
        result["_meta"] = {SERVER_INFO_META: dict(server_info)}
    return result


def missing_capability(call_id: RequestId, required: Mapping[str, Any]) -> Rejection:
    names = ", ".join(_describe(name, sub) for name, sub in required.items())
    return Rejection(
        MISSING_CLIENT_CAPABILITY,
        f"Missing required client capability: the server needs {names} for this request",
        call_id,
        data={"requiredCapabilities": dict(required)},
    )


def _describe(name: str, sub: Any) -> str:
    if isinstance(sub, Mapping) and sub:
        return ", ".join(f"{name}.{part}" for part in sub)
    return name


def answer_refused(call_id: RequestId, key: str, reason: str) -> Rejection:
    return Rejection(
        INVALID_PARAMS,
        f"Invalid params: inputResponses[{quoted(key)}] does not fit its request: {reason}",
        call_id,
        data={"inputKey": key},
    )


def response(request: Mapping[str, Any], result: Mapping[str, Any]) -> Message:
    return {"jsonrpc": "2.0", "id": request.get("id"), "result": dict(result)}


def error_response(request: Mapping[str, Any], code: int, message: str) -> Message:
    return {"jsonrpc": "2.0", "id": request.get("id"), "error": {"code": code, "message": message}}


def refusal_reply(request: Mapping[str, Any], required: Mapping[str, Any]) -> Message:
    """The gateway's answer to a request the caller did not declare the capability for."""
    names = ", ".join(_describe(name, sub) for name, sub in required.items())
    return error_response(
        request,
        METHOD_NOT_FOUND,
        f"{request.get('method')} is not available: the client did not declare {names}",
    )


def abandon_reply(request: Mapping[str, Any], *, timed_out: bool) -> Message:
    """What the upstream gets for a question nobody will answer (client/elicitation
    "Response Actions": cancel is a dismissal without an explicit choice)."""
    if request.get("method") == "elicitation/create":
        return response(request, {"action": "cancel"})
    if timed_out:
        return error_response(
            request, REQUEST_TIMEOUT, "Request timed out: the client did not answer in time"
        )
    return error_response(request, INTERNAL_ERROR, "The client abandoned the request")


def do_not_cache(result: Mapping[str, Any], method: str) -> Message:
    """A result reached through inputResponses/requestState: 2026-07-28
    server/utilities/caching says such results MUST NOT be cached, while the
    schema still requires the fields on ReadResourceResult: ttlMs 0, private."""
    out = dict(result)
    if method == "resources/read" or "ttlMs" in out or "cacheScope" in out:
        out["ttlMs"] = 0
        out["cacheScope"] = "private"
    return out


def with_progress_token(request: Mapping[str, Any]) -> Message:
    """`request` with a progressToken (a placeholder, if it had none: the gateway puts
    its own upstream request id there before sending)."""
    params = request.get("params")
    params = dict(params) if isinstance(params, Mapping) else {}
    meta = params.get("_meta")
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    if meta.get("progressToken") is not None:
        return dict(request)
    meta["progressToken"] = 0
    return {**request, "params": {**params, "_meta": meta}}
