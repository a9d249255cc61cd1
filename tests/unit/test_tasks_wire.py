"""translators/tasks.py: the task shapes of 2025-11-25 core tasks and of the
2026-07-28 extension, on golden tables; app/tasks/ids.py: sealed task ids."""

from __future__ import annotations

from typing import Any

import pytest

from app.cluster.sealing import Sealer, generate_key
from app.tasks import ids
from translators import tasks as wire

EXT = "io.modelcontextprotocol/tasks"
RELATED = {"io.modelcontextprotocol/related-task": {"taskId": "up-1"}}

LEGACY_TASK = {
    "taskId": "scope:uuid",
    "status": "working",
    "createdAt": "2026-12-01T10:00:00Z",
    "lastUpdatedAt": "2026-12-01T10:00:01Z",
    "ttl": 60000,
    "pollInterval": 500,
}
MODERN_FIELDS = {
    "taskId": "sealed",
    "status": "working",
    "createdAt": "2026-12-01T10:00:00Z",
    "lastUpdatedAt": "2026-12-01T10:00:01Z",
    "ttlMs": 60000,
    "pollIntervalMs": 500,
}


@pytest.mark.parametrize(
    ("caps", "declared"),
    [
        ({"extensions": {EXT: {}}}, True),
        ({"extensions": {EXT: {"x": 1}}, "elicitation": {}}, True),
        ({"extensions": {}}, False),
        ({"extensions": {EXT: True}}, False),
        ({"tasks": {}}, False),
        ({}, False),
        (None, False),
    ],
)
def test_declares_extension(caps: Any, declared: bool) -> None:
    assert wire.declares_extension(caps) is declared


