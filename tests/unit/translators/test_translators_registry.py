"""The version registry: order, lookup, features folded from the deltas, and
every method set and error table checked against the spec's schema.json."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.unit.conftest import Spec
from translators import registry
from translators._base import Steps
from translators.registry import (
    LATEST_LEGACY,
    LATEST_MODERN,
    Era,
    Version,
    draft_versions,
    get_version,
    known_versions,
    legacy_versions,
    modern_versions,
)

TRANSLATORS = Path(registry.__file__).resolve().parent
PUBLISHED = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
ORDER = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "DRAFT-2026-v1", "2026-07-28"]


def v(name: str) -> Version:
    version = get_version(name)
    assert version is not None, name
    return version


# ---------------------------------------------------------------------------
# Order and lookup
# ---------------------------------------------------------------------------


def test_versions_in_order() -> None:
    assert [x.name for x in known_versions()] == ORDER
    assert [x.index for x in known_versions()] == list(range(len(ORDER)))
    # The order is the registry's, not the strings': "DRAFT-..." sorts after
    # "2026-07-28" as a string, and the draft comes before it.
    assert sorted(ORDER) != ORDER


def test_eras_and_latest() -> None:
    assert [x.name for x in legacy_versions()] == ORDER[:4]
    assert [x.name for x in draft_versions()] == ["DRAFT-2026-v1"]
    assert [x.name for x in modern_versions()] == ["2026-07-28"]
    assert LATEST_MODERN is v("2026-07-28")
    assert LATEST_LEGACY is v("2025-11-25")
    assert v("DRAFT-2026-v1").era is Era.DRAFT


@pytest.mark.parametrize(
    "name",
    [
        "2099-01-01",
        "1900-01-01",
        "2025-06-18 ",
        " 2025-06-18",
        "2025-6-18",
        "2026-07-28\n",
        "draft",  # the conformance suite's CLI alias, rejected on the wire
        "DRAFT-2025-v1",  # pre-release names of 2025-11-25 (stateful)
        "DRAFT-2025-v3",
        "DRAFT-2026-v2",
        "draft-2026-v1",
        "",
        "latest",
    ],
)
def test_unknown_version_names(name: str) -> None:
    assert get_version(name) is None


@pytest.mark.parametrize(
    "value", [None, 20250618, 2025.0618, b"2025-06-18", ["2025-06-18"], {"v": 1}, True]
)
def test_non_strings_are_unknown(value: Any) -> None:
    assert get_version(value) is None


def test_every_wire_name_resolves() -> None:
    for version in known_versions():
        for name in version.wire_names:
            assert get_version(name) is version
    assert v("DRAFT-2026-v1").wire_names == ("DRAFT-2026-v1",)


def test_lookup_needs_an_exact_string() -> None:
    """A str subclass equal to everything must not match: lookup hashes, never compares order."""

    class Sneaky(str):
        __hash__ = str.__hash__

        def __eq__(self, other: object) -> bool:
            return True

        def __lt__(self, other: object) -> bool:
            raise AssertionError("versions are never compared as strings")

        __gt__ = __le__ = __ge__ = __lt__

    assert get_version(Sneaky("2099-01-01")) is None


def test_versions_hashable_and_equal_by_identity_of_name() -> None:
    assert len({*known_versions(), *known_versions()}) == len(ORDER)
    assert v("2025-06-18") == v("2025-06-18")
    assert v("2025-06-18") != v("2025-11-25")


# ---------------------------------------------------------------------------
# Features folded from the deltas
# ---------------------------------------------------------------------------

# name: (batching, protocol_version_header, sessions, server_initiated_requests,
#        result_type, per_request_meta)
FLAGS = {
    "2024-11-05": (True, False, True, True, False, False),
    "2025-03-26": (True, False, True, True, False, False),
    "2025-06-18": (False, True, True, True, False, False),
    "2025-11-25": (False, True, True, True, False, False),
    "DRAFT-2026-v1": (False, True, False, False, True, True),
    "2026-07-28": (False, True, False, False, True, True),
}


@pytest.mark.parametrize("name", ORDER)
def test_feature_flags(name: str) -> None:
    f = v(name).features
    got = (
        f.batching,
        f.protocol_version_header,
        f.sessions,
        f.server_initiated_requests,
        f.result_type,
        f.per_request_meta,
    )
    assert got == FLAGS[name]


STANDARD = {
    "PARSE_ERROR": -32700,
    "INVALID_REQUEST": -32600,
    "METHOD_NOT_FOUND": -32601,
    "INVALID_PARAMS": -32602,
    "INTERNAL_ERROR": -32603,
}
ERROR_TABLES = {
    "2024-11-05": STANDARD | {"RESOURCE_NOT_FOUND": -32002},
    "2025-03-26": STANDARD | {"RESOURCE_NOT_FOUND": -32002},
    "2025-06-18": STANDARD | {"RESOURCE_NOT_FOUND": -32002},
    "2025-11-25": STANDARD | {"RESOURCE_NOT_FOUND": -32002, "URL_ELICITATION_REQUIRED": -32042},
    "DRAFT-2026-v1": STANDARD
    | {
        "HEADER_MISMATCH": -32001,
        "MISSING_REQUIRED_CLIENT_CAPABILITY": -32003,
        "UNSUPPORTED_PROTOCOL_VERSION": -32004,
    },
    "2026-07-28": STANDARD
    | {
        "HEADER_MISMATCH": -32020,
        "MISSING_REQUIRED_CLIENT_CAPABILITY": -32021,
        "UNSUPPORTED_PROTOCOL_VERSION": -32022,
    },
}


@pytest.mark.parametrize("name", ORDER)
def test_error_tables(name: str) -> None:
    assert dict(v(name).features.error_codes) == ERROR_TABLES[name]


def test_modern_error_policy() -> None:
    f = LATEST_MODERN.features
    assert f.reserved_error_range == (-32099, -32020)
    # basic/index "Error Codes": -32002 and -32042 "remain reserved and will not be reused".
    assert dict(f.retired_error_codes) == {
        -32002: "RESOURCE_NOT_FOUND",
        -32042: "URL_ELICITATION_REQUIRED",
    }
    assert v("2025-11-25").features.reserved_error_range is None


def test_cacheable_and_mrtr_methods() -> None:
    modern = LATEST_MODERN.features
    assert modern.cacheable_methods == {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
    assert modern.mrtr_methods == {"tools/call", "prompts/get", "resources/read"}
    # The draft's DiscoverResult carried no caching hints.
    assert v("DRAFT-2026-v1").features.cacheable_methods == modern.cacheable_methods - {
        "server/discover"
    }
    for legacy in legacy_versions():
        assert not legacy.features.cacheable_methods
        assert not legacy.features.mrtr_methods


def test_modern_method_set_examples() -> None:
    f = LATEST_MODERN.features
    for gone in (
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "tasks/get",
    ):
        assert gone not in f.client_requests
    assert {"server/discover", "subscriptions/listen"} <= f.client_requests
    assert f.server_requests == {"elicitation/create", "sampling/createMessage", "roots/list"}


# ---------------------------------------------------------------------------
# Method sets and error codes against schema.json
# ---------------------------------------------------------------------------


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        out = [node["$ref"].rsplit("/", 1)[-1]] if "$ref" in node else []
        for value in node.values():
            out += _refs(value)
        return out
    if isinstance(node, list):
        return [r for item in node for r in _refs(item)]
    return []


def _union_methods(spec: Spec, version: str, union: str) -> frozenset[str]:
    """Method constants of the message types a union definition lists."""
    defs = spec.definitions(version)
    node = defs[union]
    members = (
        _refs(node.get("anyOf", node.get("oneOf", [])))
        if ("anyOf" in node or "oneOf" in node)
        else [union]
    )
    methods = set()
    for name in members:
        const = defs[name].get("properties", {}).get("method", {}).get("const")
        assert const is not None, (version, union, name)
        methods.add(const)
    return frozenset(methods)


@pytest.mark.parametrize("version", PUBLISHED)
def test_method_sets_match_schema(version: str, spec: Spec) -> None:
    f = v(version).features
    defs = spec.definitions(version)
    assert f.client_requests == _union_methods(spec, version, "ClientRequest")
    assert f.client_notifications == _union_methods(spec, version, "ClientNotification")
    assert f.server_notifications == _union_methods(spec, version, "ServerNotification")
    # 2026-07-28 has no ServerRequest: the server's requests are InputRequests.
    server_union = "ServerRequest" if "ServerRequest" in defs else "InputRequest"
    assert f.server_requests == _union_methods(spec, version, server_union)


@pytest.mark.parametrize("version", PUBLISHED)
def test_every_method_const_is_known(version: str, spec: Spec) -> None:
    """No definition with a method constant escapes the four sets."""
    f = v(version).features
    known = f.client_requests | f.server_requests | f.notifications
    consts = {
        d.get("properties", {}).get("method", {}).get("const")
        for d in spec.definitions(version).values()
    } - {None}
    assert consts == known


def test_cacheable_methods_match_schema(spec: Spec) -> None:
    defs = spec.definitions("2026-07-28")
    result_to_method = {
        "DiscoverResult": "server/discover",
        "ListToolsResult": "tools/list",
        "ListPromptsResult": "prompts/list",
        "ListResourcesResult": "resources/list",
        "ListResourceTemplatesResult": "resources/templates/list",
        "ReadResourceResult": "resources/read",
        "CallToolResult": "tools/call",
        "GetPromptResult": "prompts/get",
        "CompleteResult": "completion/complete",
        "SubscriptionsListenResult": "subscriptions/listen",
    }
    cacheable = {
        method
        for name, method in result_to_method.items()
        if {"ttlMs", "cacheScope"} <= set(defs[name].get("required", []))
    }
    assert cacheable == LATEST_MODERN.features.cacheable_methods
    # every ServerResult member is covered by the map above (or is generic)
    members = set(_refs(defs["ServerResult"])) - {"Result", "InputRequiredResult"}
    assert members == set(result_to_method)


def test_mrtr_methods_match_schema(spec: Spec) -> None:
    defs = spec.definitions("2026-07-28")
    mrtr = set()
    for d in defs.values():
        const = d.get("properties", {}).get("method", {}).get("const")
        params = d.get("properties", {}).get("params", {})
        if const is None or "$ref" not in params:
            continue
        target = defs[params["$ref"].rsplit("/", 1)[-1]]
        if "inputResponses" in target.get("properties", {}):
            mrtr.add(const)
    assert mrtr == LATEST_MODERN.features.mrtr_methods


def _error_consts(node: Any) -> set[int]:
    found: set[int] = set()
    if isinstance(node, dict):
        code = node.get("properties", {}).get("code", {})
        if isinstance(code, dict) and isinstance(code.get("const"), int):
            found.add(code["const"])
        for value in node.values():
            found |= _error_consts(value)
    elif isinstance(node, list):
        for item in node:
            found |= _error_consts(item)
    return found


def test_modern_error_codes_match_schema(spec: Spec) -> None:
    consts = _error_consts(spec.definitions("2026-07-28"))
    assert consts == set(LATEST_MODERN.features.error_codes.values())


@pytest.mark.parametrize("version", PUBLISHED)
def test_schema_error_codes_are_in_tables(version: str, spec: Spec) -> None:
    consts = _error_consts(spec.definitions(version))
    assert consts <= set(v(version).features.error_codes.values())


def test_schema_validation_is_real(spec: Spec) -> None:
    """The validators catch what the translators must add or remove."""
    with pytest.raises(jsonschema.ValidationError):
        spec.validate("2026-07-28", "CallToolResult", {"content": []})  # no resultType
    with pytest.raises(jsonschema.ValidationError):
        spec.validate("2026-07-28", "ListToolsResult", {"resultType": "complete", "tools": []})
    with pytest.raises(jsonschema.ValidationError):
        spec.validate("2025-11-25", "CallToolResult", {"content": [], "structuredContent": [1]})
    assert spec.schema("2025-06-18")["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert spec.schema("2026-07-28")["$schema"] == "https://json-schema.org/draft/2020-12/schema"


# ---------------------------------------------------------------------------
# Module structure and purity
# ---------------------------------------------------------------------------

VERSION_MODULES = [
    "v2024_11_05",
    "v2025_03_26",
    "v2025_06_18",
    "v2025_11_25",
    "v2026_draft",
    "v2026_07_28",
]


def test_one_module_per_version_in_registry_order() -> None:
    for name, module_name, version in zip(ORDER, VERSION_MODULES, known_versions(), strict=True):
        module = importlib.import_module(f"translators.{module_name}")
        assert module.NAME == name == version.name
        assert module.DELTA.name == name
        assert isinstance(module.STEPS, Steps)
        assert registry.steps_of(version) is module.STEPS


def test_draft_module_holds_its_identifiers() -> None:
    module = importlib.import_module("translators.v2026_draft")
    assert module.IDENTIFIERS == ("DRAFT-2026-v1",)
    for name in module.IDENTIFIERS:
        assert get_version(name) is v("DRAFT-2026-v1")


FORBIDDEN = {"fastapi", "starlette", "httpx", "uvicorn", "structlog", "anyio", "asyncio", "aiohttp"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted(TRANSLATORS.glob("*.py")), ids=lambda p: p.name)
def test_translators_import_only_stdlib(path: Path) -> None:
    imported = _imports(path)
    assert not imported & FORBIDDEN, f"{path.name} imports {imported & FORBIDDEN}"
    outside = {
        n
        for n in imported
        if n not in sys.stdlib_module_names and n not in {"translators", "__future__"}
    }
    assert not outside, f"{path.name} imports non-stdlib {outside}"


def test_forbidden_import_scan_catches_aliases(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio as aio\nfrom httpx import AsyncClient\n", encoding="utf-8")
    assert _imports(bad) >= {"asyncio", "httpx"}
