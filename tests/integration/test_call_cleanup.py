"""A call's clean-up runs in the call, not later in a task of the garbage
collector's making.

An async generator abandoned unfinished (an `async for` left by `return` or
by the consumer's close) is closed by the event loop's finalizer hook, which
schedules its `aclose()` as a new task (asyncio's `sys.set_asyncgen_hooks`).
For the gateway that meant: a task and a thread-safe wake-up of the loop per
call (bench/asyncio_costs.py), and the upstream exchange closed
after its session had gone back to the pool. Every generator of ours on a
call's path is closed where it was opened; the hook must see none of them.

The gateway runs in this process on the stdlib loop (whose hook the test can
watch), in front of the real mcp 1.x fixture.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.integration import mrtr_wire as mw
from tests.integration import wire
from tests.integration.test_hardening import gateway_in_process, tool_call

PROJECT_ROOTS = ("/app/", "/translators/")


@pytest.fixture
def finalized(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The qualified names of our async generators the loop's hook closed."""
    seen: list[str] = []
    original = asyncio.base_events.BaseEventLoop._asyncgen_finalizer_hook

    def hook(self: asyncio.base_events.BaseEventLoop, agen: Any) -> None:
        code = agen.ag_code
        if any(root in code.co_filename for root in PROJECT_ROOTS):
            seen.append(code.co_qualname)
        original(self, agen)

    monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "_asyncgen_finalizer_hook", hook)
    return seen


def _modern_calls(url: str) -> None:
    with httpx.Client(timeout=15) as client:
        for rid, accept in enumerate(
            ("application/json, text/event-stream", "text/event-stream", "application/json")
        ):
            content, headers = tool_call("echo", {"text": f"call {rid}"}, rid=rid)
            headers["accept"] = accept
            response = client.post(url, content=content, headers=headers)
            assert response.status_code == 200, response.text[:300]
            messages = wire.answer_messages(response)
            assert messages[-1]["result"]["content"] == [{"type": "text", "text": f"call {rid}"}]
        discover = wire.body("server/discover", {}, rid="d")
        response = client.post(
            url, content=json.dumps(discover), headers=wire.headers_for(discover)
        )
        assert response.status_code == 200, response.text[:300]
        assert "result" in wire.answer_messages(response)[-1]


def _legacy_calls(url: str, calls: list[tuple[str, dict[str, Any], str]]) -> None:
    """A 2025-06-18 client of the gateway's legacy front, raw over HTTP: each
    (tool, arguments, text the answer holds)."""
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "cleanup-test", "version": "1"},
        },
    }
    with httpx.Client(timeout=15) as client:
        response = client.post(url, json=init, headers=headers)
        assert response.status_code == 200, response.text[:300]
        session = response.headers["mcp-session-id"]
        headers = {**headers, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert client.post(url, json=note, headers=headers).status_code == 202
        for rid, (tool, arguments, text) in enumerate(calls, start=1):
            call = {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
            response = client.post(url, json=call, headers=headers)
            assert response.status_code == 200, response.text[:300]
            final = wire.answer_messages(response)[-1]
            assert final["id"] == rid and text in json.dumps(final["result"]), final


def _mrtr_calls(url: str) -> None:
    # A call the upstream answers with elicitation, sampling and roots requests:
    # input_required, then the retry that completes it (the MRTR bridge's path).
    base = url.removesuffix("/mcp")
    args = {"elicitations": 1, "samplings": 1, "roots": 1, "keyed": True}
    with httpx.Client(timeout=15) as client:
        answer, keys = mw.answer_rounds(client, iter([base, base]), "ask_all_at_once", args)
    assert keys and answer.final.get("result", {}).get("content"), answer.final


def test_no_generator_of_a_call_is_left_to_the_loops_finalizer(
    legacy_url: str, finalized: list[str]
) -> None:
    with gateway_in_process(legacy_url, loop="asyncio") as (url, _gateway):
        _modern_calls(url)
        _legacy_calls(url, [("echo", {"text": "one"}, "one"), ("echo", {"text": "two"}, "two")])
        _mrtr_calls(url)
    assert finalized == []


def test_nor_in_front_of_a_modern_upstream(modern_url: str, finalized: list[str]) -> None:
    # A legacy client's calls translated for a 2026-07-28 server (mcp 2.x), one
    # of them streaming progress before its answer.
    with gateway_in_process(modern_url, loop="asyncio") as (url, _gateway):
        _legacy_calls(
            url,
            [
                ("test_simple_text", {}, "simple text response"),
                ("test_tool_with_progress", {}, "content"),
                ("test_simple_text", {}, "simple text response"),
            ],
        )
    assert finalized == []
