"""The era probe's pure rules (app/upstream/sessions/era.py) and the modern headers
(app/upstream/modern/upstream.py), without a server.

2026-07-28 basic/transports/streamable-http "Backward Compatibility": "If the
body contains a recognized modern JSON-RPC error, the server speaks a modern
version of MCP [...] If the body is empty or is not a recognized modern
JSON-RPC error, fall back to `initialize`". That is one client's fallback;
the gateway stores the era for every caller, so a refusal that names no era
(a rate limiter's 429, a proxy's 502) is inconclusive and stores nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.upstream.modern.upstream import header_value, passed_headers, standard_headers
from app.upstream.sessions.era import (
    PROBE_ID,
    Era,
    answer_in,
    doubts,
    era_of,
    newest_common,
    probe_message,
    verdict,
)
from translators.registry import LATEST_MODERN


def classify(answer: Any, status: int = 200) -> Era:
    era = era_of(status, answer)
    assert era is not None
    return era


DISCOVER: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": "mcp-shim-discover",
    "result": {
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}},
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
    },
}


def test_a_discover_result_is_modern() -> None:
    era = classify(DISCOVER)
    assert era.name == "modern"
    assert era.version is not None and era.version.name == "2026-07-28"
    assert era.discover == DISCOVER["result"]


def test_a_discover_result_with_no_version_in_common_is_modern_without_one() -> None:
    era = classify({"id": 1, "result": {"supportedVersions": ["2099-01-01"]}})
    assert era.name == "modern" and era.version is None


@pytest.mark.parametrize("code", [-32020, -32021, -32022])
def test_a_recognised_modern_error_is_modern(code: int) -> None:
    era = classify(
        {"id": 1, "error": {"code": code, "message": "x", "data": {"supported": ["2026-07-28"]}}}
    )
    assert era.name == "modern"
    assert era.version is not None and era.version.name == "2026-07-28"


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (200, None),  # an empty body
        (405, None),  # an HTTP+SSE server: no POST endpoint at the URL
        (404, None),
        # The Python SDK 1.x without a session: -32600 under its own id.
        (400, {"id": "server-error", "error": {"code": -32600, "message": "Missing session ID"}}),
        # The TypeScript SDK: -32000 under a null id.
        (400, {"id": None, "error": {"code": -32000, "message": "No valid session ID"}}),
        (200, {"id": PROBE_ID, "error": {"code": -32601, "message": "Method not found"}}),
        (200, {"id": PROBE_ID, "error": {"code": -32602, "message": "Invalid request"}}),
        (200, {"id": PROBE_ID, "result": {"protocolVersion": "2025-11-25"}}),
    ],
)
def test_an_answer_of_a_legacy_server_is_legacy(status: int, answer: Any) -> None:
    assert classify(answer, status).name == "legacy"


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (429, None),  # a rate limiter's plain-text refusal
        (502, None),  # a proxy's error page
        (503, None),
        (500, None),
        (408, None),
        (400, None),  # a plain-text 400 names no era either
        (410, None),  # nothing era-specific
        # A JSON-RPC body does not make a "not now" status an answer.
        (429, {"id": None, "error": {"code": -32000, "message": "rate limited"}}),
        (503, {"id": "server-error", "error": {"code": -32600, "message": "x"}}),
        # The server's own failure under the probe's id.
        (200, {"id": PROBE_ID, "error": {"code": -32603, "message": "Internal error"}}),
        (200, {"id": PROBE_ID, "error": {"code": -32000, "message": "busy"}}),
    ],
)
def test_a_refusal_that_names_no_era_is_inconclusive(status: int, answer: Any) -> None:
    assert era_of(status, answer) is None
    assert verdict(status, answer, PROBE_ID, "server/discover") == "inconclusive"


def test_a_calls_error_answer_puts_the_era_in_doubt_only_when_it_names_the_other() -> None:
    legacy = {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": "no"}}
    modern_params = {"jsonrpc": "2.0", "id": 4, "error": {"code": -32602, "message": "m"}}
    modern_version = {"jsonrpc": "2.0", "error": {"code": -32022, "message": "v"}}
    # Seen modern (the pass-through, a legacy client's modern session).
    assert doubts("modern", 400, legacy, 4, "tools/call")
    assert not doubts("modern", 400, modern_params, 4, "tools/call")
    assert not doubts("modern", 400, modern_version, 4, "tools/call")
    assert not doubts("modern", 429, None, 4, "tools/call")  # plain-text 429
    assert not doubts("modern", 502, None, 4, "tools/call")
    assert not doubts("modern", 429, legacy, 4, "tools/call")
    assert not doubts("modern", 401, legacy, 4, "tools/call")  # the caller's credential
    assert not doubts("modern", 200, legacy, 4, "tools/call")
    assert doubts("modern", 405, None, 4, "tools/call")
    # Seen legacy (a watched legacy session): the modern fixture's answer to it.
    assert doubts("legacy", 400, modern_params, 4, "tools/list")
    assert not doubts("legacy", 400, legacy, 4, "tools/list")
    assert not doubts("legacy", 400, None, 4, "tools/list")


def test_answer_in_reads_json_bodies_only() -> None:
    body = b'{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"m"}}'
    assert answer_in("application/json", body) == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {"code": -32602, "message": "m"},
    }
    assert answer_in(None, body) is not None
    assert answer_in("text/plain", body) is None
    assert answer_in("application/json", b"Too Many Requests") is None
    assert answer_in("application/json", b"[]") is None


def test_newest_common_ignores_unknown_and_legacy_names() -> None:
    assert newest_common(["2025-11-25", "2099-01-01"]) is None
    chosen = newest_common(["2025-11-25", "2026-07-28"])
    assert chosen is not None and chosen.name == "2026-07-28"
    assert newest_common("2026-07-28") is None


def test_the_probe_is_a_valid_modern_request() -> None:
    message = probe_message(LATEST_MODERN)
    meta = message["params"]["_meta"]
    assert message["method"] == "server/discover"
    assert meta["io.modelcontextprotocol/protocolVersion"] == LATEST_MODERN.name
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
    headers = standard_headers(message, LATEST_MODERN.name)
    assert headers == {"mcp-protocol-version": LATEST_MODERN.name, "mcp-method": "server/discover"}


def test_standard_headers_name_the_target_and_encode_what_is_not_ascii() -> None:
    message = {"method": "resources/read", "params": {"uri": "file:///ü.txt"}}
    headers = standard_headers(message, "2026-07-28")
    assert headers["mcp-method"] == "resources/read"
    assert headers["mcp-name"] == "=?base64?ZmlsZTovLy/DvC50eHQ=?="
    assert header_value("plain") == "plain"
    assert header_value(" padded ").startswith("=?base64?")
    assert "mcp-name" not in standard_headers({"method": "tools/list"}, "2026-07-28")


def test_passed_headers_keep_what_the_upstream_needs_only() -> None:
    out = passed_headers(
        {
            "Authorization": "Bearer x",
            "Mcp-Param-Region": "eu",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "t",
            "Host": "gateway:8080",
            "Origin": "http://localhost",
            "Cookie": "secret",
            "Content-Type": "application/json; charset=utf-8",
        }
    )
    assert out["authorization"] == "Bearer x"
    assert out["mcp-param-region"] == "eu"
    assert out["mcp-name"] == "t"
    assert out["content-type"] == "application/json"
    assert "host" not in out and "origin" not in out and "cookie" not in out
