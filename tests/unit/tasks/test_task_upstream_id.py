"""app/tasks/ids.py MAX_UPSTREAM_ID_CHARS: an upstream task id longer than the
bound is refused where the task is created (app/tasks/create.py), never
sealed: the task is cancelled upstream and the call fails (502), holding
nothing of the tasks' bounds and leaving no record."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from app.call import CallState
from app.cluster.sealing import Sealer, generate_key
from app.tasks import create, ids
from app.tasks.advertise import Advertiser
from app.tasks.create import TaskCreator
from app.tasks.held import Held, TaskSettings
from app.tasks.store import MemoryTaskStore
from app.upstream.errors import UpstreamProtocolError
from app.upstream.sessions.pool import credential_hash

EXT = "io.modelcontextprotocol/tasks"


def test_the_bound_is_inclusive() -> None:
    assert ids.upstream_id_fits("x" * ids.MAX_UPSTREAM_ID_CHARS)
    assert not ids.upstream_id_fits("x" * (ids.MAX_UPSTREAM_ID_CHARS + 1))


class _Pooled:
    """A session stand-in: the bounds key a session by the object itself."""


async def test_a_task_id_over_the_bound_is_cancelled_upstream_and_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []
    long_id = "u" * (ids.MAX_UPSTREAM_ID_CHARS + 1)

    async def ask(pooled: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append((method, params))
        if method == "tools/call":
            task = {"taskId": long_id, "status": "working", "ttl": 60000}
            return {"jsonrpc": "2.0", "id": 1, "result": {"task": task}}
        return {"jsonrpc": "2.0", "id": 2, "result": {}}

    monkeypatch.setattr(create, "ask", ask)
    settings = TaskSettings(
        ttl_ms=60000, max_per_owner=4, poll_ms=1000, max_result_bytes=4096, replica="r"
    )
    store = MemoryTaskStore(4)
    held = Held(None, store, Sealer([generate_key()]), settings)  # type: ignore[arg-type]
    outbound = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "slow"}}
    creator = TaskCreator(
        held,
        Advertiser((), None),
        lambda _t: lambda: None,
        lambda _t, _o: lambda: None,
        SimpleNamespace(outbound=lambda _call, _pooled: outbound),  # type: ignore[arg-type]
    )
    call = SimpleNamespace(
        id=7,
        method="tools/call",
        params={"name": "slow"},
        client_capabilities={"extensions": {EXT: {}}},
    )

    with pytest.raises(UpstreamProtocolError, match="over 512 characters") as raised:
        await creator.create(call, _Pooled(), "Bearer t", CallState(), "optional")  # type: ignore[arg-type]

    assert raised.value.status == 502
    assert [method for method, _ in asked] == ["tools/call", "tasks/cancel"]
    assert asked[1][1] == {"taskId": long_id}
    assert held.bounds.sessions == 0 and held.bounds.connections == 0
    assert held.live == {}
    assert await store.live(credential_hash("Bearer t")) == []
