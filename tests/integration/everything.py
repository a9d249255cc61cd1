"""The published `@modelcontextprotocol/server-everything` behind the gateway:
how it is started and the checks every upstream transport must pass with it.

tests/integration/test_contract.py runs the checks against every upstream
kind (legacy Streamable HTTP, stdio, HTTP+SSE, modern HTTP; issues 11 and 20:
"the same checks"), each a function of the gateway's base URL;
tests/integration/test_stdio.py and test_http_sse.py use the helpers for their
kind's own tests.
Driven with raw 2026-07-28 requests (tests/integration/mrtr_wire.py) and the
official mcp 2.x client (tests/modern_client/stdio_servers.py).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import re
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import test_legacy_clients as legacy
from tests.integration import wire
from tests.schema import MODERN
from tests.waiting import until_sync

NPM = procs.PEERS / "node" / "node_modules" / "@modelcontextprotocol"
EVERYTHING = NPM / "server-everything" / "dist" / "index.js"
SAMPLING: dict[str, Any] = {"sampling": {}}
NO_CAPS: dict[str, Any] = {}
SERVER_NAME = "mcp-servers/everything"


def node_command(script: Path, *args: str) -> str:
    return shlex.join([str(procs.require_peer(procs.NODE)), str(procs.require_peer(script)), *args])


@contextlib.contextmanager
def everything_sse(port: int, log_path: Path) -> Iterator[str]:
    """server-everything over HTTP+SSE on `port` (its PORT variable); yields the SSE URL."""
    argv = [str(procs.require_peer(procs.NODE)), str(procs.require_peer(EVERYTHING)), "sse"]
    # GET /sse never ends; GET /message is a quick 404 once the server listens.
    with procs.running(
        argv, f"http://127.0.0.1:{port}/message", env={"PORT": str(port)}, log_path=log_path
    ):
        yield f"http://127.0.0.1:{port}/sse"


# -- what the checks need of a server ---------------------------------------------


def assert_simulated_log_line(data: object) -> None:
    # One of eight random levels: "Debug-level message", ..., "Alert level-message".
    assert isinstance(data, str) and re.match(r"\w+[- ]level[- ]message", data), data


@dataclasses.dataclass(frozen=True)
class Profile:
    """The tools, prompt and resource of one server that the checks use: the same
    check logic runs on every kind, each with its server's names."""

    server_name: str
    echo_tool: str
    echo_args: Callable[[str], dict[str, Any]]
    echo_text: Callable[[str], str]
    listed_tools: frozenset[str]
    # A tool the server lists only to a client that declared sampling, if any.
    sampling_only_tool: str | None
    sum_call: tuple[str, dict[str, Any], str] | None  # tool, arguments, its text
    prompt: str
    sampling_tool: str
    # A long call: its arguments for `steps` progress steps over `seconds`.
    progress_tool: str
    progress_args: Callable[[float, int], dict[str, Any]]
    progress_values: Callable[[int], list[float]]
    # One call that logs during the call, and one after which nothing logs any more.
    log_on: str
    log_off: str
    log_count: int
    log_line: Callable[[object], None]
    # What the two logging calls answer, and how many lines the second one logs at
    # level debug (a legacy client sets that level for its whole session).
    log_on_text: str
    log_off_text: str
    log_off_count: int
    # A tool that asks its caller (elicitation), its arguments, and the content a
    # client accepts with, given a name the tool's answer then shows.
    elicitation_tool: str
    elicitation_args: dict[str, Any]
    elicited: Callable[[str], dict[str, Any]]
    slow_tool: str
    slow_args: Callable[[float], dict[str, Any]]
    subscribed_uri: str
    # The call that makes the server update `subscribed_uri`, and the one that stops it.
    update_on: str
    update_off: str | None


def _modern_log_line(data: object) -> None:
    assert data in {"Tool execution started", "Tool processing data", "Tool execution completed"}


