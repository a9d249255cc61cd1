"""The MRTR bridge (app/mrtr/bridge.py) against a scripted upstream: a request of
the server mid-call becomes `input_required` with a sealed `requestState`; the
retry's answer goes upstream as the JSON-RPC response, on the same exchange,
and the call's result comes back; a state that is not ours is refused."""

from __future__ import annotations

import os
from typing import Any

from app.cluster.sealing import Sealer
from app.mrtr.state import open_state, seal_state
from tests.seam_fake import (
    AwaitReply,
    Play,
    Script,
    ScriptedTransport,
    result,
    server_request,
)
from tests.unit.seam_calls import Rig, gateway_rig, modern_call

ELICITATION = {"elicitation": {}}
ASK = server_request(
    "elicitation/create",
    {
        "message": "Your GitHub login?",
        "requestedSchema": {"type": "object", "properties": {"login": {"type": "string"}}},
    },
    ident="ask-login",
)
LOGIN = {"action": "accept", "content": {"login": "octocat"}}


def greeting(play: Play) -> dict[str, Any]:
    """The tool's result, built from the answer it got."""
    login = play.replies["ask-login"]["result"]["content"]["login"]
    return result({"content": [{"type": "text", "text": f"hello {login}"}]})


def script() -> Script:
    return Script(
        {"tools/list": [result({"tools": []})], "tools/call": [ASK, AwaitReply(), greeting]}
    )


ARGS = {"name": "login", "arguments": {"who": "me"}}


async def first_turn(rig: Rig) -> tuple[str, str]:
    """The first call, parked: its input request's key and the sealed state."""
    outs, state = await rig.run(modern_call("tools/call", ARGS, caps=ELICITATION))
    answer = outs[-1].message["result"]
    assert answer["resultType"] == "input_required", answer
    assert state.outcome == "input_required"
    ((key, asked),) = answer["inputRequests"].items()
    assert asked["method"] == "elicitation/create"
    assert asked["params"]["message"] == "Your GitHub login?"
    assert isinstance(answer["requestState"], str)
    return key, answer["requestState"]


def retry(key: str, state: str, args: dict[str, Any] = ARGS, rid: int = 2) -> Any:
    params = {**args, "inputResponses": {key: LOGIN}, "requestState": state}
    return modern_call("tools/call", params, rid=rid, caps=ELICITATION)


async def test_a_question_mid_call_is_parked_and_the_retry_completes_the_same_call() -> None:
    transport = ScriptedTransport(script())
    async with gateway_rig(transport, bridged=True) as rig:
        key, state = await first_turn(rig)
        # Parked: nothing answered upstream yet, the call's stream still open.
        assert transport.record.responses() == []
        (call_exchange,) = [
            e for e in transport.record.exchanges if e.request["method"] == "tools/call"
        ]
        assert not call_exchange.closed
        outs, done = await rig.run(retry(key, state))
    answer = outs[-1].message
    assert answer["id"] == 2
    assert answer["result"]["resultType"] == "complete"
    assert answer["result"]["content"] == [{"type": "text", "text": "hello octocat"}]
    assert done.outcome == "ok"
    # The client's answer went upstream as the response to the server's request,
    # on the session (lane) the call runs on; the call itself was sent once.
    (reply,) = transport.record.responses()
    assert reply == {"jsonrpc": "2.0", "id": "ask-login", "result": LOGIN}
    (call,) = transport.record.sent_requests("tools/call")
    replies = [s for s in transport.record.sent if s.kind == "respond"]
    assert replies[0].session == call.session
    assert call_exchange.closed


async def test_a_tampered_state_is_refused_and_the_parked_call_still_completes() -> None:
    transport = ScriptedTransport(script())
    async with gateway_rig(transport, bridged=True) as rig:
        key, state = await first_turn(rig)
        flipped = state[:-2] + ("A" if state[-2] != "A" else "B") + state[-1]
        outs, refused = await rig.run(retry(key, flipped))
        error = outs[-1].message["error"]
        assert (error["code"], outs[-1].status) == (-32602, 400)
        assert "could not be verified" in error["message"]
        assert refused.outcome == "rejected"
        assert transport.record.responses() == []  # nothing reached the upstream
        outs, _ = await rig.run(retry(key, state, rid=3))
    assert outs[-1].message["result"]["content"][0]["text"] == "hello octocat"
    assert len(transport.record.sent_requests("tools/call")) == 1


async def test_a_state_sealed_by_another_gateway_is_refused() -> None:
    transport = ScriptedTransport(script())
    async with gateway_rig(transport, bridged=True) as rig:
        key, state = await first_turn(rig)
        claims = open_state(rig.sealer, state)
        assert claims is not None
        foreign = seal_state(Sealer([os.urandom(32)]), claims)
        outs, _ = await rig.run(retry(key, foreign))
        error = outs[-1].message["error"]
        assert error["code"] == -32602 and "could not be verified" in error["message"]
        assert transport.record.responses() == []
    # The gateway's shutdown ends the parked call: the question answered "cancel",
    # the call cancelled upstream.
    assert transport.record.responses() == [
        {"jsonrpc": "2.0", "id": "ask-login", "result": {"action": "cancel"}}
    ]
    assert len(transport.record.notifications("notifications/cancelled")) == 1


async def test_a_state_presented_with_other_arguments_is_refused() -> None:
    transport = ScriptedTransport(script())
    async with gateway_rig(transport, bridged=True) as rig:
        key, state = await first_turn(rig)
        other = {"name": "login", "arguments": {"who": "someone else"}}
        outs, _ = await rig.run(retry(key, state, other))
        error = outs[-1].message["error"]
        assert error["code"] == -32602 and "does not belong to this request" in error["message"]
        assert transport.record.responses() == []


async def test_a_question_the_caller_cannot_answer_ends_the_call_with_32021() -> None:
    sampling = server_request("sampling/createMessage", {"messages": [], "maxTokens": 5})
    transport = ScriptedTransport(
        Script({"tools/list": [result({"tools": []})], "tools/call": [sampling, AwaitReply()]})
    )
    async with gateway_rig(transport, bridged=True) as rig:
        outs, state = await rig.run(modern_call("tools/call", ARGS, caps=ELICITATION))
    error = outs[-1].message["error"]
    assert error["code"] == -32021, error
    assert state.outcome == "missing_capability"
    # Cancelled upstream first, then the server's request refused: never left waiting.
    kinds = [(s.kind, s.message.get("method")) for s in transport.record.sent[-2:]]
    assert kinds == [("notify", "notifications/cancelled"), ("respond", None)]
    assert "error" in transport.record.responses()[0]
