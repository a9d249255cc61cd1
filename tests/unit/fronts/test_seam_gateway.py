"""The gateway (app/fronts/modern/gateway.py) against a scripted upstream session: one modern
call end to end, with nothing but the seam underneath (tests/seam_fake.py)."""

from __future__ import annotations

from typing import Any

from app.upstream.errors import SessionExpired, UpstreamUnavailable
from tests.seam_fake import (
    Play,
    Script,
    ScriptedTransport,
    Stall,
    error,
    notification,
    result,
    text_result,
)
from tests.unit.seam_calls import gateway_rig, modern_call

TOOLS = result({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]})


def progress(play: Play) -> dict[str, Any]:
    """The upstream's progress, on the token the gateway put on its request."""
    token = play.request["params"]["_meta"]["progressToken"]
    return notification("notifications/progress", {"progressToken": token, "progress": 1})


async def test_a_call_end_to_end_is_translated_both_ways() -> None:
    script = Script({"tools/list": [TOOLS], "tools/call": [progress, text_result("hi")]})
    transport = ScriptedTransport(script)
    async with gateway_rig(transport) as rig:
        call = modern_call(
            "tools/call",
            {"name": "echo", "arguments": {"text": "hi"}},
            rid="c-1",
            meta={"progressToken": "mine"},
        )
        outs, state = await rig.run(call)
    # Upstream: one initialize in the offered legacy version, then the call in it,
    # under an id of the gateway's and with the progress token the gateway chose.
    assert [i["params"]["protocolVersion"] for i in transport.initializes] == ["2025-11-25"]
    (sent,) = transport.record.requests("tools/call")
    assert sent["params"]["name"] == "echo" and sent["params"]["arguments"] == {"text": "hi"}
    assert isinstance(sent["id"], int)
    assert sent["params"]["_meta"] == {"progressToken": sent["id"]}
    # Client: its own progress token back, then the answer with its id and resultType.
    note, answer = outs
    assert note.message["params"] == {"progressToken": "mine", "progress": 1}
    assert not note.final
    assert answer.final and answer.status == 200
    assert answer.message["id"] == "c-1"
    assert answer.message["result"]["resultType"] == "complete"
    assert answer.message["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert (state.outcome, state.upstream_version) == ("ok", "2025-11-25")
    # The exchange was closed, drained (its connection can serve the next request).
    call_exchange = next(e for e in transport.record.exchanges if e.request is sent)
    assert call_exchange.closed and call_exchange.drained


async def test_an_upstream_error_is_renumbered_for_the_modern_client() -> None:
    # 2025-11-25's resource not found (-32002) is 2026-07-28's -32602 with data.uri.
    missing = error(-32002, "Resource not found", {"uri": "file:///nope"})
    transport = ScriptedTransport(Script({"resources/read": [missing]}))
    async with gateway_rig(transport) as rig:
        outs, state = await rig.run(modern_call("resources/read", {"uri": "file:///nope"}))
    (answer,) = outs
    assert answer.message["error"] == {
        "code": -32602,
        "message": "Resource not found",
        "data": {"uri": "file:///nope"},
    }
    assert answer.status == 400
    assert state.outcome == "error -32602"


async def test_server_discover_is_answered_from_the_upstream_handshake() -> None:
    transport = ScriptedTransport(
        capabilities={"tools": {"listChanged": True}}, instructions="Be brief."
    )
    async with gateway_rig(transport) as rig:
        outs, _ = await rig.run(modern_call("server/discover"))
    discover = outs[0].message["result"]
    assert discover["resultType"] == "complete"
    assert discover["instructions"] == "Be brief."
    assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "scripted"
    assert "2026-07-28" in discover["supportedVersions"]
    # Nothing but the handshake went upstream.
    assert transport.record.sent == []


async def test_an_expired_session_is_reopened_once_and_the_call_runs_once() -> None:
    script = Script({"tools/list": [TOOLS], "tools/call": [text_result("done")]})
    transport = ScriptedTransport(script)
    async with gateway_rig(transport) as rig:
        await rig.run(modern_call("tools/call", {"name": "echo", "arguments": {}}, rid=1))
        transport.expire_sessions()  # the upstream restarted: 404 for the old session
        outs, state = await rig.run(
            modern_call("tools/call", {"name": "echo", "arguments": {}}, rid=2)
        )
    assert outs[-1].message["result"]["content"][0]["text"] == "done"
    assert state.outcome == "ok"
    assert len(transport.initializes) == 2
    # The second call met the 404 on the old session (its handler never ran),
    # then ran on the fresh one: once.
    calls = transport.record.sent_requests("tools/call")
    assert [(c.session, c.refused) for c in calls] == [(1, False), (1, True), (2, False)]
    assert [c.session for c in transport.record.ran("tools/call")] == [1, 2]


async def test_a_call_refused_as_expired_is_sent_once_more_never_a_third_time() -> None:
    expired = SessionExpired("404 for the session")
    # Expired at the call itself (its handler never ran), twice in a row.
    script = Script({"tools/list": [TOOLS]}).on("tools/call", expired, expired, [result({})])
    transport = ScriptedTransport(script)
    async with gateway_rig(transport) as rig:
        outs, state = await rig.run(modern_call("tools/call", {"name": "echo", "arguments": {}}))
    (answer,) = outs
    assert answer.message["error"]["code"] == -32603
    assert state.outcome == "SessionExpired"
    assert len(transport.record.requests("tools/call")) == 2
    assert transport.record.ran("tools/call") == []


async def test_a_call_that_breaks_mid_stream_is_not_sent_again() -> None:
    broken = UpstreamUnavailable("connection reset after the request was read")
    logged = notification("notifications/message", {"level": "info", "data": "working"})
    script = Script({"tools/list": [TOOLS], "tools/call": [logged, broken]})
    transport = ScriptedTransport(script)
    async with gateway_rig(transport) as rig:
        call = modern_call("tools/call", {"name": "echo", "arguments": {}})
        outs, state = await rig.run(call)
    answer = outs[-1]
    assert answer.status == 502 and answer.message["error"]["code"] == -32603
    assert "connection reset" in answer.message["error"]["message"]
    assert state.outcome == "UpstreamUnavailable"
    # It may have run: never sent twice.
    assert len(transport.record.requests("tools/call")) == 1
    assert len(transport.record.ran("tools/call")) == 1


async def test_a_stream_that_ends_without_an_answer_is_502() -> None:
    transport = ScriptedTransport(Script({"prompts/list": []}))
    async with gateway_rig(transport) as rig:
        outs, state = await rig.run(modern_call("prompts/list"))
    assert outs[-1].status == 502
    assert state.outcome == "upstream_closed"
    assert len(transport.record.requests("prompts/list")) == 1


async def test_the_deadline_cancels_the_upstream_call() -> None:
    # The upstream takes far longer than MCP_SHIM_CALL_DEADLINE_S.
    script = Script({"prompts/list": [Stall(60), result({"prompts": []})]})
    transport = ScriptedTransport(script)
    async with gateway_rig(transport, deadline_s=0.3) as rig:
        outs, state = await rig.run(modern_call("prompts/list"))
        await rig.gateway.aclose()  # the cancellation is sent in the background
    assert outs[-1].status == 504 and state.outcome == "deadline_exceeded"
    (cancelled,) = transport.record.notifications("notifications/cancelled")
    (sent,) = transport.record.requests("prompts/list")
    assert cancelled["params"]["requestId"] == sent["id"]