EVERYTHING_PROFILE = Profile(
    server_name=SERVER_NAME,
    echo_tool="echo",
    echo_args=lambda message: {"message": message},
    echo_text=lambda message: f"Echo: {message}",
    listed_tools=frozenset({"echo", "get-sum", "get-env"}),
    sampling_only_tool="trigger-sampling-request",
    sum_call=("get-sum", {"a": 2, "b": 3}, "The sum of 2 and 3 is 5."),
    prompt="simple-prompt",
    sampling_tool="trigger-sampling-request",
    progress_tool="trigger-long-running-operation",
    progress_args=lambda seconds, steps: {"duration": seconds, "steps": steps},
    progress_values=lambda steps: list(range(1, steps + 1)),
    log_on="toggle-simulated-logging",
    log_off="toggle-simulated-logging",
    log_count=1,
    log_line=assert_simulated_log_line,
    log_on_text="Started simulated",
    log_off_text="Stopped simulated",
    log_off_count=0,
    elicitation_tool="trigger-elicitation-request",
    elicitation_args={},
    elicited=lambda name: {"name": name, "check": True},
    slow_tool="trigger-long-running-operation",
    slow_args=lambda seconds: {"duration": seconds},
    subscribed_uri="demo://resource/static/document/features.md",
    update_on="toggle-subscriber-updates",
    update_off="toggle-subscriber-updates",
)
# The project's mcp 2.x fixture (tests/fixtures/modern_server.py): the conformance
# suite's names. Its progress tool always takes three steps: 0, 50, 100 of 100.
MODERN_PROFILE = Profile(
    server_name="mcp-shim-modern-fixture",
    echo_tool="test_echo",
    echo_args=lambda message: {"text": message},
    echo_text=lambda message: message,
    listed_tools=frozenset({"test_echo", "test_simple_text", "test_sampling"}),
    sampling_only_tool=None,
    sum_call=None,
    prompt="test_simple_prompt",
    sampling_tool="test_sampling",
    progress_tool="test_tool_with_progress",
    progress_args=lambda seconds, steps: {},
    progress_values=lambda steps: [0, 50, 100],
    log_on="test_tool_with_logging",
    log_off="test_tool_with_logging",
    log_count=3,
    log_line=_modern_log_line,
    log_on_text="Logging test completed",
    log_off_text="Logging test completed",
    log_off_count=3,
    elicitation_tool="test_elicitation",
    elicitation_args={"message": "Who are you?"},
    elicited=lambda name: {"username": name, "email": "someone@example.com"},
    slow_tool="test_slow",
    slow_args=lambda seconds: {"seconds": seconds},
    subscribed_uri="test://watched-resource",
    update_on="test_touch_watched",
    update_off=None,
)


def client_plan(p: Profile, echo_message: str, name: str) -> str:
    """The calls a client script (tests/legacy_client/everything.py,
    tests/modern_client/stdio_servers.py) makes, as its JSON argument: the same
    scripts run against every profile's server."""

    def step(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"tool": tool, "arguments": arguments}

    plan = {
        "echo": step(p.echo_tool, p.echo_args(echo_message)),
        "sum": None if p.sum_call is None else step(p.sum_call[0], p.sum_call[1]),
        "sampling": step(p.sampling_tool, {"prompt": "Say something"}),
        "elicitation": step(p.elicitation_tool, p.elicitation_args),
        "elicited": p.elicited(name),
        "progress": step(p.progress_tool, p.progress_args(1, 3)),
        "log_on": step(p.log_on, {}),
        "log_off": step(p.log_off, {}),
    }
    return json.dumps(plan)


def first_text(outcome: dict[str, Any]) -> str:
    text: str = outcome["result"]["content"][0]["text"]
    return text


def check_sum(p: Profile, outcome: dict[str, Any] | None) -> None:
    if p.sum_call is None:
        assert outcome is None, outcome
    else:
        assert outcome is not None and first_text(outcome) == p.sum_call[2], outcome


# -- calls ---------------------------------------------------------------------


