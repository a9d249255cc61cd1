"""`Mcp-Param-*` validation (2026-07-28 streamable-http "Custom Headers from Tool Parameters")."""

from __future__ import annotations

from app.headers import param_headers

SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "nested": {
            "type": "object",
            "properties": {"flag": {"type": "boolean", "x-mcp-header": "Flag"}},
        },
        "query": {"type": "string"},
    },
}
PATHS = param_headers.annotated_paths(SCHEMA)


def test_paths_follow_properties_only() -> None:
    assert dict(PATHS) == {"region": ("region",), "count": ("count",), "flag": ("nested", "flag")}
    assert (
        param_headers.annotated_paths({"items": {"properties": {"a": {"x-mcp-header": "A"}}}}) == ()
    )


def test_matching_headers_pass() -> None:
    args = {"region": "us-west1", "count": 42, "nested": {"flag": True}}
    hdrs = {"region": "us-west1", "count": "42.0", "flag": "true"}
    assert param_headers.check(PATHS, args, hdrs) is None


def test_absent_or_null_values_need_no_header() -> None:
    assert param_headers.check(PATHS, {"region": None}, {}) is None


def test_missing_header_for_present_value_is_mismatch() -> None:
    r = param_headers.check(PATHS, {"region": "eu"}, {})
    assert r is not None and r.code == -32020 and r.http_status == 400


def test_wrong_value_and_base64() -> None:
    assert param_headers.check(PATHS, {"region": "eu"}, {"region": "us"}) is not None
    hdr = "=?base64?SGVsbG8sIOS4lueVjA==?="
    assert param_headers.check(PATHS, {"region": "Hello, 世界"}, {"region": hdr}) is None
    assert param_headers.check(PATHS, {"region": "x"}, {"region": "=?base64?!!!?="}) is not None
