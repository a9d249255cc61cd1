"""The gateway's edge over HTTP, in process: the Origin and Host checks (DNS
rebinding: 2026-07-28 streamable-http "Security & Endpoint", an invalid Origin
MUST get 403), the body and header bounds, the media type, the methods each
route serves, CORS, and the request id every answer carries."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.unit.asgi.rig import INITIALIZE, gateway, legacy_headers

INIT = orjson.dumps(INITIALIZE)


async def _post(
    monkeypatch: pytest.MonkeyPatch,
    content: bytes = INIT,
    settings: dict[str, Any] | None = None,
    **h: str,
) -> tuple[int, dict[str, str], bytes, int]:
    """One POST /mcp: status, headers, body, and how many sessions went upstream."""
    async with gateway(monkeypatch, **(settings or {})) as (client, upstream):
        before = len(upstream.initializes)
        response = await client.post("/mcp", content=content, headers=legacy_headers(**h))
        return (
            response.status_code,
            dict(response.headers),
            response.content,
            len(upstream.initializes) - before,
        )


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "null", "file://", "http://localhost.evil.example"]
)
async def test_a_foreign_origin_is_403_and_never_reaches_the_upstream(
    monkeypatch: pytest.MonkeyPatch, origin: str
) -> None:
    status, headers, body, opened = await _post(monkeypatch, origin=origin)
    assert status == 403
    assert b"MCP_SHIM_ALLOWED_ORIGINS" in body
    assert opened == 0
    assert "access-control-allow-origin" not in headers


@pytest.mark.parametrize("origin", ["http://localhost:5173", "http://127.0.0.1", "http://[::1]:3"])
async def test_a_loopback_origin_is_served_with_its_cors_headers(
    monkeypatch: pytest.MonkeyPatch, origin: str
) -> None:
    status, headers, _, _ = await _post(monkeypatch, origin=origin)
    assert status == 200
    assert headers["access-control-allow-origin"] == origin
    assert headers["vary"] == "Origin"
    assert "Mcp-Session-Id" in headers["access-control-expose-headers"]


async def test_an_origin_allowed_by_setting_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = {"allowed_origins": ["https://app.example"]}
    status, headers, _, _ = await _post(monkeypatch, settings=allowed, origin="https://app.example")
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example"
    status, _, _, _ = await _post(monkeypatch, settings=allowed, origin="https://other.example")
    assert status == 403


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("evil.example", 403),  # a rebound name
        ("evil.example:8080", 403),
        ("a b", 400),  # RFC 9112 3.2: not a host at all
        ("[fe80::1%eth0]", 400),  # a zone id names the client's interface
        ("localhost:8080", 200),
        ("[::1]:8080", 200),
    ],
)
async def test_the_host_header_is_checked(
    monkeypatch: pytest.MonkeyPatch, host: str, status: int
) -> None:
    got, _, body, opened = await _post(monkeypatch, host=host)
    assert got == status, body
    assert opened == (1 if status == 200 else 0)


async def test_a_host_allowed_by_setting_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = {"allowed_hosts": ["mcp.example"]}
    assert (await _post(monkeypatch, settings=allowed, host="mcp.example:443"))[0] == 200
    assert (await _post(monkeypatch, settings=allowed, host="other.example"))[0] == 403


async def test_a_body_over_the_limit_is_413_before_any_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limit = {"max_body_bytes": 2048}
    status, _, body, opened = await _post(monkeypatch, b"{" + b" " * 2048 + b"}", limit)
    assert status == 413 and b"MCP_SHIM_MAX_BODY_BYTES" in body and opened == 0
    padded = INIT[:-1] + b" " * (2048 - len(INIT)) + b"}"  # exactly at the limit
    assert len(padded) == 2048
    assert (await _post(monkeypatch, padded, limit))[0] == 200


async def test_a_body_not_json_by_its_media_type_is_415(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = legacy_headers(**{"content-type": "text/plain"})
    async with gateway(monkeypatch) as (client, upstream):
        refused = await client.post("/mcp", content=INIT, headers=plain)
        assert upstream.initializes == []
        charset = {**plain, "content-type": "application/json; charset=utf-8"}
        served = await client.post("/mcp", content=INIT, headers=charset)
    assert refused.status_code == 415 and b"application/json" in refused.content
    assert served.status_code == 200


async def test_an_oversized_authorization_header_is_431(monkeypatch: pytest.MonkeyPatch) -> None:
    status, _, body, opened = await _post(monkeypatch, authorization="Bearer " + "x" * 9000)
    assert status == 431 and opened == 0
    assert b"x" * 100 not in body, "the credential is never echoed"


@pytest.mark.parametrize(("method", "path"), [("PUT", "/mcp"), ("PATCH", "/mcp"), ("GET", "/mcp")])
async def test_a_method_the_route_does_not_serve_is_405_with_allow(
    monkeypatch: pytest.MonkeyPatch, method: str, path: str
) -> None:
    async with gateway(monkeypatch) as (client, _):
        response = await client.request(method, path, headers={"accept": "text/event-stream"})
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, POST, DELETE, OPTIONS"


async def test_any_other_path_is_a_404_naming_the_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with gateway(monkeypatch) as (client, _):
        response = await client.get("/nope")
        slash = await client.post("/mcp/", content=INIT, headers=legacy_headers())
    assert response.status_code == 404 and "POST /mcp" in response.json()["error"]["message"]
    assert slash.status_code == 404, "no redirect built from the Host header"
    assert "location" not in slash.headers


async def test_a_preflight_is_answered_for_an_allowed_origin_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ask = {"access-control-request-method": "POST"}
    async with gateway(monkeypatch) as (client, _):
        ok = await client.options("/mcp", headers={"origin": "http://localhost:3000", **ask})
        evil = await client.options("/mcp", headers={"origin": "http://evil.example", **ask})
    assert ok.status_code == 204
    assert ok.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "POST" in ok.headers["access-control-allow-methods"]
    assert evil.status_code == 403
    assert "access-control-allow-origin" not in evil.headers


async def test_every_answer_carries_a_request_id_and_keeps_the_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with gateway(monkeypatch) as (client, _):
        mine = await client.post(
            "/mcp", content=INIT, headers=legacy_headers(**{"x-request-id": "abc-123"})
        )
        refused = await client.post("/mcp", content=b"{", headers=legacy_headers())
        health = await client.get("/healthz")
    assert mine.headers["x-request-id"] == "abc-123"
    assert refused.status_code == 400 and refused.headers["x-request-id"]
    assert health.status_code == 200 and health.headers["x-request-id"]
    assert health.json()["status"] == "ok"