def call(
    http: httpx.Client,
    base: str,
    name: str,
    arguments: dict[str, Any] | None = None,
    caps: dict[str, Any] | None = None,
    **kwargs: Any,
) -> mw.Answer:
    """A 2026-07-28 `tools/call`; the caller declares nothing unless `caps` says so."""
    return mw.tool_call(
        http, base, name, arguments, caps=NO_CAPS if caps is None else caps, **kwargs
    )


def text_of(answer: mw.Answer) -> str:
    return "".join(c.get("text", "") for c in answer.result.get("content", []))


def sampled(text: str) -> dict[str, Any]:
    """A client's CreateMessageResult."""
    return {
        "role": "assistant",
        "content": {"type": "text", "text": text},
        "model": "test-model",
        "stopReason": "endTurn",
    }


# -- the checks ------------------------------------------------------------------


def check_discover_list_and_calls(http: httpx.Client, base: str, how: str, p: Profile) -> None:
    discover = mw.send(http, base, mw.message_for("server/discover", {}, caps=NO_CAPS))
    assert discover.status == 200, discover.final
    info = discover.result["_meta"]["io.modelcontextprotocol/serverInfo"]
    assert info["name"] == p.server_name
    assert MODERN in discover.result["supportedVersions"]
    assert discover.result["resultType"] == "complete"
    assert discover.result["capabilities"]["tools"] == {"listChanged": True}

    tools = mw.send(http, base, mw.message_for("tools/list", {}, caps=NO_CAPS))
    assert tools.status == 200, tools.final
    names = {tool["name"] for tool in tools.result["tools"]}
    assert p.listed_tools <= names
    # Registered by the server only for a client that declared sampling: not this one.
    assert p.sampling_only_tool is None or p.sampling_only_tool not in names

    echo = call(http, base, p.echo_tool, p.echo_args(f"hi over {how}"))
    assert echo.status == 200 and text_of(echo) == p.echo_text(f"hi over {how}")
    assert echo.result["resultType"] == "complete"
    if p.sum_call is not None:
        tool, arguments, expected = p.sum_call
        assert text_of(call(http, base, tool, arguments)) == expected
    prompts = mw.send(http, base, mw.message_for("prompts/list", {}, caps=NO_CAPS))
    assert p.prompt in {prompt["name"] for prompt in prompts.result["prompts"]}


def check_the_official_modern_client(base: str, p: Profile) -> None:
    plan = client_plan(p, "hello through the shim", "Alice Example")
    doc = procs.run_modern_client("stdio_servers.py", base + "/mcp", "everything", plan)
    assert isinstance(doc, dict)
    assert doc["protocolVersion"] == MODERN and doc["adoptedVia"] == "discover"
    # This client declared sampling and elicitation: the server registered its tools for them.
    assert {p.echo_tool, p.sampling_tool, p.elicitation_tool} <= set(doc["tools"])
    assert first_text(doc["echo"]) == p.echo_text("hello through the shim")
    check_sum(p, doc["sum"])
    # The server asked its client; the gateway turned that into input_required and
    # the client answered through its own MRTR loop.
    assert doc["asked"] == ["sampling/createMessage", "elicitation/create"]
    assert "Sampled through the shim." in first_text(doc["sampling"])
    elicited = " ".join(c["text"] for c in doc["elicitation"]["result"]["content"])
    assert "Alice Example" in elicited


def check_unrelated_calls_complete_while_a_call_is_parked(
    http: httpx.Client, base: str, p: Profile
) -> None:
    args = {"prompt": "Capital of France?"}
    first = call(http, base, p.sampling_tool, args, caps=SAMPLING)
    assert first.input_required, first.final
    mw.check_input_required(first)
    ((key, question),) = first.requests.items()
    assert question["method"] == "sampling/createMessage"
    # The upstream call waits for its answer; other calls go on, on other sessions.
    started = time.monotonic()
    for n in range(5):
        echo = call(http, base, p.echo_tool, p.echo_args(f"meanwhile {n}"))
        assert text_of(echo) == p.echo_text(f"meanwhile {n}")
    assert time.monotonic() - started < 10
    done = call(
        http,
        base,
        p.sampling_tool,
        args,
        caps=SAMPLING,
        input_responses={key: sampled("Paris")},
        state=first.state,
    )
    assert done.status == 200 and done.result["resultType"] == "complete", done.final
    assert "Paris" in text_of(done)


