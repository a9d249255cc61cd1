"""The forwarder every modern call to a legacy upstream shares (app/mrtr/forwarder.py):
what it relays of a call's notifications, and that the gateway, the MRTR bridge and
the tasks bridge are handed the same one instead of calling back into the gateway."""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

from app.call import Message
from app.fronts.modern.gateway import Gateway
from app.mrtr import bridge, driving, turn
from app.mrtr.forwarder import Forwarder
from app.tasks.create import TaskCreator
from tests.unit.seam_calls import OFFERED, modern_call


class _Observer:
    def __init__(self) -> None:
        self.seen: list[Message] = []

    def observe(self, pooled: Any, message: Message) -> None:
        self.seen.append(message)


def _forwarder(observer: _Observer | None = None) -> Forwarder:
    return Forwarder(None, ttl_ms=0, cache_scope="private", observer=observer)  # type: ignore[arg-type]


POOLED = SimpleNamespace(version=OFFERED, server_info=None)


def test_progress_goes_back_under_the_callers_token_only_for_its_own_request() -> None:
    call = modern_call("tools/call", {"name": "echo"}, meta={"progressToken": "mine"})
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": 7, "progress": 1},
    }
    relayed = _forwarder().relay(call, POOLED, note, "mine", 7)  # type: ignore[arg-type]
    assert relayed is not None and relayed["params"]["progressToken"] == "mine"
    assert _forwarder().relay(call, POOLED, note, "mine", 8) is None  # type: ignore[arg-type]
    assert _forwarder().relay(call, POOLED, note, None, 7) is None  # type: ignore[arg-type]


def test_log_messages_follow_the_requests_log_level() -> None:
    quiet = modern_call("tools/call", {"name": "echo"})
    asked = modern_call(
        "tools/call", {"name": "echo"}, meta={"io.modelcontextprotocol/logLevel": "warning"}
    )

    def log(level: str) -> Message:
        return {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": level, "data": "x"},
        }

    forwarder = _forwarder()
    assert forwarder.relay(quiet, POOLED, log("error"), None, 1) is None  # type: ignore[arg-type]
    assert forwarder.relay(asked, POOLED, log("info"), None, 1) is None  # type: ignore[arg-type]
    assert forwarder.relay(asked, POOLED, log("error"), None, 1) is not None  # type: ignore[arg-type]


def test_change_notifications_go_to_the_observer_not_the_call() -> None:
    observer = _Observer()
    call = modern_call("tools/call", {"name": "echo"})
    change = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert _forwarder(observer).relay(call, POOLED, change, None, 1) is None  # type: ignore[arg-type]
    assert observer.seen == [change]


def test_outbound_is_the_call_in_the_sessions_version() -> None:
    call = modern_call("tools/call", {"name": "echo", "arguments": {"x": 1}})
    outbound = _forwarder().outbound(call, POOLED)  # type: ignore[arg-type]
    assert outbound["method"] == "tools/call"
    assert outbound["params"]["name"] == "echo" and outbound["params"]["arguments"] == {"x": 1}
    # The modern _meta keys are the request's, not a legacy server's.
    assert "io.modelcontextprotocol/protocolVersion" not in outbound["params"].get("_meta", {})


def test_the_bridges_are_handed_the_forwarder_not_the_gateways_methods() -> None:
    """No codec of the gateway's methods goes down: the bridge and the tasks
    creator take the forwarder when they are built, a turn carries none."""
    assert not hasattr(turn, "Codec")
    assert "codec" not in inspect.signature(bridge.Bridge.run).parameters
    assert "upstream" in inspect.signature(bridge.Bridge).parameters
    assert "upstream" in inspect.signature(driving.Driver).parameters
    assert "upstream" in inspect.signature(TaskCreator).parameters
    assert "outbound" not in inspect.signature(TaskCreator.create).parameters
    assert "forwarder" in inspect.signature(Gateway).parameters
