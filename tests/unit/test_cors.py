"""CORS (app/routes/cors.py): the headers a preflight and an answer to an
allowed Origin carry, and none for another; and the send wrapper of
app/serving/server.py that adds them to every answer (nothing without an Origin)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.routes.cors import (
    EXPOSED_HEADERS,
    MAX_AGE_S,
    Cors,
    allow_value,
    allowed_request_headers,
)
from app.serving import server


def test_allow_lists_methods_in_a_fixed_order() -> None:
    assert allow_value(("OPTIONS", "DELETE", "POST", "GET")) == "GET, POST, DELETE, OPTIONS"
    assert allow_value(("OPTIONS", "HEAD", "GET")) == "GET, HEAD, OPTIONS"
    assert allow_value(("POST", "OPTIONS")) == "POST, OPTIONS"


@pytest.mark.parametrize(
    ("asked", "kept"),
    [
        (
            "accept,authorization,content-type,mcp-protocol-version,mcp-session-id",
            "accept, authorization, content-type, mcp-protocol-version, mcp-session-id",
        ),
        ("Mcp-Method, Mcp-Name, Last-Event-ID", "mcp-method, mcp-name, last-event-id"),
        ("traceparent,tracestate,x-request-id", "traceparent, tracestate, x-request-id"),
        # A tool's parameter headers, by prefix; the bare prefix is no name.
        ("mcp-param-region,mcp-param-", "mcp-param-region"),
        ("mcp-param-a b,mcp-param-ok", "mcp-param-ok"),  # not a token
        ("cookie,x-custom,content-type,content-type", "content-type"),
        ("", ""),
        (" , ,", ""),
    ],
)
def test_a_preflight_gets_back_the_requested_headers_it_may_send(asked: str, kept: str) -> None:
    assert allowed_request_headers(asked) == kept


@pytest.mark.parametrize(
    "origin",
    ["https://app.example", "http://localhost:5173", "http://127.0.0.1:8080", "http://[::1]"],
)
def test_an_allowed_origin_is_echoed_with_vary_and_exposed_headers(origin: str) -> None:
    cors = Cors(["https://app.example"])
    headers = dict(cors.answer_headers(origin))
    assert headers == {
        b"access-control-allow-origin": origin.encode(),
        b"access-control-expose-headers": EXPOSED_HEADERS,
        b"vary": b"Origin",
    }
    exposed = {name.strip().lower() for name in EXPOSED_HEADERS.decode().split(",")}
    assert exposed == {
        "mcp-session-id",
        "mcp-protocol-version",
        "x-request-id",
        "www-authenticate",
        "retry-after",
    }


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "null", "https://app.example.evil", "file://", ""]
)
def test_another_origin_gets_no_headers(origin: str) -> None:
    assert Cors(["https://app.example"]).answer_headers(origin) == ()


def test_star_allows_any_origin_echoed_never_as_star() -> None:
    headers = dict(Cors(["*"]).answer_headers("https://anyone.example"))
    assert headers[b"access-control-allow-origin"] == b"https://anyone.example"


def test_decisions_are_remembered_up_to_a_bound() -> None:
    cors = Cors([])
    first = cors.answer_headers("http://localhost:1")
    assert cors.answer_headers("http://localhost:1") is first
    for port in range(1000):
        cors.answer_headers(f"http://localhost:{port}")
    assert len(cors._answers) == 256


def test_preflight_headers() -> None:
    headers = Cors.preflight_headers(
        "GET, POST, DELETE, OPTIONS", "content-type,x-custom,mcp-session-id"
    )
    assert headers == {
        "access-control-allow-methods": "GET, POST, DELETE, OPTIONS",
        "access-control-max-age": str(MAX_AGE_S),
        "access-control-allow-headers": "content-type, mcp-session-id",
    }
    # No header asked, or none allowed: no Allow-Headers (the browser refuses then).
    assert "access-control-allow-headers" not in Cors.preflight_headers("POST", None)
    assert "access-control-allow-headers" not in Cors.preflight_headers("POST", "x-custom")
    private = Cors.preflight_headers("POST", None, private_network=True)
    assert private["access-control-allow-private-network"] == "true"
    assert "access-control-allow-credentials" not in private


def _sent_headers(request_headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers app/serving/server.py's middleware adds to an answer's start."""
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"a", b"1")]})

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request"}

    middleware = server.RequestIdMiddleware(app, Cors(["https://app.example"]))
    scope: dict[str, Any] = {"type": "http", "headers": request_headers}
    asyncio.run(middleware(scope, receive, send))
    headers: list[tuple[bytes, bytes]] = sent[0]["headers"]
    assert headers[0] == (b"a", b"1") and headers[1][0] == b"x-request-id"
    return headers[2:]


def test_an_answer_without_origin_gets_only_its_request_id() -> None:
    assert _sent_headers([(b"x-request-id", b"abc")]) == []


def test_an_answer_to_an_allowed_origin_gets_the_cors_headers() -> None:
    added = dict(_sent_headers([(b"origin", b"https://app.example"), (b"x-request-id", b"a")]))
    assert added[b"access-control-allow-origin"] == b"https://app.example"
    assert added[b"vary"] == b"Origin"


def test_an_answer_to_another_origin_gets_none_and_the_first_origin_counts() -> None:
    assert _sent_headers([(b"origin", b"https://evil.example")]) == []
    both = [(b"origin", b"https://evil.example"), (b"origin", b"https://app.example")]
    assert _sent_headers(both) == []