def check_two_parked_calls_answered_in_reverse_order(
    http: httpx.Client, base: str, p: Profile
) -> None:
    prompts = ("first", "second")
    firsts = [
        call(http, base, p.sampling_tool, {"prompt": prompt}, caps=SAMPLING) for prompt in prompts
    ]
    for first in firsts:
        assert first.input_required, first.final
    for n, (prompt, first) in reversed(list(enumerate(zip(prompts, firsts, strict=True)))):
        ((key, question),) = first.requests.items()
        # Each call's own question: the prompt it was called with.
        assert prompt in question["params"]["messages"][0]["content"]["text"]
        done = call(
            http,
            base,
            p.sampling_tool,
            {"prompt": prompt},
            caps=SAMPLING,
            input_responses={key: sampled(f"answer {n}")},
            state=first.state,
        )
        assert done.result["resultType"] == "complete", done.final
        assert f"answer {n}" in text_of(done)


def check_progress_reaches_its_caller(http: httpx.Client, base: str, p: Profile) -> None:
    """The server's progress carries the token the gateway put on the request (its
    own, one per request); the caller gets its own token back."""
    progress = call(
        http,
        base,
        p.progress_tool,
        p.progress_args(1, 3),
        meta={"progressToken": "my-token"},
    )
    notes = [m for m in progress.messages if m.get("method") == "notifications/progress"]
    assert progress.content_type == "text/event-stream"
    assert [n["params"]["progress"] for n in notes] == p.progress_values(3)
    assert all(n["params"]["progressToken"] == "my-token" for n in notes)
    assert "completed" in text_of(progress).lower()
    # No token, no progress.
    plain = call(http, base, p.progress_tool, p.progress_args(0.3, 2))
    assert [m for m in plain.messages if m.get("method")] == []
    assert "completed" in text_of(plain).lower()


def check_logs_of_a_call_reach_its_caller(http: httpx.Client, base: str, p: Profile) -> None:
    """server-everything's `toggle-simulated-logging` sends one log line at once,
    during the call (then one every 5 s, until toggled off): nothing on the shared
    stream ties it to the call but being the one call in flight. The modern
    fixture's logging tool logs three lines on the call's own stream. The caller
    asked for logs (logLevel, 2026-07-28 per-request `_meta`), so it gets them."""
    on = call(http, base, p.log_on, meta={wire.META_LOG_LEVEL: "debug"})
    try:
        assert on.status == 200 and not on.result.get("isError"), on.final
        lines = [m for m in on.messages if m.get("method") == "notifications/message"]
        assert len(lines) == p.log_count, on.messages
        for line in lines:
            p.log_line(line["params"]["data"])
    finally:
        off = call(http, base, p.log_off)
    # A caller that asked for no logs gets none.
    assert off.status == 200 and not off.result.get("isError"), off.final
    assert [m for m in off.messages if m.get("method")] == []


class Frames:
    """The JSON-RPC messages of an open SSE answer (a listen stream), one at a time."""

    def __init__(self, response: httpx.Response) -> None:
        assert response.status_code == 200, response.status_code
        self._lines = response.iter_lines()
        self.seen: list[dict[str, Any]] = []

    def next(self, timeout: float = 30.0) -> dict[str, Any]:
        """The next message, within `timeout` seconds: checked at every line, and a
        listen stream carries a keepalive comment every MCP_SHIM_LISTEN_KEEPALIVE_S."""
        deadline = time.monotonic() + timeout
        for line in self._lines:
            if line.startswith("data:"):
                frame: dict[str, Any] = json.loads(line[5:])
                self.seen.append(frame)
                return frame
            if time.monotonic() > deadline:
                raise AssertionError(f"no message within {timeout:g} s; saw {self.seen}")
        raise AssertionError(f"the listen stream ended; saw {self.seen}")