@pytest.mark.parametrize(
    ("caps", "runs"),
    [
        ({"tasks": {"requests": {"tools": {"call": {}}}}}, True),
        ({"tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}}, True),
        ({"tasks": {"requests": {"sampling": {"createMessage": {}}}}}, False),
        ({"tasks": {}}, False),
        ({"tools": {}}, False),
    ],
)
def test_upstream_runs_tool_tasks(caps: dict[str, Any], runs: bool) -> None:
    assert wire.upstream_runs_tool_tasks(caps) is runs


def test_advertise_puts_the_extension_under_extensions_and_drops_the_v1_slot() -> None:
    caps = {"tools": {"listChanged": True}, "tasks": {"list": {}}, "extensions": {"other": {}}}
    assert wire.advertise(caps) == {
        "tools": {"listChanged": True},
        "extensions": {"other": {}, EXT: {}},
    }
    assert caps["extensions"] == {"other": {}}  # input untouched


def test_with_task_support_carries_optional_and_required_only() -> None:
    upstream = {
        "tools": [
            {"name": "greet", "execution": {"taskSupport": "forbidden"}},
            {"name": "slow", "execution": {"taskSupport": "optional"}},
            {"name": "job", "execution": {"taskSupport": "required"}},
            {"name": "plain"},
            {"name": "odd", "execution": {"taskSupport": "sometimes"}},
        ]
    }
    modes = {t["name"]: wire.tool_mode(t) for t in upstream["tools"]}
    assert modes == {
        "greet": "forbidden",
        "slow": "optional",
        "job": "required",
        "plain": "forbidden",
        "odd": "forbidden",
    }
    translated = {"resultType": "complete", "tools": [{"name": n} for n in modes]}
    out = wire.with_task_support(translated, modes)
    assert out["tools"] == [
        {"name": "greet"},
        {"name": "slow", "execution": {"taskSupport": "optional"}},
        {"name": "job", "execution": {"taskSupport": "required"}},
        {"name": "plain"},
        {"name": "odd"},
    ]
    assert wire.with_task_support(translated, {"greet": "forbidden"}) is translated


@pytest.mark.parametrize(
    ("legacy", "expected"),
    [
        (LEGACY_TASK, MODERN_FIELDS),
        # ttl null: unlimited; no pollInterval: the gateway's
        (
            {**LEGACY_TASK, "ttl": None, "pollInterval": None},
            {**MODERN_FIELDS, "ttlMs": None, "pollIntervalMs": 1000},
        ),
        # fractional legacy values become whole milliseconds
        (
            {**LEGACY_TASK, "ttl": 1500.4, "pollInterval": 0.2},
            {**MODERN_FIELDS, "ttlMs": 1500, "pollIntervalMs": 1},
        ),
        (
            {**LEGACY_TASK, "status": "input_required", "statusMessage": "asking"},
            {**MODERN_FIELDS, "status": "input_required", "statusMessage": "asking"},
        ),
    ],
)
def test_task_fields_legacy_to_extension(legacy: dict[str, Any], expected: dict[str, Any]) -> None:
    fields = wire.task_fields(legacy, "sealed", 1000)
    assert fields == expected
    assert "ttl" not in fields and "pollInterval" not in fields
    created = wire.create_task_result(fields)
    assert created == {"resultType": "task", **expected}
    assert "task" not in created and "requestState" not in created


def test_legacy_task_reads_only_a_create_task_result() -> None:
    assert wire.legacy_task({"task": LEGACY_TASK}) == LEGACY_TASK
    assert wire.legacy_task({"content": []}) is None
    assert wire.legacy_task({"task": {**LEGACY_TASK, "status": "done"}}) is None
    assert wire.legacy_task({"task": {"status": "working"}}) is None
    assert wire.legacy_task_param(60000) == {"ttl": 60000}


TOOL_RESULT = {"content": [{"type": "text", "text": "ok"}], "_meta": RELATED}
TOOL_ERROR = {"content": [{"type": "text", "text": "no"}], "isError": True, "_meta": RELATED}


@pytest.mark.parametrize(
    ("status", "payload", "final", "inline"),
    [
        (
            "completed",
            {"result": TOOL_RESULT},
            "completed",
            {"result": {"content": [{"type": "text", "text": "ok"}]}},
        ),
        # 2025-11-25 fails a task whose tool result has isError; the extension
        # keeps `failed` for protocol errors.
        (
            "failed",
            {"result": TOOL_ERROR},
            "completed",
            {"result": {"content": [{"type": "text", "text": "no"}], "isError": True}},
        ),
        (
            "failed",
            {"error": {"code": -32603, "message": "crashed"}},
            "failed",
            {"error": {"code": -32603, "message": "crashed"}},
        ),
        ("failed", {"result": {"_meta": RELATED}}, "failed", None),
        ("cancelled", {"result": {"_meta": RELATED}}, "cancelled", {}),
    ],
)
def test_inline_payload(
    status: str, payload: dict[str, Any], final: str, inline: dict[str, Any] | None
) -> None:
    got_status, got_inline = wire.inline_payload(status, payload)
    assert got_status == final
    if inline is None:
        assert set(got_inline) == {"error"} and got_inline["error"]["code"] == -32603
    else:
        assert got_inline == inline
    assert "_meta" not in got_inline.get("result", {})


def test_detailed_task_shapes() -> None:
    done = wire.detailed_task({**MODERN_FIELDS, "status": "completed"}, {"result": {"a": 1}})
    assert done == {
        "resultType": "complete",
        **MODERN_FIELDS,
        "status": "completed",
        "result": {"a": 1},
    }
    asking = wire.detailed_task(MODERN_FIELDS, None, {"elicitation_1": {"method": "m"}})
    assert asking["status"] == "input_required"
    assert asking["inputRequests"] == {"elicitation_1": {"method": "m"}}
    assert "requestState" not in asking
    assert wire.acknowledgement() == {"resultType": "complete"}


@pytest.fixture
def sealer() -> Sealer:
    return Sealer([generate_key()])


def test_task_ids_are_sealed_and_bound_to_their_owner(sealer: Sealer) -> None:
    upstream = "the-upstream-task-id"
    ref = ids.TaskRef(owner=ids.owner_of("a" * 64), replica="r1", upstream_id=upstream, local="7")
    token = ids.seal(sealer, ref)
    assert upstream not in token and token != ids.seal(sealer, ref)  # opaque, fresh nonce
    assert ids.open_for(sealer, token, ids.owner_of("a" * 64)) == ref
    assert ids.open_for(sealer, token, ids.owner_of("b" * 64)) is None
    altered = token[:20] + ("B" if token[20] != "B" else "C") + token[21:]
    assert ids.open_for(sealer, altered, ids.owner_of("a" * 64)) is None
    assert ids.open_for(Sealer([generate_key()]), token, ids.owner_of("a" * 64)) is None
    assert ids.open_for(sealer, 12, ids.owner_of("a" * 64)) is None


def test_a_task_id_and_a_round_state_never_open_as_each_other(sealer: Sealer) -> None:
    owner = ids.owner_of("-")
    ref = ids.TaskRef(owner=owner, replica="r", upstream_id="u", local="1")
    task_id = ids.seal(sealer, ref)
    state = ids.seal_round(sealer, task_id, owner)
    assert ids.open_round(sealer, state, owner) == task_id
    assert ids.open_round(sealer, state, ids.owner_of("c" * 64)) is None
    assert ids.open_round(sealer, task_id, owner) is None
    assert ids.open_for(sealer, state, owner) is None
    # Nor does any other sealed token (a requestState, a session id).
    assert ids.open_for(sealer, sealer.seal_bytes(b'{"o":"-"}'), owner) is None


def _request(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": "q1", "method": method, "params": params or {}}


def test_server_requests_during_a_task_shown_or_answered_by_the_gateway() -> None:
    from app.tasks.live import MAX_QUESTIONS, unshown_reply

    elicit = _request("elicitation/create", {"mode": "form", "message": "?"})
    # A question for a caller that declared the capability: shown (None).
    assert unshown_reply(elicit, {"elicitation": {}}, 0) is None
    # ping: the gateway answers it.
    assert unshown_reply(_request("ping"), {}, 0) == {"jsonrpc": "2.0", "id": "q1", "result": {}}
    # No capability declared: refused as the MRTR bridge refuses it.
    refused = unshown_reply(elicit, {}, 0)
    assert refused is not None and refused["error"]["code"] == -32601
    sampling = unshown_reply(_request("sampling/createMessage"), {"elicitation": {}}, 0)
    assert sampling is not None and sampling["error"]["code"] == -32601
    # Beyond the bound of pending questions.
    full = unshown_reply(elicit, {"elicitation": {}}, MAX_QUESTIONS)
    assert full is not None and full["error"]["code"] == -32603


@pytest.mark.parametrize(("granted", "told"), [(60000, 60000), (10**9, 3600000), (None, 3600000)])
def test_the_ttl_told_is_at_most_the_gateways(granted: Any, told: int) -> None:
    from types import SimpleNamespace

    from app.tasks.held import Held, TaskSettings
    from app.tasks.store import MemoryTaskStore

    settings = TaskSettings(
        ttl_ms=3600000, max_per_owner=4, poll_ms=1000, max_result_bytes=4096, replica="r"
    )
    held = Held(None, MemoryTaskStore(4), Sealer([generate_key()]), settings)
    fields = held.fields(SimpleNamespace(task_id="t"), {**LEGACY_TASK, "ttl": granted})
    assert fields["ttlMs"] == told
