"""The client's answer on its way to the upstream: a reply lost to a closing connection.

A parked call's retry carries the client's answer; the gateway POSTs it to the
upstream as the JSON-RPC response to the server's request (here the legacy
fixture's elicitation/create). A pooled keep-alive connection the server
closes just as that POST arrives (its idle timeout, uvicorn's 5 s) loses it:
the tool then waits for an answer that never comes. A recording proxy between
gateway and fixture plays that server deterministically (`drop`: it closes
the connection with no answer instead of forwarding the POST).

- on a reused connection the response is sent once more, on a new connection
  (app/upstream/streamable_http/transport.py `resendable`), and the call completes;
- if it cannot be delivered at all, the call ends at once with -32603 and
  HTTP 502 (the gateway's answer to an upstream failure), cancelled upstream,
  instead of waiting for its deadline.

Before the fix both retries hung (found with bench/parked.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration.recording_proxy import Record, RecordingProxy
from tests.waiting import until_sync

pytestmark = pytest.mark.peers

LOGIN = {"github_login": {"action": "accept", "content": {"login": "octocat"}}}
# Long enough for a call that completes on this loaded machine, far shorter than
# the call deadline (MCP_SHIM_REQUEST_TIMEOUT_S) a lost reply used to wait for.
RETRY_WAIT_S = 30.0


def _is_reply(record: Record) -> bool:
    """A POST carrying a JSON-RPC response (to the fixture's elicitation/create)."""
    body = record.body
    return (
        record.http_method == "POST"
        and isinstance(body, dict)
        and "method" not in body
        and ("result" in body or "error" in body)
    )


class Dropper:
    """The proxy's `drop`: closes the connection of reply POSTs while armed."""

    def __init__(self) -> None:
        self.mode: str | None = None  # "reused_once" | "always"
        self.dropped: list[Record] = []

    def __call__(self, record: Record) -> bool:
        if not _is_reply(record) or self.mode is None:
            return False
        if self.mode == "reused_once" and record.served_before == 0:
            return False
        if self.mode == "reused_once":
            self.mode = None
        self.dropped.append(record)
        return True


def _is_echo(record: Record) -> bool:
    body = record.body
    return (
        record.method == "tools/call"
        and isinstance(body, dict)
        and body.get("params", {}).get("name") == "echo"
    )


@pytest.fixture(scope="module")
def dropping(legacy_url: str, logs_dir: Path) -> Iterator[tuple[Dropper, RecordingProxy, str]]:
    dropper = Dropper()
    # The echo's answer comes whole (`_park`): its end reaches the gateway with
    # the answer itself, so the gateway's drain of it (0.25 s at most,
    # app/upstream/streamable_http/transport.py) finds it there and the connection goes
    # back to the pool, whatever the fixture's pace on a loaded machine.
    with (
        RecordingProxy(legacy_url, drop=dropper, whole=_is_echo) as back,
        procs.gateway(
            back.url,
            procs.free_port(),
            # The call deadline a lost reply used to wait for (MCP_SHIM_REQUEST_TIMEOUT_S,
            # 300 s by default) is far past RETRY_WAIT_S.
            log_path=logs_dir / "mrtr-reply-gateway.log",
        ) as gateway,
    ):
        yield dropper, back, gateway


def _park(http: httpx.Client, gateway: str, mark: str) -> mw.Answer:
    first = mw.tool_call(http, gateway, "ask_github_login", {"marker": mark})
    assert first.input_required, first.final
    assert list(first.requests) == ["github_login"]
    # An unrelated call leaves a pooled connection to the upstream idle, the one
    # the reply then rides on (a reused keep-alive connection, as in production).
    echo = mw.tool_call(http, gateway, "echo", {"text": "x"}, caps={})
    assert echo.status == 200, echo.final
    return first


def _retry(http: httpx.Client, gateway: str, mark: str, first: mw.Answer) -> mw.Answer:
    return mw.tool_call(
        http,
        gateway,
        "ask_github_login",
        {"marker": mark},
        input_responses=LOGIN,
        state=first.state,
    )


def test_reply_lost_on_a_reused_connection_is_resent_and_the_call_completes(
    dropping: tuple[Dropper, RecordingProxy, str], legacy_url: str
) -> None:
    dropper, back, gateway = dropping
    dropped_before = len(dropper.dropped)
    mark = "reply-" + uuid.uuid4().hex[:12]
    with httpx.Client(timeout=RETRY_WAIT_S) as http:
        first = _park(http, gateway, mark)
        start = back.mark()
        dropper.mode = "reused_once"
        try:
            done = _retry(http, gateway, mark, first)
        finally:
            dropper.mode = None
    assert len(dropper.dropped) == dropped_before + 1, "the reply never rode on a reused connection"
    assert done.status == 200, done.final
    result: dict[str, Any] = done.result
    assert result.get("resultType", "complete") == "complete", result
    assert "octocat" in str(result["content"]), result
    # The same response, once more, on a new connection; and it arrived.
    lost = dropper.dropped[dropped_before]
    again = [r for r in back.since(start) if r.body == lost.body and r.ending != "dropped"]
    assert len(again) == 1, again
    assert again[0].served_before == 0, "the resend must not reuse a pooled connection"
    assert again[0].status == 202, again[0].status
    # A response is safe to resend; the call itself ran exactly once.
    assert mw.marker_count(legacy_url, mark) == 1


def test_reply_that_cannot_be_delivered_ends_the_call_at_once(
    dropping: tuple[Dropper, RecordingProxy, str], legacy_url: str
) -> None:
    dropper, _back, gateway = dropping
    mark = "reply-" + uuid.uuid4().hex[:12]
    before = mw.stats(legacy_url)["toolCancellations"].get("ask_github_login", 0)
    with httpx.Client(timeout=RETRY_WAIT_S) as http:
        first = _park(http, gateway, mark)
        dropper.mode = "always"
        try:
            ended = _retry(http, gateway, mark, first)
        finally:
            dropper.mode = None
        assert dropper.dropped, "no reply was dropped"
        # 2026-07-28 / JSON-RPC: -32603 Internal error for a failure of the
        # upstream, with the gateway's status for upstream failures (502).
        assert ended.status == 502, ended.final
        assert ended.error["code"] == -32603, ended.error
        assert "could not deliver the answer" in ended.error["message"], ended.error
        # The state is spent: the exchange has ended, its lane was given back.
        stale = _retry(http, gateway, mark, first)
        assert stale.error["code"] == -32602, stale.final
    # The upstream's call was cancelled rather than left waiting for the answer.
    until_sync(
        lambda: mw.stats(legacy_url)["toolCancellations"].get("ask_github_login", 0) > before,
        what="notifications/cancelled to reach the fixture",
    )
    assert mw.marker_count(legacy_url, mark) == 1