@contextlib.contextmanager
def listening(http: httpx.Client, base: str, uri: str) -> Iterator[tuple[Frames, Any]]:
    """subscriptions/listen for updates of `uri`, acknowledged; yields its frames and
    the listen request's id."""
    listen = wire.body("subscriptions/listen", {"notifications": {"resourceSubscriptions": [uri]}})
    with http.stream(
        "POST", base + "/mcp", content=json.dumps(listen).encode(), headers=wire.headers_for(listen)
    ) as response:
        frames = Frames(response)
        ack = frames.next()
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["notifications"]["resourceSubscriptions"] == [uri]
        yield frames, listen["id"]


def check_an_update_arrives(
    http: httpx.Client, base: str, frames: Frames, listen_id: Any, p: Profile
) -> None:
    """server-everything's `toggle-subscriber-updates` sends an update for each URI
    its session subscribed at once (then every 5 s, until toggled off); the modern
    fixture's `test_touch_watched` sends one."""
    toggled = call(http, base, p.update_on)
    try:
        answered = toggled.final.get("result")
        assert toggled.status == 200 and answered and not answered.get("isError"), toggled.final
        update = frames.next()
        assert update["method"] == "notifications/resources/updated"
        assert update["params"]["uri"] == p.subscribed_uri
        subscription = update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
        assert subscription == listen_id
    finally:
        if p.update_off is not None:
            call(http, base, p.update_off)  # and off again


def check_a_resource_subscription(http: httpx.Client, base: str, p: Profile) -> None:
    """subscriptions/listen: `resources/subscribe` sent upstream, and the server's
    `notifications/resources/updated` (tied to no call) delivered on the listen
    stream, tagged with the listen request's id."""
    with listening(http, base, p.subscribed_uri) as (frames, listen_id):
        check_an_update_arrives(http, base, frames, listen_id, p)


def check_an_unprompted_roots_request_is_answered(
    http: httpx.Client, base: str, server_stderr: Callable[[], Iterable[str]]
) -> None:
    """server-everything asks a client that declared roots for them 350 ms after
    `initialized`, outside any call. Nobody can answer for the client then: the
    gateway refuses it at once (-32601, the listener's default answer), so the
    server is not left waiting, and says so on its stderr."""
    answer = call(http, base, "echo", {"message": "with roots"}, caps={"roots": {}})
    assert text_of(answer) == "Echo: with roots"

    def refused() -> bool:
        return any(
            "Failed to request roots from client" in line and "no client call is waiting" in line
            for line in server_stderr()
        )

    until_sync(refused, timeout_s=10, what="the server's note that roots/list was refused")


def check_a_legacy_client(http: httpx.Client, base: str, p: Profile) -> None:
    """The mcp 1.x client (2025-11-25, a session of its own upstream): the server's
    requests reach its callbacks, its progress and log lines its handlers."""
    plan = client_plan(p, "hello, legacy", "Ada Legacy")
    doc = procs.run_legacy_client("everything.py", base + "/mcp", "2025-11-25", plan)
    assert isinstance(doc, dict), doc
    assert doc["initialize"]["serverInfo"]["name"] == p.server_name
    assert doc["initialize"]["protocolVersion"] == "2025-11-25"
    assert doc["has_session_id"] is True
    assert {p.echo_tool, p.sampling_tool, p.elicitation_tool} <= set(doc["tools"])
    assert first_text(doc["echo"]) == p.echo_text("hello, legacy")
    check_sum(p, doc["sum"])
    assert doc["asked"] == ["sampling/createMessage", "elicitation/create"]
    assert "Sampled by a legacy client." in first_text(doc["sampling"])
    elicited = " ".join(c["text"] for c in doc["elicitation"]["result"]["content"])
    assert "Ada Legacy" in elicited
    assert doc["progress"] == p.progress_values(3)
    assert "completed" in first_text(doc["long"]).lower()
    assert "result" in doc["set_level"], doc["set_level"]
    assert p.log_on_text in first_text(doc["logging_on"])
    assert p.log_off_text in first_text(doc["logging_off"])
    assert len(doc["logs"]) == p.log_count + p.log_off_count, doc["logs"]
    for line in doc["logs"]:
        p.log_line(line)
    assert doc["ping"] == {"result": {}}


