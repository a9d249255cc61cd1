"""Hostile input at the modern front (issue 7 "Hardening"): deep nesting, header
values the gateway cannot forward, malformed client capabilities, notifications
that skipped every check, and unbounded log fields. Pure: no server."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from app import jsonio, logs
from app.call import ModernCall
from app.fronts.modern import checks as modern
from app.fronts.shared import header_guard
from app.rejections import Rejection
from app.upstream.capabilities import canonical
from app.upstream.sessions.pool import SessionPool
from translators.registry import get_version

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def call(arguments: Any = None, caps: Any = None, rid: Any = 9) -> bytes:
    meta = dict(META)
    if caps is not None:
        meta["io.modelcontextprotocol/clientCapabilities"] = caps
    params = {"name": "echo", "arguments": arguments or {}, "_meta": meta}
    # json, not orjson: orjson cannot even write the deep bodies these tests send.
    message = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    return json.dumps(message).encode()


def call_headers(**extra: str) -> dict[str, str]:
    return {
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "echo",
        **extra,
    }


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


# -- depth ----------------------------------------------------------------------


def test_deep_nesting_is_refused_with_the_id() -> None:
    # Defect 2: 300 levels parsed (orjson reads 1,024) but could not be serialised
    # again (~254): a plain-text 500. Now -32600, 400, the id echoed.
    out = modern.parse(call(nested(300)), call_headers())
    assert isinstance(out, Rejection)
    assert (out.code, out.http_status, out.id) == (-32600, 400, 9)
    assert "MCP_SHIM_MAX_JSON_DEPTH" in out.message


def test_depth_limit_is_exact_and_configurable() -> None:
    # The message is level 1, params 2: arguments of n nested objects reach 2 + n.
    assert isinstance(modern.parse(call(nested(62)), call_headers()), ModernCall)
    assert isinstance(modern.parse(call(nested(63)), call_headers()), Rejection)
    assert isinstance(modern.parse(call(nested(101)), call_headers(), max_depth=103), ModernCall)
    assert isinstance(modern.parse(call(nested(102)), call_headers(), max_depth=103), Rejection)


def test_deep_arrays_and_unreadable_ids() -> None:
    deep = b"[" * 500 + b"]" * 500
    out = modern.parse(b'{"jsonrpc": "2.0", "id": null, "x": ' + deep + b"}", {})
    assert isinstance(out, Rejection) and (out.code, out.id) == (-32600, None)
    out = modern.parse(b"[" * 900 + b"]" * 900, {})
    assert isinstance(out, Rejection) and out.code == -32600


def test_deeper_than_the_parser_keeps_a_readable_id() -> None:
    body = b'{"id": "x", "jsonrpc": "2.0", "p": ' + b"[" * 1100 + b"]" * 1100 + b"}"
    out = modern.parse(body, {})
    assert isinstance(out, Rejection) and (out.code, out.id) == (-32600, "x")
    # Only the top level's id, only strings and integers, never a guess.
    assert jsonio.read_deep(b'{"a": {"id": 3}, "id": 4}') == (True, 4)
    assert jsonio.read_deep(b'{"id": 1.5}') == (True, None)
    assert jsonio.read_deep(b'[{"id": 1}]') == (True, None)
    assert jsonio.read_deep(b'{"k": "\\"id\\": 2", "id": "y"}') == (True, "y")
    # Duplicate keys: the parser keeps the last.
    assert jsonio.read_deep(b'{"id": 1, "id": [2]}') == (True, None)
    assert jsonio.read_deep(b'{"id": [2], "id": 1}') == (True, 1)


def test_deeper_than_the_parser_and_not_json_is_a_parse_error() -> None:
    # Found by the fuzz run (issue 19): a raw NUL after 5,000 levels, the id at
    # the end. The parser stops at its depth limit before the NUL; the id was
    # read past the broken byte and echoed in a -32600 "too deep". Not JSON
    # text: -32700, no id (basic/index "Error Responses").
    deep = b"[" * 1100 + b"]" * 1100
    broken = b'{"p": ' + deep + b', "\x00": 1, "jsonrpc": "2.0", "id": 7}'
    out = modern.parse(broken, {})
    assert isinstance(out, Rejection) and (out.code, out.id) == (-32700, None), out
    for bad in (
        b'{"id": 7, "p": ' + deep + b"",  # truncated
        b'{"id": 7, "p": ' + deep + b"} x",  # trailing garbage
        b'{"id": 7, "p": ' + deep + b', "s": "\xff"}',  # invalid UTF-8
        b'{"id": 7, "p": ' + deep + b", 1e400: 1}",  # a number as a key
        b'{"id": 7, "p": ' + deep + b', "n": 1e400}',  # not a finite number
        b'{"id": 7, "p": ' + deep + b', "s": "\\ud800"}',  # a lone surrogate
        b'{"id": 7, "p": ' + b"[" * 1100 + b"]" * 1099 + b"}}",  # mismatched
        b'{"id": 7, "p": ' + deep + b",}",  # trailing comma
    ):
        assert jsonio.read_deep(bad) == (False, None), bad[-40:]
        out = modern.parse(bad, {})
        assert isinstance(out, Rejection) and (out.code, out.id) == (-32700, None), bad[-40:]
    # Past what is scanned: too deep, its id not read.
    big = b'{"id": 7, "s": "' + b"a" * jsonio.ID_SCAN_BYTES + b'", "p": ' + deep + b"}"
    assert jsonio.read_deep(big) == (True, None)


def test_depth_walk_skipped_for_flat_bodies() -> None:
    # Few brackets: no walk at all (the object is not even looked at).
    assert not jsonio.deeper_than(b'{"a": [1, 2]}', object(), 64)
    wide = {"items": [{"k": i} for i in range(5000)]}
    assert not jsonio.deeper_than(orjson.dumps(wide), wide, 64)


# -- header values ----------------------------------------------------------------


def test_non_ascii_authorization_is_refused_without_its_value() -> None:
    # Defect 3: httpx refused the header with an exception carrying the credential.
    secret = "Bearer sk-live-TOPSECRET\xe9"
    out = modern.parse(call(), call_headers(authorization=secret))
    assert isinstance(out, Rejection)
    assert (out.code, out.http_status, out.id) == (-32600, 400, 9)
    assert "Authorization" in out.message
    assert "TOPSECRET" not in json.dumps(out.to_message())


def test_oversized_authorization_is_refused_before_it_goes_upstream() -> None:
    # Found by the fuzzer: a 70,000-byte Authorization was forwarded, refused by the
    # upstream's HTTP server, and came back as the gateway's 502.
    token = "Bearer " + "a" * header_guard.MAX_AUTHORIZATION_CHARS
    out = modern.parse(call(), call_headers(authorization=token))
    assert isinstance(out, Rejection)
    assert (out.code, out.http_status, out.id) == (-32600, 431, 9)
    assert "aaaa" not in json.dumps(out.to_message())
    fits = "Bearer " + "a" * (header_guard.MAX_AUTHORIZATION_CHARS - len("Bearer "))
    assert isinstance(modern.parse(call(), call_headers(authorization=fits)), ModernCall)


@pytest.mark.parametrize("name", ["mcp-param-region", "mcp-name", "mcp-method"])
def test_non_ascii_mcp_headers_are_header_errors(name: str) -> None:
    hdrs = call_headers()
    hdrs[name] = "caf\xe9-value\x01"
    out = modern.parse(call(), hdrs)
    assert isinstance(out, Rejection)
    assert (out.code, out.http_status) == (-32020, 400)
    assert "caf" not in out.message


# -- client capabilities ----------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "field"),
    [
        ({"roots": "x"}, ".roots must be an object"),
        ({"sampling": []}, ".sampling must be an object"),
        ({"sampling": {"tools": True}}, ".sampling.tools must be an object"),
        ({"elicitation": {"url": 1}}, ".elicitation.url must be an object"),
        ({"experimental": {"mine": "yes"}}, ".experimental['mine'] must be an object"),
        ({"extensions": 3}, ".extensions must be an object"),
    ],
)
def test_malformed_capabilities_are_invalid_params(caps: Any, field: str) -> None:
    # Defect 7: these cost an upstream initialize and came back as 502.
    out = modern.parse(call(caps=caps), call_headers())
    assert isinstance(out, Rejection)
    assert (out.code, out.http_status, out.id) == (-32602, 400, 9)
    assert field in out.message


def test_open_capabilities_stay_open() -> None:
    # ClientCapabilities "is not a closed set": unknown members are accepted.
    caps = {"roots": {}, "elicitation": {"form": {}, "other": 1}, "vendor.x": 5}
    assert isinstance(modern.parse(call(caps=caps), call_headers()), ModernCall)


def test_session_keys_use_canonical_capabilities() -> None:
    # Defect 6: sessions were keyed by whatever the client declared.
    v = get_version("2025-11-25")
    assert v is not None
    keys = {
        SessionPool.key_for(
            {"roots": {"listChanged": True, f"x{i}": i}, "experimental": {f"e{i}": {}}},
            v,
            None,
        )
        for i in range(100)
    }
    assert len(keys) == 1
    assert canonical(
        {"sampling": {"tools": {"deep": 1}, "z": 1}, "elicitation": {}, "tasks": {"list": {}}}, v
    ) == {"sampling": {"tools": {}}, "elicitation": {}, "tasks": {"list": {}}}
    old = get_version("2025-06-18")
    assert old is not None
    assert canonical({"elicitation": {"form": {"x": 1}}, "roots": {"listChanged": False}}, old) == {
        "elicitation": {},
        "roots": {},
    }


# -- notifications ----------------------------------------------------------------


def notification(method: str, **params: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params})


def test_notification_without_headers_is_refused() -> None:
    # Defect 9: a notification skipped every check and got 202.
    out = modern.parse(notification("x" * 3_000_000), {})
    assert isinstance(out, Rejection)
    assert (out.code, out.http_status, out.id) == (-32020, 400, None)


def test_notification_method_must_be_known() -> None:
    hdrs = {"mcp-protocol-version": "2026-07-28"}
    out = modern.parse(notification("x" * 3_000_000), hdrs)
    assert isinstance(out, Rejection)
    assert (out.code, out.http_status) == (-32601, 404)
    assert len(out.message) < 300
    out = modern.parse(notification("notifications/initialized"), hdrs)
    assert isinstance(out, Rejection) and out.code == -32601  # not a 2026-07-28 notification


def test_notification_version_and_method_headers_are_checked() -> None:
    body = notification("notifications/cancelled", requestId=1)
    out = modern.parse(body, {"mcp-protocol-version": "2025-11-25"})
    assert isinstance(out, Rejection) and (out.code, out.http_status) == (-32022, 400)
    out = modern.parse(
        body, {"mcp-protocol-version": "2026-07-28", "mcp-method": "notifications/other"}
    )
    assert isinstance(out, Rejection) and out.code == -32020
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-01-01"}
    out = modern.parse(
        notification("notifications/cancelled", requestId=1, _meta=meta),
        {"mcp-protocol-version": "2026-07-28"},
    )
    assert isinstance(out, Rejection) and out.code == -32020


def test_long_values_are_not_echoed_whole() -> None:
    out = modern.parse(
        orjson.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "m" * 100_000, "params": {"_meta": META}}
        ),
        {"mcp-protocol-version": "2026-07-28", "mcp-method": "m" * 100_000},
    )
    assert isinstance(out, Rejection) and out.code == -32601
    assert len(out.message) < 300


# -- log fields ---------------------------------------------------------------------


def test_log_fields_are_bounded() -> None:
    # Defect 9: a 3 MB method name became a 3 MB log line.
    event = logs.bound_fields(
        None, "info", {"event": "notification_accepted", "method": "x" * 3_000_000, "n": 5}
    )
    assert len(event["method"]) < logs.MAX_FIELD_CHARS + 40
    assert event["method"].startswith("x" * 100)
    assert (event["event"], event["n"]) == ("notification_accepted", 5)
    stack = logs.bound_fields(None, "error", {"exception": "a" * 50_000 + "Boom"})["exception"]
    assert len(stack) < logs.MAX_STACK_CHARS + 100 and stack.endswith("Boom")


def test_every_log_field_is_bounded_lists_and_mappings_too() -> None:
    # A stdio server's exit line carried its last 20 stderr lines of 500
    # characters each: a 10 KB line, past the limit every string field had.
    tail = [f"line {i}: " + "e" * 490 for i in range(20)]
    event = logs.bound_fields(
        None,
        "warning",
        {
            "event": "upstream_process_exited",
            "stderr_tail": tail,
            "detail": {"k" * 300: "v" * 5000},
            "n": 10**6,
            "ok": True,
            "none": None,
        },
    )
    bounded = event["stderr_tail"]
    assert len(json.dumps(bounded)) < 2 * logs.MAX_FIELD_CHARS
    # The end of a history tells most: the last line is kept, the cut is said.
    assert bounded[-1].startswith("line 19: ") and bounded[0] == "... (19 earlier items cut)"
    assert len(event["detail"]) < logs.MAX_FIELD_CHARS + 40
    assert (event["n"], event["ok"], event["none"]) == (10**6, True, None)
    # Small ones pass as they are.
    small = {"event": "x", "tail": ["a", "b"], "meta": {"a": 1}}
    assert logs.bound_fields(None, "info", dict(small)) == small
    # Whatever a renderer of the standard library would take, still bounded.
    odd = logs.bound_fields(None, "info", {"event": "x", "m": {1: "v" * 1000}})
    assert len(odd["m"]) < logs.MAX_FIELD_CHARS + 40
