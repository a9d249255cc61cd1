"""Behaviour of individual steps and helpers that the golden tables do not show."""

from __future__ import annotations

import json
from types import MappingProxyType

import pytest

from translators import translate
from translators._base import (
    EMPTY_FEATURES,
    Context,
    Delta,
    Era,
    Steps,
    add_cache_hints,
    change,
    meta_without,
    with_params,
    without,
)
from translators.registry import LATEST_LEGACY, LATEST_MODERN, Version, get_version

PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/clientInfo"
LOG = "io.modelcontextprotocol/logLevel"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


def v(name: str) -> Version:
    version = get_version(name)
    assert version is not None
    return version


def test_identity_steps_return_their_input() -> None:
    steps = Steps()
    msg = {"method": "x"}
    ctx = Context()
    assert steps.upgrade_request(msg, ctx) is msg
    assert steps.downgrade_result(msg, "x", ctx) is msg
    assert steps.upgrade_notification(msg) is msg
    assert steps.downgrade_client_capabilities(msg) is msg


def test_delta_fold() -> None:
    base = Delta(
        name="a",
        era=Era.LEGACY,
        batching=True,
        error_codes={"X": -1, "Y": -2},
        client_requests=change(add={"m1", "m2"}),
    ).apply(EMPTY_FEATURES)
    nxt = Delta(
        name="b",
        era=Era.LEGACY,
        error_codes={"Y": None, "Z": -3},
        retire_error_codes={-2: "Y"},
        client_requests=change(add={"m3"}, remove={"m1"}),
    ).apply(base)
    assert base.batching and nxt.batching  # unchanged flags are inherited
    assert dict(nxt.error_codes) == {"X": -1, "Z": -3}
    assert dict(nxt.retired_error_codes) == {-2: "Y"}
    assert nxt.client_requests == {"m2", "m3"}
    assert nxt.error_meaning(-2) == "Y"
    assert nxt.error_meaning(-3) == "Z"
    assert nxt.error_meaning(-9) is None


def test_legacy_request_gets_per_request_meta_from_context() -> None:
    ctx = Context(
        client_capabilities=MappingProxyType({"elicitation": {}, "roots": {"listChanged": True}}),
        client_info={"name": "legacy-client", "version": "2"},
        log_level="debug",
    )
    msg = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "t"}}
    out = translate.request(msg, v("2025-06-18"), LATEST_MODERN, ctx)
    assert out["params"]["_meta"] == {
        PV: "2026-07-28",
        CAPS: {"elicitation": {}, "roots": {}},  # upgraded along the chain
        INFO: {"name": "legacy-client", "version": "2"},
        LOG: "debug",
    }
    json.dumps(out)  # plain JSON: no mapping proxies leak out
    assert msg == {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "t"}}


def test_draft_gets_a_clientinfo_stand_in_and_2026_drops_it() -> None:
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    draft = translate.request(msg, LATEST_LEGACY, v("DRAFT-2026-v1"))
    assert draft["params"]["_meta"][INFO] == {"name": "unknown", "version": "unknown"}
    modern = translate.request(msg, LATEST_LEGACY, LATEST_MODERN)
    assert INFO not in modern["params"]["_meta"]


def test_existing_meta_is_not_overwritten_except_protocol_version() -> None:
    msg = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {"_meta": {CAPS: {"sampling": {}}, PV: "2025-11-25", "progressToken": "p"}},
    }
    out = translate.request(msg, LATEST_LEGACY, LATEST_MODERN, Context(client_capabilities={}))
    assert out["params"]["_meta"] == {
        PV: "2026-07-28",
        CAPS: {"sampling": {}},
        "progressToken": "p",
    }


def test_modern_capabilities_in_meta_follow_the_chain_between_stateless_versions() -> None:
    msg = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {"_meta": {PV: "2026-07-28", CAPS: {"extensions": {"x.example/e": {}}}}},
    }
    out = translate.request(msg, LATEST_MODERN, v("DRAFT-2026-v1"))
    assert out["params"]["_meta"][CAPS] == {"extensions": {"x.example/e": {}}}
    assert out["params"]["_meta"][PV] == "DRAFT-2026-v1"


def test_cache_hints_only_on_complete_results() -> None:
    ctx = Context(ttl_ms=5, cache_scope="public")
    pending = {"resultType": "input_required", "requestState": "s"}
    assert add_cache_hints(pending, "tools/list", {"tools/list"}, ctx) is pending
    done = {"resultType": "complete", "tools": []}
    assert add_cache_hints(done, "tools/list", {"tools/list"}, ctx) == done | {
        "ttlMs": 5,
        "cacheScope": "public",
    }
    assert add_cache_hints(done, "tools/call", {"tools/list"}, ctx) is done


def test_input_required_result_keeps_its_type_toward_modern() -> None:
    res = {"resultType": "input_required", "requestState": "abc"}
    out = translate.result(res, "resources/read", v("DRAFT-2026-v1"), LATEST_MODERN, Context())
    assert out == res


def test_discover_downgrade_without_server_info_uses_context() -> None:
    res = {"resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {}}
    out = translate.result(
        res,
        "server/discover",
        LATEST_MODERN,
        v("DRAFT-2026-v1"),
        Context(server_info={"name": "s", "version": "9"}),
    )
    assert out["serverInfo"] == {"name": "s", "version": "9"}
    out = translate.result(res, "server/discover", LATEST_MODERN, v("DRAFT-2026-v1"))
    assert out["serverInfo"] == {"name": "unknown", "version": "unknown"}


def test_discover_capabilities_are_translated_with_the_result() -> None:
    res = {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}, "extensions": {"x.example/e": {}}},
        "ttlMs": 1,
        "cacheScope": "public",
    }
    out = translate.result(res, "server/discover", LATEST_MODERN, LATEST_LEGACY)
    assert out["capabilities"] == {"tools": {}}


def test_server_info_not_duplicated() -> None:
    res = {"content": [], "_meta": {SERVER_INFO: {"name": "upstream", "version": "1"}}}
    out = translate.result(
        res,
        "tools/call",
        LATEST_LEGACY,
        LATEST_MODERN,
        Context(server_info={"name": "x", "version": "2"}),
    )
    assert out["_meta"][SERVER_INFO] == {"name": "upstream", "version": "1"}


@pytest.mark.parametrize(
    ("obj", "keys", "expected"),
    [
        ({"a": 1}, ("b",), {"a": 1}),
        ({"a": 1, "b": 2}, ("b",), {"a": 1}),
    ],
)
def test_without(obj: dict[str, int], keys: tuple[str, ...], expected: dict[str, int]) -> None:
    out = without(obj, keys)
    assert out == expected
    assert (out is obj) == (obj == expected)


def test_meta_without_drops_empty_meta() -> None:
    assert meta_without({"_meta": {"k": 1}, "x": 1}, ("k",)) == {"x": 1}
    obj = {"_meta": {"k": 1}}
    assert meta_without(obj, ("other",)) is obj


def test_with_params_removes_empty_params() -> None:
    assert with_params({"method": "m", "params": {"a": 1}}, {}) == {"method": "m"}
    msg = {"method": "m"}
    assert with_params(msg, None) is msg


def test_wrapped_error_keeps_the_original_exactly() -> None:
    original = {"code": -32042, "message": "need url", "data": {"elicitations": []}}
    out = translate.error(original, LATEST_LEGACY, LATEST_MODERN)
    assert out == {
        "code": -32603,
        "message": "need url",
        "data": {translate.ORIGINAL_ERROR_KEY: original},
    }
