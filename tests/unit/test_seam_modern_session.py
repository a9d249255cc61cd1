"""The modern session (app/upstream/modern/session.py) against a scripted modern
upstream: a legacy client's session in front of a stateless 2026-07-28 server.
Each request goes up with its own `_meta` and standard headers; an
`input_required` result becomes server requests on the call's exchange, the
client's answers go back up in `inputResponses` with the `requestState`."""

from __future__ import annotations

from typing import Any

from app.upstream.modern.session import ModernSession
from tests.seam_fake import (
    Script,
    ScriptedModernUpstream,
    drain,
    notification,
    result,
    text_result,
)
from translators.registry import get_version

MODERN = get_version("2026-07-28")
LEGACY = get_version("2025-11-25")
assert MODERN is not None and LEGACY is not None
NO_TOOLS = result({"resultType": "complete", "tools": []})


def session_on(upstream: ScriptedModernUpstream, caps: dict[str, Any]) -> ModernSession:
    # Built directly: `ModernTransport.open_session` would first probe the
    # upstream's era (app/upstream/sessions/era.py) over HTTP.
    return ModernSession(
        upstream,  # type: ignore[arg-type]  # the scripted server stands for ModernHttpUpstream
        modern=MODERN,
        legacy=LEGACY,
        client_capabilities=caps,
        client_info={"name": "old-client", "version": "0.1"},
        authorization="Bearer t",
        server_capabilities={"tools": {}},
    )


def call(rid: Any, name: str = "greet") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}},
    }


def complete(text: str) -> dict[str, Any]:
    answer = text_result(text)
    answer["result"] = {"resultType": "complete", **answer["result"]}
    return answer


async def test_a_request_goes_up_stateless_and_its_answer_comes_down() -> None:
    logged = notification("notifications/message", {"level": "info", "data": "hi"})
    upstream = ScriptedModernUpstream(
        Script({"tools/list": [NO_TOOLS], "tools/call": [logged, complete("hello")]})
    )
    session = session_on(upstream, {"elicitation": {}})
    messages = await drain(await session.request(call(4)))
    note, answer = messages
    assert note["method"] == "notifications/message"
    # Down in the legacy revision: the client's id, no resultType.
    assert answer == {
        "jsonrpc": "2.0",
        "id": 4,
        "result": {"content": [{"type": "text", "text": "hello"}], "isError": False},
    }
    (sent,) = upstream.record.sent_requests("tools/call")
    meta = sent.message["params"]["_meta"]
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {"elicitation": {}}
    assert sent.headers["mcp-protocol-version"] == "2026-07-28"
    assert sent.headers["mcp-method"] == "tools/call"
    assert sent.headers["mcp-name"] == "greet"
    assert sent.headers["authorization"] == "Bearer t"


async def test_input_required_becomes_server_requests_and_the_call_is_sent_again() -> None:
    ask = {
        "method": "elicitation/create",
        "params": {"message": "Name?", "requestedSchema": {"type": "object", "properties": {}}},
    }
    first = result(
        {"resultType": "input_required", "inputRequests": {"who": ask}, "requestState": "s-1"}
    )
    upstream = ScriptedModernUpstream(
        Script({"tools/list": [NO_TOOLS]}).on("tools/call", [first], [complete("hello Ada")])
    )
    session = session_on(upstream, {"elicitation": {}})
    exchange = await session.request(call("c-9"))
    messages = aiter(exchange)
    question = await anext(messages)
    # A real server-to-client request, with an id of the gateway's.
    assert question["method"] == "elicitation/create"
    assert question["params"]["message"] == "Name?"
    accepted = {"action": "accept", "content": {"name": "Ada"}}
    await session.respond({"jsonrpc": "2.0", "id": question["id"], "result": accepted})
    final = await anext(messages)
    await exchange.aclose()
    assert final["id"] == "c-9"
    assert final["result"]["content"][0]["text"] == "hello Ada"
    # The second round carries the answer under the server's key, and its state.
    rounds = upstream.record.requests("tools/call")
    assert len(rounds) == 2
    assert "inputResponses" not in rounds[0]["params"]
    assert rounds[1]["params"]["inputResponses"] == {"who": accepted}
    assert rounds[1]["params"]["requestState"] == "s-1"


async def test_an_input_request_the_client_did_not_declare_ends_the_call() -> None:
    sampling = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
    first = result({"resultType": "input_required", "inputRequests": {"s": sampling}})
    upstream = ScriptedModernUpstream(Script({"tools/list": [NO_TOOLS], "tools/call": [first]}))
    session = session_on(upstream, {"elicitation": {}})
    (answer,) = await drain(await session.request(call(1)))
    assert answer["error"]["data"] == {"requiredCapability": "sampling"}
    # Not retried upstream.
    assert len(upstream.record.requests("tools/call")) == 1


async def test_ping_and_set_level_are_answered_here() -> None:
    upstream = ScriptedModernUpstream()
    session = session_on(upstream, {})
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    level = {"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "info"}}
    assert await drain(await session.request(ping)) == [{"jsonrpc": "2.0", "id": 1, "result": {}}]
    await drain(await session.request(level))
    assert upstream.record.sent == []
    # The level rides on the next request instead (2026-07-28: per request).
    upstream.script.on("prompts/list", [result({"resultType": "complete", "prompts": []})])
    await drain(await session.request({"jsonrpc": "2.0", "id": 3, "method": "prompts/list"}))
    (sent,) = upstream.record.requests("prompts/list")
    assert sent["params"]["_meta"]["io.modelcontextprotocol/logLevel"] == "info"
