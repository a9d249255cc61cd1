"""Rejections of the modern front, rule by rule (2026-07-28 basic/index,
basic/transports/streamable-http "Server Validation")."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from app.call import ModernCall, ModernNotification
from app.fronts.modern import checks as modern
from app.rejections import Rejection

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def headers(
    method: str, name: str | None = None, version: str = "2026-07-28", **extra: str
) -> dict[str, str]:
    out = {"mcp-protocol-version": version, "mcp-method": method}
    if name is not None:
        out["mcp-name"] = name
    out.update({k.replace("_", "-"): v for k, v in extra.items()})
    return out


def body(
    method: str, params: dict[str, Any] | None = None, rid: Any = 1, meta: Any = META
) -> bytes:
    p = dict(params or {})
    if meta is not None:
        p["_meta"] = meta
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": p})


def reject(raw: bytes, hdrs: dict[str, str]) -> Rejection:
    out = modern.parse(raw, hdrs)
    assert isinstance(out, Rejection), out
    return out


def test_valid_tools_call_parses() -> None:
    out = modern.parse(
        body("tools/call", {"name": "echo", "arguments": {}}), headers("tools/call", "echo")
    )
    assert isinstance(out, ModernCall)
    assert (out.id, out.method, out.version.name) == (1, "tools/call", "2026-07-28")


def test_malformed_json_is_parse_error() -> None:
    r = reject(b"{not json", headers("tools/list"))
    assert (r.code, r.http_status, r.id) == (-32700, 400, None)


def test_batch_is_refused_naming_the_version() -> None:
    r = reject(b"[" + body("tools/list") + b"]", headers("tools/list"))
    assert (r.code, r.http_status) == (-32600, 400)
    assert "2025-06-18" in r.message


def test_null_id_is_refused() -> None:
    r = reject(body("tools/list", rid=None), headers("tools/list"))
    assert (r.code, r.http_status) == (-32600, 400)
    assert "null" in r.message


@pytest.mark.parametrize(
    "missing",
    ["io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"],
)
def test_missing_meta_is_invalid_params_with_id(missing: str) -> None:
    meta = {k: v for k, v in META.items() if k != missing}
    r = reject(body("tools/list", rid="abc", meta=meta), headers("tools/list"))
    assert (r.code, r.http_status, r.id) == (-32602, 400, "abc")
    assert missing in r.message


def test_unsupported_version_lists_supported() -> None:
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "1900-01-01"}
    r = reject(body("tools/list", meta=meta), headers("tools/list", version="1900-01-01"))
    assert (r.code, r.http_status) == (-32022, 400)
    assert r.data == {"supported": ["2026-07-28"], "requested": "1900-01-01"}


def test_protocol_header_mismatch() -> None:
    r = reject(body("tools/list"), headers("tools/list", version="2025-11-25"))
    assert (r.code, r.http_status, r.id) == (-32020, 400, 1)


def test_method_header_missing_or_wrong() -> None:
    h = headers("tools/list")
    del h["mcp-method"]
    assert reject(body("tools/list"), h).code == -32020
    assert reject(body("tools/list"), headers("prompts/list")).code == -32020


def test_name_header_checked_after_base64_decoding() -> None:
    name = "héllo wörld"
    enc = "=?base64?" + base64.b64encode(name.encode()).decode() + "?="
    ok = modern.parse(body("tools/call", {"name": name}), headers("tools/call", enc))
    assert isinstance(ok, ModernCall)
    assert reject(body("tools/call", {"name": "a"}), headers("tools/call", "b")).code == -32020
    assert reject(body("tools/call", {"name": "a"}), headers("tools/call")).code == -32020
    r = reject(body("resources/read", {"uri": "file:///x"}), headers("resources/read", "file:///y"))
    assert (r.code, r.http_status) == (-32020, 400)


@pytest.mark.parametrize(
    "method",
    [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "nope/x",
    ],
)
def test_methods_2026_does_not_define_are_not_found(method: str) -> None:
    r = reject(body(method), headers(method))
    assert (r.code, r.http_status, r.id) == (-32601, 404, 1)


def test_notification_is_accepted() -> None:
    raw = orjson.dumps(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    )
    # streamable-http "Protocol Version Header": every POST MUST carry it.
    hdrs = {"mcp-protocol-version": "2026-07-28", "mcp-method": "notifications/cancelled"}
    assert isinstance(modern.parse(raw, hdrs), ModernNotification)


def test_responses_and_bad_shapes_are_invalid_requests() -> None:
    assert reject(orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}), {}).code == -32600
    assert reject(orjson.dumps({"jsonrpc": "1.0", "id": 1, "method": "x"}), {}).code == -32600
    assert reject(orjson.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "x"}), {}).code == -32600
    assert (
        reject(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1]}), {}).code
        == -32600
    )
    assert reject(b"42", {}).code == -32600
