"""Each Rejection the gateway answers, as the HTTP status and JSON-RPC error a
client receives (app/rejections.py's table; 2026-07-28 streamable-http: header
mismatch, unsupported version and missing _meta MUST be 400, an unknown method
MUST be 404), first rendered through a raw ASGI call, then provoked through
the whole application."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app import rejections
from app.rejections import Rejection
from app.routes.edge import answer
from tests.seam_fake import Script, result, server_request
from tests.unit.asgi.rig import INITIALIZE, gateway, legacy_headers, modern_request

# Every JSON-RPC code the table names, and the status the spec gives it.
TABLE = {
    rejections.PARSE_ERROR: 400,
    rejections.INVALID_REQUEST: 400,
    rejections.INVALID_PARAMS: 400,
    rejections.HEADER_MISMATCH: 400,
    rejections.MISSING_CLIENT_CAPABILITY: 400,
    rejections.UNSUPPORTED_PROTOCOL_VERSION: 400,
    rejections.METHOD_NOT_FOUND: 404,
}


async def _raw(response: Any) -> tuple[int, dict[str, str], dict[str, Any]]:
    """A response sent through a raw ASGI call: its status, headers and body."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await response({"type": "http", "method": "POST", "path": "/mcp"}, receive, send)
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, orjson.loads(body)


def test_the_table_names_every_code_the_gateway_refuses_with() -> None:
    assert rejections._HTTP_STATUS == TABLE


@pytest.mark.parametrize(("code", "status"), sorted(TABLE.items()))
async def test_each_code_goes_out_with_its_status(code: int, status: int) -> None:
    got, headers, body = await _raw(answer(Rejection(code, "refused", 7)))
    assert got == status
    assert headers["content-type"] == "application/json"
    assert body == {"jsonrpc": "2.0", "id": 7, "error": {"code": code, "message": "refused"}}


async def test_a_code_outside_the_table_is_a_200_and_a_status_of_its_own_wins() -> None:
    assert (await _raw(answer(Rejection(rejections.INTERNAL_ERROR, "x", 1))))[0] == 200
    for status in (403, 408, 413, 415, 431):
        refused = Rejection(rejections.INVALID_REQUEST, "x", status=status)
        got, _, body = await _raw(answer(refused))
        assert got == status
        assert "id" not in body, "an unread id is left out, not null"


async def test_a_legacy_clients_error_always_has_an_id() -> None:
    _, _, body = await _raw(answer(Rejection(rejections.PARSE_ERROR, "x"), legacy_client=True))
    assert "id" in body and body["error"]["code"] == rejections.PARSE_ERROR


# ------------------------------------------------- provoked through the app


def _mismatched_method() -> tuple[dict[str, Any], dict[str, str]]:
    body, headers = modern_request("tools/list")
    headers["mcp-method"] = "prompts/list"
    return body, headers


def _unsupported_version() -> tuple[dict[str, Any], dict[str, str]]:
    body, headers = modern_request("tools/list")
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
    headers["mcp-protocol-version"] = "2099-01-01"
    return body, headers


def _no_meta() -> tuple[dict[str, Any], dict[str, str]]:
    body, headers = modern_request("tools/list")
    del body["params"]["_meta"]
    return body, headers


@pytest.mark.parametrize(
    ("made", "code"),
    [
        (lambda: (b"{not json", legacy_headers()), rejections.PARSE_ERROR),
        (lambda: (b'{"jsonrpc": "2.0", "id": 1}', legacy_headers()), rejections.INVALID_REQUEST),
        (lambda: modern_request("nosuch/method"), rejections.METHOD_NOT_FOUND),
        (_mismatched_method, rejections.HEADER_MISMATCH),
        (_unsupported_version, rejections.UNSUPPORTED_PROTOCOL_VERSION),
        (_no_meta, rejections.INVALID_PARAMS),
    ],
    ids=["parse", "invalid-request", "unknown-method", "header-mismatch", "version", "no-meta"],
)
async def test_a_refused_request_gets_the_tables_status(
    monkeypatch: pytest.MonkeyPatch, made: Any, code: int
) -> None:
    body, headers = made()
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    async with gateway(monkeypatch) as (client, upstream):
        response = await client.post("/mcp", content=content, headers=headers)
    assert response.status_code == TABLE[code], response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == code
    assert upstream.record.requests() == [], "a refused request never goes upstream"


async def test_a_server_request_the_client_cannot_take_is_a_400(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asks = server_request("sampling/createMessage", {"messages": [], "maxTokens": 1})
    script = Script({"tools/call": [asks, result({"content": []})]})
    body, headers = modern_request("tools/call", {"name": "ask", "arguments": {}})
    async with gateway(monkeypatch, script) as (client, _):
        response = await client.post("/mcp", json=body, headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == rejections.MISSING_CLIENT_CAPABILITY
    assert error["data"] == {"requiredCapabilities": {"sampling": {}}}


async def test_an_accepted_request_is_a_200(monkeypatch: pytest.MonkeyPatch) -> None:
    async with gateway(monkeypatch) as (client, upstream):
        response = await client.post("/mcp", json=INITIALIZE, headers=legacy_headers())
    assert response.status_code == 200, response.text
    assert response.json()["result"]["serverInfo"]["name"] == "scripted"
    assert response.headers["mcp-session-id"]
    assert len(upstream.initializes) >= 1
