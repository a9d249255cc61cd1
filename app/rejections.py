"""Rejections as values, and the one table that maps them to HTTP statuses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RequestId = str | int

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022

# 2026-07-28 basic/transports/streamable-http: header mismatch, unsupported
# version and missing _meta MUST be 400; an unknown method MUST be 404.
_HTTP_STATUS: dict[int, int] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}


def http_status_for(code: int) -> int:
    """HTTP status of a JSON-RPC error produced by the gateway or its upstream."""
    return _HTTP_STATUS.get(code, 200)


@dataclass(frozen=True, slots=True)
class Rejection:
    """A request the gateway refuses, as data: the route turns it into a response."""

    code: int
    message: str
    id: RequestId | None = None
    data: Any = None
    # Transport-level refusals (403 origin, 413 body, 415 media type) carry
    # their own status; JSON-RPC ones take it from the table.
    status: int | None = None

    @property
    def http_status(self) -> int:
        return self.status if self.status is not None else http_status_for(self.code)

    def to_message(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        # 2026-07-28 basic/index "Error Responses": the id is omitted, not
        # null, when the request's id could not be read.
        if self.id is None:
            return {"jsonrpc": "2.0", "error": error}
        return {"jsonrpc": "2.0", "id": self.id, "error": error}

    def with_id(self, request_id: RequestId | None) -> Rejection:
        return Rejection(self.code, self.message, request_id, self.data, self.status)