def check_a_legacy_clients_cancelled_call_ends(http: httpx.Client, base: str, p: Profile) -> None:
    """A legacy client cancels its call with notifications/cancelled; the server,
    as it should (2025-11-25 basic/utilities/cancellation: receivers "SHOULD NOT
    send a response for the cancelled request"), never answers it. Nothing else on
    the one stream (stdout, the SSE stream) would ever end that call: the gateway ends it when it
    passes the cancellation on. Otherwise the client's POST stays open until
    MCP_SHIM_REQUEST_TIMEOUT_S, and the next call is not the only one in flight,
    so the server's question during it could not be routed to it."""
    url = base + "/mcp"
    version = "2025-11-25"
    with httpx.Client(timeout=20.0) as client:
        session, _ = legacy.initialize(client, url, version, capabilities={"sampling": {}})
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            pending = pool.submit(
                legacy.call,
                client,
                url,
                session,
                version,
                "tools/call",
                {"name": p.slow_tool, "arguments": p.slow_args(30)},
                "slow-1",
            )
            time.sleep(1.0)
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": "slow-1", "reason": "user pressed stop"},
            }
            sent = client.post(url, json=note, headers=legacy.headers(session, version))
            assert sent.status_code == 202, sent.text
            ended = pending.result(timeout=30)
            assert time.monotonic() - started < 10
        # 2025-11-25 basic/utilities/cancellation: "Receivers of a cancellation
        # notification SHOULD NOT send a response for the cancelled request": the
        # call's event stream ends with nothing on it.
        assert ended.status_code == 200, ended.text
        assert legacy.messages(ended) == []
        # The next call asks the client (sampling): its question reaches it, on
        # the call's own answer stream.
        ask = {
            "jsonrpc": "2.0",
            "id": "ask-1",
            "method": "tools/call",
            "params": {"name": p.sampling_tool, "arguments": {"prompt": "Hi?"}},
        }
        with client.stream(
            "POST", url, json=ask, headers=legacy.headers(session, version)
        ) as response:
            frames = Frames(response)
            question = frames.next()
            assert question["method"] == "sampling/createMessage", question
            reply = {"jsonrpc": "2.0", "id": question["id"], "result": sampled("Hello.")}
            answered = client.post(url, json=reply, headers=legacy.headers(session, version))
            assert answered.status_code == 202, answered.text
            done = frames.next()
        assert done["id"] == "ask-1" and "Hello." in done["result"]["content"][0]["text"]
        client.delete(url, headers=legacy.headers(session, version))


# The checks that take (http, base, profile): every transport's test file runs them all.
CHECKS: list[Callable[[httpx.Client, str, Profile], None]] = [
    check_unrelated_calls_complete_while_a_call_is_parked,
    check_two_parked_calls_answered_in_reverse_order,
    check_progress_reaches_its_caller,
    check_logs_of_a_call_reach_its_caller,
    check_a_resource_subscription,
    check_a_legacy_client,
    check_a_legacy_clients_cancelled_call_ends,
]


def check_id(check: Callable[..., None]) -> str:
    return check.__name__.removeprefix("check_")


def call_in_background(
    base: str, name: str, arguments: dict[str, Any], **kwargs: Any
) -> tuple[threading.Thread, dict[str, Any]]:
    """A call run in a thread of its own; the dict gets its `answer` and how long it
    `took` (seconds) once the thread ends."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        with httpx.Client(timeout=60.0) as client:
            started = time.monotonic()
            outcome["answer"] = call(client, base, name, arguments, **kwargs)
            outcome["took"] = time.monotonic() - started

    worker = threading.Thread(target=run)
    worker.start()
    return worker, outcome
