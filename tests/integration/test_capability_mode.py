"""MCP_SHIM_UPSTREAM_CLIENT_CAPABILITIES=caller|all against a legacy server that
checks what the client declared before asking (the fixture's
`sample_if_declared`: samples if `sampling` was declared at initialize, else a
generic tool error).

2026-07-28 basic/index: if processing a request requires a capability the client
has not declared, the server MUST answer -32021 MissingRequiredClientCapability
with `data.requiredCapabilities`. With `caller` (the default) the upstream
session declares what the caller declared, so this server refuses with its own
generic error; with `all` it declares every input capability, the server asks,
and the gateway answers -32021 for what the caller lacks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.recording_proxy import RecordingProxy
from tests.schema import SPEC, check_modern_answer, check_modern_error


@pytest.fixture(scope="module")
def back(legacy_url: str) -> Iterator[RecordingProxy]:
    with RecordingProxy(legacy_url) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def caller_mode(back: RecordingProxy, logs_dir: Path) -> Iterator[str]:
    with procs.gateway(
        back.url, procs.free_port(), log_path=logs_dir / "gateway-caps-caller.log"
    ) as base:
        yield base


@pytest.fixture(scope="module")
def all_mode(back: RecordingProxy, logs_dir: Path) -> Iterator[str]:
    env = {"MCP_SHIM_UPSTREAM_CLIENT_CAPABILITIES": "all"}
    with procs.gateway(
        back.url, procs.free_port(), env, log_path=logs_dir / "gateway-caps-all.log"
    ) as base:
        yield base


def call(base: str, capabilities: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    message = wire.body(
        "tools/call",
        {"name": "sample_if_declared", "arguments": {}},
        meta={wire.META_CAPABILITIES: capabilities},
    )
    with httpx.Client(timeout=30.0) as client:
        response = wire.post(client, base + "/mcp", message, wire.headers_for(message))
    return response.status_code, wire.answer_messages(response)[-1]


def initialize_capabilities(back: RecordingProxy, mark: int) -> list[dict[str, Any]]:
    return [r.body["params"]["capabilities"] for r in back.since(mark) if r.method == "initialize"]


def test_caller_mode_gets_the_servers_generic_refusal(
    caller_mode: str, back: RecordingProxy
) -> None:
    mark = back.mark()
    status, answer = call(caller_mode, {})
    assert status == 200
    check_modern_answer(SPEC, "tools/call", answer)
    assert answer["result"]["isError"] is True
    assert "does not support" in answer["result"]["content"][0]["text"]
    assert initialize_capabilities(back, mark) == [{}]


def test_all_mode_turns_the_question_into_missing_capability(
    all_mode: str, back: RecordingProxy
) -> None:
    mark = back.mark()
    status, answer = call(all_mode, {})
    # The server now asks; the caller never declared sampling: -32021, HTTP 400.
    assert status == 400, answer
    check_modern_error(SPEC, answer)
    assert answer["error"]["code"] == -32021
    assert answer["error"]["data"]["requiredCapabilities"] == {"sampling": {}}
    (declared,) = initialize_capabilities(back, mark)
    # Every input capability, in the offered (2025-11-25) form.
    assert set(declared) == {"elicitation", "sampling", "roots"}
    assert "tools" in declared["sampling"]
    # The upstream's question was answered with a refusal, not left waiting.
    reply = back.wait_for(
        lambda r: isinstance(r.body, dict) and "method" not in r.body and "error" in r.body,
        since=mark,
    )
    assert reply.body["error"]["code"] == -32601


def test_all_mode_a_caller_with_sampling_is_asked(all_mode: str) -> None:
    status, answer = call(all_mode, {"sampling": {}})
    assert status == 200, answer
    assert answer["result"]["resultType"] == "input_required"
    (request,) = answer["result"]["inputRequests"].values()
    assert request["method"] == "sampling/createMessage"


def test_all_mode_shares_one_session_across_capability_sets(
    all_mode: str, back: RecordingProxy
) -> None:
    # Every caller's upstream set is the same input set: callers that differ
    # only in input capabilities land on one pooled session.
    with httpx.Client(timeout=30.0) as client:

        def tools_list(capabilities: dict[str, Any]) -> int:
            message = wire.body("tools/list", meta={wire.META_CAPABILITIES: capabilities})
            return wire.post(
                client, all_mode + "/mcp", message, wire.headers_for(message)
            ).status_code

        assert tools_list({}) == 200  # the pooled session exists from here on
        mark = back.mark()
        assert tools_list({"roots": {}}) == 200
        assert tools_list({"elicitation": {"url": {}}, "sampling": {}}) == 200
    assert initialize_capabilities(back, mark) == []
