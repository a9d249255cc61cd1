"""Raw multi round-trip requests for the MRTR integration tests.

A first call, its `input_required` answer, the retry with `inputResponses`
and the echoed `requestState`: built by hand on top of tests/integration/wire.py
so a test can break exactly one thing. Plus canned answers to input requests
and the fixture's ledger (``GET /debug/stats``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from tests.integration import wire
from tests.schema import MODERN, SPEC

# Everything a client can declare for input: form and URL elicitation, sampling, roots.
ALL_CAPS: dict[str, Any] = {
    "elicitation": {"form": {}, "url": {}},
    "sampling": {},
    "roots": {},
}
_UNSET = object()


@dataclass
class Answer:
    status: int
    messages: list[dict[str, Any]]
    content_type: str

    @property
    def final(self) -> dict[str, Any]:
        return self.messages[-1]

    @property
    def result(self) -> dict[str, Any]:
        assert "result" in self.final, f"expected a result, got {self.final} (HTTP {self.status})"
        result: dict[str, Any] = self.final["result"]
        return result

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.final, f"expected an error, got {self.final} (HTTP {self.status})"
        error: dict[str, Any] = self.final["error"]
        return error

    @property
    def input_required(self) -> bool:
        return "result" in self.final and self.final["result"].get("resultType") == "input_required"

    @property
    def state(self) -> str:
        state = self.result["requestState"]
        assert isinstance(state, str) and state
        return state

    @property
    def requests(self) -> dict[str, Any]:
        requests: dict[str, Any] = self.result["inputRequests"]
        return requests


def new_id() -> int:
    return random.randrange(1, 2**31)


def message_for(
    method: str,
    params: dict[str, Any],
    *,
    caps: dict[str, Any] | None = None,
    rid: int | None = None,
    input_responses: Any = _UNSET,
    state: Any = _UNSET,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    message = wire.body(
        method,
        params,
        rid=rid if rid is not None else new_id(),
        meta={wire.META_CAPABILITIES: ALL_CAPS if caps is None else caps, **(meta or {})},
    )
    if input_responses is not _UNSET:
        message["params"]["inputResponses"] = input_responses
    if state is not _UNSET:
        message["params"]["requestState"] = state
    return message


def send(
    client: httpx.Client,
    base: str,
    message: dict[str, Any],
    *,
    authorization: str | None = None,
) -> Answer:
    headers = wire.headers_for(message)
    if authorization is not None:
        headers["authorization"] = authorization
    response = wire.post(client, base.rstrip("/") + "/mcp", message, headers)
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    return Answer(response.status_code, wire.answer_messages(response), kind)


def tool_call(
    client: httpx.Client,
    base: str,
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    authorization: str | None = None,
    **kwargs: Any,
) -> Answer:
    params = {"name": name, "arguments": arguments or {}}
    return send(
        client, base, message_for("tools/call", params, **kwargs), authorization=authorization
    )


def answer_for(request: dict[str, Any]) -> dict[str, Any]:
    """What an agreeable client answers to one input request."""
    method = request["method"]
    params = request.get("params") or {}
    if method == "elicitation/create":
        if params.get("mode") == "url":
            return {"action": "accept"}
        content: dict[str, Any] = {}
        for name, prop in params["requestedSchema"]["properties"].items():
            kind = prop.get("type")
            if "enum" in prop:
                content[name] = prop["enum"][0]
            elif kind == "string":
                content[name] = f"Alice-{name}"
            elif kind in ("integer", "number"):
                content[name] = 30
            elif kind == "boolean":
                content[name] = True
        return {"action": "accept", "content": content}
    if method == "sampling/createMessage":
        return {
            "role": "assistant",
            "content": {"type": "text", "text": "Paris"},
            "model": "test-model",
            "stopReason": "endTurn",
        }
    assert method == "roots/list", method
    return {"roots": [{"uri": "file:///work/project", "name": "Project"}]}


def answers_for(requests: dict[str, Any]) -> dict[str, Any]:
    return {key: answer_for(request) for key, request in requests.items()}


def check_input_required(answer: Answer) -> None:
    """An InputRequiredResult, and every inputRequests value, valid against the 2026 schema."""
    assert answer.status == 200, answer.final
    SPEC.validate(MODERN, "JSONRPCResultResponse", answer.final)
    SPEC.validate(MODERN, "InputRequiredResult", answer.result)
    assert answer.result["resultType"] == "input_required"
    assert answer.requests, "an input_required answer with no inputRequests"
    definitions = {
        "elicitation/create": "ElicitRequest",
        "sampling/createMessage": "CreateMessageRequest",
        "roots/list": "ListRootsRequest",
    }
    for key, request in answer.requests.items():
        assert set(request) <= {"method", "params"}, (key, request)  # no JSON-RPC framing
        SPEC.validate(MODERN, definitions[request["method"]], request)


# ---------------------------------------------------------------------------
# The fixture's ledger
# ---------------------------------------------------------------------------


def fixture_base(legacy_url: str) -> str:
    return legacy_url.rsplit("/mcp", 1)[0]


def stats(legacy_url: str) -> dict[str, Any]:
    response = httpx.get(fixture_base(legacy_url) + "/debug/stats", timeout=10.0)
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


def answer_rounds(
    client: httpx.Client, bases: Iterator[str], name: str, arguments: dict[str, Any]
) -> tuple[Answer, list[str]]:
    """Call `name`, then retry with answers to every input request until the call
    completes; each request goes to the next of `bases`. The final answer, and the
    keys of the input requests in the order they came."""
    answer = tool_call(client, next(bases), name, arguments)
    keys: list[str] = []
    while answer.input_required:
        keys += list(answer.requests)
        answer = tool_call(
            client,
            next(bases),
            name,
            arguments,
            input_responses=answers_for(answer.requests),
            state=answer.state,
        )
    return answer, keys


def marker_count(legacy_url: str, marker: str) -> int:
    return int(stats(legacy_url)["markers"].get(marker, 0))
