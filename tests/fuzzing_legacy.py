"""Fuzzing the legacy front (issue 19): messages and JSON-RPC batches of legacy
clients, on `POST /mcp` (a 2025-03-26 session) and on an HTTP+SSE channel's
`POST /messages` (2024-11-05), sent raw as tests/fuzzing.py sends modern ones.

Members are drawn so that batches meet every rule: sizes 0 to 60 around
MCP_SHIM_MAX_BATCH (50), ids from a few integers and their text (duplicates,
and 1 beside "1", which are two ids), notifications, responses, `initialize`
inside, members that are not JSON-RPC; then, one time in four, mutated as
modern probes are. The oracle here is independent of the gateway's code: for
an unmutated body it says whether the batch must be served and checks that
every request got exactly one answer with its own id (type kept); any answer is
a schema-valid message of the client's revision, never a 5xx.

The channel's answers come on its stream (`Channel`, read in a thread): every
request of an accepted POST must get its event there (`Channel.settled`).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from hypothesis import strategies as st

from tests import fuzzing
from tests.fuzzing import Answer, Probe

MAX_BATCH = 50
SESSION_VERSION = "2025-03-26"
CHANNEL_VERSION = "2024-11-05"
AUTHORIZATION = "Bearer fuzz-legacy"
_IDS = st.one_of(st.integers(0, 3), st.integers(0, 3).map(str), st.just("x"))
_NOTIFICATIONS = ("notifications/roots/list_changed", "notifications/x")


def _request(method: str, rid: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if method == "tools/call":
        message["params"] = {"name": "echo", "arguments": {"text": "fuzz"}}
    elif method == "initialize":
        message["params"] = {"protocolVersion": SESSION_VERSION, "capabilities": {}}
    return message


@st.composite
def _member(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 19))
    if kind < 14:
        method = draw(st.sampled_from(["ping", "ping", "tools/list", "tools/call"]))
        return _request(method, draw(_IDS))
    if kind < 17:
        return {"jsonrpc": "2.0", "method": draw(st.sampled_from(_NOTIFICATIONS))}
    if kind == 17:
        # An answer to a request the server never sent: forwarded, ignored.
        return {"jsonrpc": "2.0", "id": f"never-asked-{draw(_IDS)}", "result": {}}
    if kind == 18:
        return _request("initialize", draw(_IDS))
    return draw(st.sampled_from([1, "x", [], {"id": 1}, {"jsonrpc": "1.0", "id": 1}]))


@dataclass
class Verdict:
    """What an unmutated body must get: served (with the requests' ids and methods
    in order), or refused (400)."""

    served: bool
    requests: list[tuple[Any, str]]


def _valid_member(item: Any) -> bool:
    if not isinstance(item, dict) or item.get("jsonrpc") != "2.0":
        return False
    rid = item.get("id")
    if "id" in item and (isinstance(rid, bool) or not isinstance(rid, str | int)):
        return False
    if "method" in item:
        return isinstance(item["method"], str) and bool(item["method"])
    return "id" in item and (("result" in item) != ("error" in item))


def verdict(body: Any, *, in_batch_allowed: bool = True) -> Verdict:
    items = body if isinstance(body, list) else [body]
    requests = [
        (m["id"], m["method"]) for m in items if isinstance(m, dict) and "method" in m and "id" in m
    ]
    ok = all(_valid_member(m) for m in items)
    if isinstance(body, list):
        typed = [(type(rid), rid) for rid, _ in requests]
        ok = ok and 0 < len(items) <= MAX_BATCH and in_batch_allowed
        ok = ok and len(set(typed)) == len(typed)
        ok = ok and all(method != "initialize" for _, method in requests)
    else:
        # The session (the channel) is initialized already.
        ok = ok and all(method != "initialize" for _, method in requests)
    return Verdict(ok, requests if ok else [])


@dataclass
class LegacyProbe(Probe):
    route: str = "/mcp"  # or the channel's /messages?session_id=...
    version: str = SESSION_VERSION
    expected: Verdict | None = None  # None: mutated, only the general properties

    def request_bytes(self, target: str = "/mcp") -> bytes:
        return super().request_bytes(self.route)


@st.composite
def legacy_probes(draw: st.DrawFn, port: int, session_id: str, channel: str) -> LegacyProbe:
    on_channel = draw(st.booleans())
    if draw(st.integers(0, 4)) == 0:
        body: Any = draw(_member())
        if not on_channel and isinstance(body, dict) and body.get("method") == "initialize":
            # On /mcp that is a new session (the header is not looked at): not this test's.
            body = _request("ping", body.get("id"))
    else:
        size = draw(st.sampled_from([0, 1, 2, 3, 5, 8, 20, 49, 50, 51, 60]))
        body = [draw(_member()) for _ in range(size)]
    accept = draw(st.sampled_from(["application/json, text/event-stream", "application/json"]))
    headers = [
        (b"Host", f"127.0.0.1:{port}".encode()),
        (b"Content-Type", b"application/json"),
        (b"Accept", accept.encode()),
    ]
    if on_channel:
        headers.append((b"Authorization", AUTHORIZATION.encode()))
    else:
        headers.append((b"Mcp-Session-Id", session_id.encode()))
    method = body.get("method") if isinstance(body, dict) else "batch"
    probe = LegacyProbe(
        b"",
        headers,
        method if isinstance(method, str) else None,
        notification=isinstance(body, dict) and "id" not in body,
        route=channel if on_channel else "/mcp",
        version=CHANNEL_VERSION if on_channel else SESSION_VERSION,
    )
    mutated: Any = copy.deepcopy(body)
    if draw(st.integers(0, 3)) == 0:
        mutated = draw(fuzzing._mutate_message(mutated, frozenset(), probe.mutations))
    probe.body = fuzzing._serialise(mutated, True)
    if draw(st.integers(0, 7)) == 0:
        probe.body = draw(fuzzing._mutate_bytes(probe.body, probe.mutations))
    if not probe.mutations:
        probe.expected = verdict(body)
    return probe


def check(probe: LegacyProbe, answer: Answer) -> list[str]:
    """Every property the answer breaks (empty: all hold)."""
    if answer.error is not None and (answer.status is None or answer.sent_all):
        return [f"no answer: {answer.error}"]
    status = answer.status or 0
    if status >= 500:
        return [f"HTTP {status}: {answer.body[:120]!r}"]
    expected = probe.expected
    failures: list[str] = []
    if status == 202:
        if answer.body:
            failures.append("202 with a body")
        if expected is not None and not expected.served:
            failures.append("202 for a body the batch rules refuse")
        if expected is not None and expected.requests and probe.route == "/mcp":
            failures.append("202 for requests on /mcp: they need their answers")
        return failures
    if expected is not None and not expected.served and status != 400:
        failures.append(f"not refused: wanted 400, got {status}")
    if not answer.body:
        return [*failures, f"no body: HTTP {status}"]
    try:
        body = json.loads(answer.body) if answer.content_type == "application/json" else None
        messages = fuzzing.sse_messages(answer.body) if body is None else body
    except (ValueError, UnicodeDecodeError) as exc:
        return [*failures, f"not JSON-RPC: HTTP {status} ({exc})"]
    messages = messages if isinstance(messages, list) else [messages]
    if status >= 400:
        for message in messages:
            failures += _check_message(probe.version, message, None)
            code = message.get("error", {}).get("code") if isinstance(message, dict) else None
            if code not in (-32700, -32600, -32602, -32601, -32603):
                failures.append(f"refusal with code {code!r}")
        return failures
    answers = [m for m in messages if isinstance(m, dict) and "method" not in m]
    if expected is None:
        for message in answers:
            failures += _check_message(probe.version, message, None)
    else:
        if probe.route != "/mcp":
            return [*failures, f"HTTP {status} on /messages: wanted 202 or 400"]
        got = sorted(repr(m.get("id")) for m in answers)
        wanted = sorted(repr(rid) for rid, _ in expected.requests)
        if got != wanted:
            failures.append(f"answers {got} for the requests {wanted}")
        methods = {(type(rid), rid): method for rid, method in expected.requests}
        for message in answers:
            rid = message.get("id")
            failures += _check_message(probe.version, message, methods.get((type(rid), rid)))
    return failures


def _check_message(version: str, message: Any, method: str | None) -> list[str]:
    if not isinstance(message, dict):
        return [f"not JSON-RPC: {message!r:.100}"]
    if not fuzzing._valid_legacy(version, message, method):
        return [f"invalid {version} answer for {method}: {json.dumps(message)[:160]}"]
    return []


def accepted_requests(probe: LegacyProbe, answer: Answer) -> int:
    """Requests of a POST /messages the channel now owes an answer event."""
    if answer.status != 202 or probe.route == "/mcp":
        return 0
    body = fuzzing._loads(probe.body)
    items = body if isinstance(body, list) else [body]
    return sum(1 for m in items if isinstance(m, dict) and "method" in m and "id" in m)


class Channel:
    """A 2024-11-05 HTTP+SSE channel, initialized, its stream read in a thread
    (a reader that stops would block the channel's calls, as for any client)."""

    def __init__(self, base: str) -> None:
        self._base = base
        self._client = httpx.Client(timeout=httpx.Timeout(30.0, read=None))
        # The context manager is kept: collected, it would close the stream.
        self._opened = self._client.stream(
            "GET", base + "/sse", headers={"authorization": AUTHORIZATION}
        )
        self._stream = self._opened.__enter__()
        self._chunks = self._stream.iter_text()
        self.answers = 0
        self._lock = threading.Lock()
        buffer = ""
        for chunk in self._chunks:
            buffer += chunk
            if "\n\n" in buffer:
                break
        first, self._rest = buffer.split("\n\n", 1)
        self.path = first.split("\n")[1].removeprefix("data: ")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        init = _request("initialize", "init")
        init["params"]["protocolVersion"] = CHANNEL_VERSION
        self.post(init)
        self.settled(1)

    def post(self, message: Any) -> httpx.Response:
        response = self._client.post(
            self._base + self.path, json=message, headers={"authorization": AUTHORIZATION}
        )
        assert response.status_code == 202, response.text
        return response

    def _read(self) -> None:
        buffer = self._rest
        try:
            for chunk in self._chunks:
                buffer += chunk
                *events, buffer = buffer.replace("\r\n", "\n").split("\n\n")
                for event in events:
                    data = [ln[5:].lstrip() for ln in event.split("\n") if ln.startswith("data:")]
                    message = json.loads("\n".join(data)) if data else None
                    if isinstance(message, dict) and "method" not in message:
                        with self._lock:
                            self.answers += 1
        except httpx.HTTPError:
            return

    def settled(self, owed: int, timeout_s: float = 30.0) -> str | None:
        """None once `owed` answers came on the stream in all; else what is missing."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self.answers >= owed:
                    extra = self.answers - owed
                    return None if extra == 0 else f"{extra} answers more than requests"
            time.sleep(0.05)
        return f"the channel answered {self.answers} of {owed} requests in {timeout_s} s"

    def close(self) -> None:
        self._opened.__exit__(None, None, None)
        self._client.close()
        self._reader.join(5)
