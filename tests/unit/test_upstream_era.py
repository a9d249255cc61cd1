"""The era probe's pure rules (app/upstream/era.py) and the modern headers
(app/upstream/modern_http.py), without a server.

2026-07-28 basic/transports/streamable-http "Backward Compatibility": "If the
body contains a recognized modern JSON-RPC error, the server speaks a modern
version of MCP [...] If the body is empty or is not a recognized modern
JSON-RPC error, fall back to `initialize`".
"""

from __future__ import annotations

from typing import Any

import pytest

from app.passthrough import modern_error
from app.upstream.era import classify, is_modern_error, newest_common, probe_message
from app.upstream.modern_http import header_value, passed_headers, standard_headers
from translators.registry import LATEST_MODERN

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
    "answer",
    [
        None,  # an empty body, or an error status without JSON-RPC
        # The Python SDK 1.x without a session: -32600 under its own id.
        {"id": "server-error", "error": {"code": -32600, "message": "Missing session ID"}},
        {"id": 1, "error": {"code": -32601, "message": "Method not found"}},
        {"id": 1, "result": {"protocolVersion": "2025-11-25"}},
    ],
)
def test_anything_else_is_legacy(answer: Any) -> None:
    assert classify(answer).name == "legacy"


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


def test_modern_errors_answer_the_request_that_was_sent() -> None:
    legacy = b'{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"no"}}'
    assert not modern_error(legacy, 4)
    assert modern_error(b'{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"m"}}', 4)
    assert modern_error(b'{"jsonrpc":"2.0","error":{"code":-32022,"message":"v"}}', 4)
    assert not modern_error(b"Bad Request", 4)
    assert not modern_error(b'{"jsonrpc":"2.0","id":4,"result":{}}', 4)
    assert not is_modern_error([], 4)


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
