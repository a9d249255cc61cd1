"""Issue 21, items 1 and 5: a 2026-07-28 client's tasks (the extension
`io.modelcontextprotocol/tasks`) through the gateway in front of a legacy
server that has 2025-11-25 tasks: the project's task fixture
(tests/fixtures/legacy_tasks_server.py, mcp 1.x experimental tasks).

The conformance suite's ten `tasks-*` scenarios run against the fixture alone
(it speaks 2025-11-25 tasks, so the modern scenarios find little they know)
and through the gateway in front of it; each run's checks are kept under
results/conformance/<stamp>-tasks-*/.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "conformance"
TASK_SCENARIOS = procs.TASK_SCENARIOS


def _one_line(text: object) -> str:
    return " ".join(str(text or "").split())[:200]


@dataclass
class ScenarioRun:
    name: str
    checks: list[dict[str, object]]
    output: str

    @property
    def problems(self) -> list[str]:
        return [
            f"{c.get('status')} {c.get('id')}: {_one_line(c.get('errorMessage'))}"
            for c in self.checks
            if c.get("status") in ("FAILURE", "WARNING")
        ]

    @property
    def clean(self) -> bool:
        """Ran, and no check is a FAILURE or a WARNING."""
        return bool(self.checks) and not self.problems


def run_scenario(url: str, name: str, out: Path) -> ScenarioRun:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(procs.require_peer(procs.NODE)),
        str(procs.CONFORMANCE),
        "server",
        "--url",
        url,
        "--scenario",
        name,
        "--output-dir",
        str(out),
    ]
    # The CLI stops a scenario itself after 30 s; this only catches a hung CLI.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    checks: list[dict[str, object]] = []
    for sub in sorted(out.glob(f"server-{name}-*")):
        file = sub / "checks.json"
        if file.is_file():
            checks = json.loads(file.read_text(encoding="utf-8"))
    return ScenarioRun(name, checks, proc.stdout + proc.stderr)


def run_all(url: str, out: Path) -> dict[str, ScenarioRun]:
    runs = {name: run_scenario(url, name, out / name) for name in TASK_SCENARIOS}
    lines = [f"{sum(r.clean for r in runs.values())}/{len(runs)} tasks-* scenarios clean"]
    for run in runs.values():
        lines.append(f"{'✓' if run.clean else '✗'} {run.name}")
        lines.extend(f"    {p}" for p in run.problems)
    (out / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return runs


def report(runs: dict[str, ScenarioRun]) -> str:
    return "\n".join(
        f"{'✓' if r.clean else '✗'} {r.name}\n" + "".join(f"    {p}\n" for p in r.problems)
        for r in runs.values()
    )


@pytest.fixture(scope="module")
def task_fixture_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("tasks")
    with procs.legacy_tasks_server(procs.free_port(), log_path=logs / "fixture.log") as url:
        yield url


@pytest.fixture(scope="module")
def task_gateway(task_fixture_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("tasks-gateway")
    with procs.gateway(task_fixture_url, procs.free_port(), log_path=logs / "gateway.log") as base:
        yield base


@pytest.mark.peers
def test_tasks_scenarios_fixture_alone_and_through_the_gateway(
    task_fixture_url: str, task_gateway: str
) -> None:
    """The fixture alone answers the modern scenarios as a 2025-11-25 server
    (its count is recorded for comparison); through the gateway all ten pass."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    alone = run_all(task_fixture_url, RESULTS / f"{stamp}-tasks-fixture-alone")
    through = run_all(task_gateway + "/mcp", RESULTS / f"{stamp}-tasks-through-gateway")
    clean_alone = sum(r.clean for r in alone.values())
    clean_through = sum(r.clean for r in through.values())
    print(f"tasks-* clean: fixture alone {clean_alone}/10, through the gateway {clean_through}/10")
    # The fixture speaks 2025-11-25 tasks: the modern scenarios cannot pass
    # against it (the one that does only skips: status notifications).
    assert clean_alone <= 1, report(alone)
    assert clean_through == len(TASK_SCENARIOS), report(through)


# ---------------------------------------------------------------------------
# Tasks are state with an owner (item 5): raw 2026-07-28 requests
# ---------------------------------------------------------------------------

EXT = "io.modelcontextprotocol/tasks"
WITH_EXT: dict[str, object] = {"extensions": {EXT: {}}}


def modern(
    client: httpx.Client,
    base: str,
    method: str,
    params: dict[str, object],
    *,
    caps: dict[str, object] | None = None,
    auth: str | None = None,
) -> tuple[int, dict[str, object]]:
    """One 2026-07-28 request; its HTTP status and its answer."""
    message = wire.body(method, params, meta={wire.META_CAPABILITIES: caps or WITH_EXT})
    extra: dict[str, str | None] = {"authorization": auth}
    if method.startswith("tasks/"):
        extra["mcp_name"] = str(params["taskId"])
    response = wire.post(client, base + "/mcp", message, wire.headers_for(message, **extra))
    return response.status_code, wire.answer_messages(response)[-1]


def settled(client: httpx.Client, base: str, task_id: str, auth: str | None, **kw: Any) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, answer = modern(client, base, "tasks/get", {"taskId": task_id}, auth=auth, **kw)
        assert status == 200, answer
        result = answer["result"]
        if result["status"] in ("completed", "failed", "cancelled"):
            return result
        time.sleep(0.2)
    raise AssertionError(f"task {task_id} did not settle within 30 s")


@pytest.mark.peers
def test_a_task_belongs_to_its_credential_and_stays_on_the_session_that_made_it(
    task_gateway: str,
) -> None:
    with httpx.Client(timeout=30) as client:
        status, created = modern(
            client,
            task_gateway,
            "tools/call",
            {"name": "slow_compute", "arguments": {"seconds": 1, "label": "owned"}},
            auth="Bearer alice",
        )
        assert status == 200, created
        task_id = created["result"]["taskId"]
        assert created["result"]["resultType"] == "task"
        # Another credential: "not found", exactly as an id that never existed.
        status, other = modern(
            client, task_gateway, "tasks/get", {"taskId": task_id}, auth="Bearer mallory"
        )
        _, unknown = modern(
            client, task_gateway, "tasks/get", {"taskId": "no-such-task"}, auth="Bearer mallory"
        )
        assert status == 400, other
        assert other["error"] == unknown["error"]
        assert other["error"]["code"] == -32602
        status, _ = modern(client, task_gateway, "tasks/cancel", {"taskId": task_id}, auth=None)
        assert status == 400
        # The owner again, declaring other capabilities: another pooled upstream
        # session serves its calls, but the task lives on the one that created it
        # (a 2025-11-25 task id is valid only there).
        done = settled(
            client,
            task_gateway,
            task_id,
            "Bearer alice",
            caps={**WITH_EXT, "elicitation": {}, "sampling": {}},
        )
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "computed owned after 1s"


@pytest.fixture(scope="module")
def bounded_gateway(
    task_fixture_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("tasks-bounded")
    env = {"MCP_SHIM_MAX_TASKS_PER_CREDENTIAL": "2", "MCP_SHIM_TASK_TTL_MS": "2000"}
    with procs.gateway(
        task_fixture_url, procs.free_port(), env=env, log_path=logs / "gateway.log"
    ) as base:
        yield base


@pytest.mark.peers
def test_live_tasks_per_credential_are_bounded_and_expire_at_their_ttl(
    bounded_gateway: str,
) -> None:
    slow = {"name": "slow_compute", "arguments": {"seconds": 30}}
    with httpx.Client(timeout=30) as client:
        ids_made = []
        for _ in range(2):
            status, created = modern(client, bounded_gateway, "tools/call", slow, auth="Bearer a")
            assert status == 200, created
            assert created["result"]["ttlMs"] == 2000
            ids_made.append(created["result"]["taskId"])
        status, refused = modern(client, bounded_gateway, "tools/call", slow, auth="Bearer a")
        assert status == 429, refused
        assert refused["error"]["code"] == -32603
        assert "MCP_SHIM_MAX_TASKS_PER_CREDENTIAL" in refused["error"]["message"]
        # Another credential has its own bound.
        status, theirs = modern(client, bounded_gateway, "tools/call", slow, auth="Bearer b")
        assert status == 200, theirs
        # At their TTL the tasks are gone (and make room again).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status, got = modern(
                client, bounded_gateway, "tasks/get", {"taskId": ids_made[0]}, auth="Bearer a"
            )
            if status == 400:
                break
            time.sleep(0.2)
        assert status == 400 and got["error"]["code"] == -32602, got
        status, again = modern(client, bounded_gateway, "tools/call", slow, auth="Bearer a")
        assert status == 200, again


@pytest.mark.peers
def test_a_result_whose_record_is_over_the_bound_makes_the_task_failed(
    task_fixture_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """MCP_SHIM_MAX_TASK_RESULT_BYTES bounds the result as it arrives and the
    record the store keeps: a result just under it whose record (the task's
    fields with it) is over it settles `failed` naming the setting, on every
    poll, never a task left unfinished and then "not found"."""
    logs = tmp_path_factory.mktemp("tasks-result-bound")
    bound = 4096
    env = {"MCP_SHIM_MAX_TASK_RESULT_BYTES": str(bound)}
    label = "x" * (bound - 400)  # the result: under the bound; its record: over it
    call = {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": label}}
    with (
        procs.gateway(
            task_fixture_url, procs.free_port(), env=env, log_path=logs / "gateway.log"
        ) as base,
        httpx.Client(timeout=30) as client,
    ):
        status, created = modern(client, base, "tools/call", call)
        assert status == 200, created
        task_id = created["result"]["taskId"]
        done = settled(client, base, task_id, None)
        assert done["status"] == "failed", done
        message = done["error"]["message"]
        assert "record would be" in message and "MCP_SHIM_MAX_TASK_RESULT_BYTES" in message
        assert settled(client, base, task_id, None) == done
    assert any(
        line.get("event") == "task_payload_too_large"
        for line in wire.log_lines(logs / "gateway.log")
    )


async def _listen_frames(
    client: httpx.AsyncClient,
    base: str,
    filter_: dict[str, object],
    caps: dict[str, object],
    auth: str | None = None,
) -> tuple[httpx.Response, asyncio.Queue[dict[str, Any]]]:
    """Open a subscriptions/listen stream; its messages arrive on the queue."""
    message = wire.body(
        "subscriptions/listen",
        {"notifications": filter_},
        rid="L1",
        meta={wire.META_CAPABILITIES: caps},
    )
    request = client.build_request(
        "POST",
        base + "/mcp",
        content=json.dumps(message).encode(),
        headers=wire.headers_for(message, authorization=auth),
    )
    response = await client.send(request, stream=True)
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def pump() -> None:
        buffer = ""
        async for chunk in response.aiter_text():
            buffer += chunk
            while "\n\n" in buffer:
                event, buffer = buffer.split("\n\n", 1)
                for m in wire.sse_messages(event + "\n\n"):
                    queue.put_nowait(m)

    if response.headers.get("content-type", "").startswith("text/event-stream"):
        asyncio.get_running_loop().create_task(pump())
    else:
        await response.aread()
        queue.put_nowait(response.json())
    return response, queue


async def _next_status(queue: asyncio.Queue[dict[str, Any]], wanted: str) -> dict[str, Any]:
    async with asyncio.timeout(15):
        while True:
            message = await queue.get()
            if message.get("method") == "notifications/tasks":
                params = dict(message["params"])
                if params["status"] == wanted:
                    return params


@pytest.mark.peers
async def test_task_status_notifications_on_the_owners_listen_stream(task_gateway: str) -> None:
    caps = {**WITH_EXT, "elicitation": {}}
    async with httpx.AsyncClient(timeout=30) as client:
        message = wire.body(
            "tools/call",
            {"name": "confirm_delete", "arguments": {"filename": "a.txt"}},
            meta={wire.META_CAPABILITIES: caps},
        )
        created = await client.post(
            task_gateway + "/mcp",
            content=json.dumps(message).encode(),
            headers=wire.headers_for(message),
        )
        task_id = created.json()["result"]["taskId"]
        # Without the extension declared: -32021 (SEP-2663).
        refused, queue = await _listen_frames(client, task_gateway, {"taskIds": [task_id]}, {})
        assert refused.status_code == 400
        assert (await queue.get())["error"]["code"] == -32021
        # Another credential's task is not honoured.
        other, queue = await _listen_frames(
            client, task_gateway, {"taskIds": [task_id]}, caps, auth="Bearer someone-else"
        )
        ack = await asyncio.wait_for(queue.get(), 10)
        assert ack["params"]["notifications"] == {}, ack
        await other.aclose()
        # The owner's stream: the status now, then each change, the result inlined.
        stream, queue = await _listen_frames(client, task_gateway, {"taskIds": [task_id]}, caps)
        try:
            ack = await asyncio.wait_for(queue.get(), 10)
            assert ack["params"]["notifications"] == {"taskIds": [task_id]}, ack
            asking = await _next_status(queue, "input_required")
            assert asking["taskId"] == task_id
            (key,) = asking["inputRequests"]
            update = wire.body(
                "tasks/update",
                {
                    "taskId": task_id,
                    "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}},
                },
                meta={wire.META_CAPABILITIES: caps},
            )
            acked = await client.post(
                task_gateway + "/mcp",
                content=json.dumps(update).encode(),
                headers=wire.headers_for(update, mcp_name=task_id),
            )
            assert acked.json()["result"] == {"resultType": "complete"}
            done = await _next_status(queue, "completed")
            assert done["result"]["content"][0]["text"] == "deleted a.txt"
            assert done["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L1"
        finally:
            await stream.aclose()
        # A stream opened after the end hears the final status at once.
        late, queue = await _listen_frames(client, task_gateway, {"taskIds": [task_id]}, caps)
        try:
            again = await _next_status(queue, "completed")
            assert again["result"] == done["result"]
        finally:
            await late.aclose()


@pytest.mark.peers
def test_any_worker_answers_for_a_task_another_one_runs(
    task_fixture_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """MCP_SHIM_WORKERS=2: the task runs on the worker that created it (its
    upstream session is there); a request for it on the other worker is relayed
    there, named by the sealed task id, and answered."""
    from tests.integration.test_workers import _up

    log = tmp_path_factory.mktemp("tasks-workers") / "gateway.log"
    env = {"MCP_SHIM_WORKERS": "2"}
    with (
        procs.gateway_process(task_fixture_url, procs.free_port(), env, log_path=log) as (
            base,
            proc,
        ),
        httpx.Client(timeout=30) as client,
    ):
        urls = _up(base, proc, log, 2).internal()
        slow = {"name": "slow_compute", "arguments": {"seconds": 1, "label": "w"}}
        status, created = modern(client, urls[0], "tools/call", slow, auth="Bearer w")
        assert status == 200, created
        task_id = created["result"]["taskId"]
        status, seen = modern(client, urls[1], "tasks/get", {"taskId": task_id}, auth="Bearer w")
        assert status == 200, seen
        assert seen["result"]["taskId"] == task_id
        done = settled(client, urls[1], task_id, "Bearer w")
        assert done["status"] == "completed", done
        # Still another credential's "not found" on the other worker.
        status, other = modern(client, urls[1], "tasks/get", {"taskId": task_id}, auth="Bearer x")
        assert (status, other["error"]["code"]) == (400, -32602)
    relayed = [line for line in wire.log_lines(log) if line["event"] == "task_request_forwarded"]
    assert relayed and all(line["worker"] == 1 for line in relayed)


@pytest.mark.peers
def test_a_finished_task_lets_its_session_go_without_being_polled(
    task_fixture_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The payload arrives on the task's tasks/result stream: the result goes to
    the store and the upstream session's lease is released then, not at the
    client's next poll (a client that never polls again holds nothing upstream)."""
    log = tmp_path_factory.mktemp("tasks-settle") / "gateway.log"
    with (
        procs.gateway(task_fixture_url, procs.free_port(), log_path=log) as base,
        httpx.Client(timeout=30) as client,
    ):
        slow = {"name": "slow_compute", "arguments": {"seconds": 0.5, "label": "quiet"}}
        status, created = modern(client, base, "tools/call", slow)
        assert status == 200, created
        deadline = time.monotonic() + 10
        while not any(line["event"] == "task_settled" for line in wire.log_lines(log)):
            assert time.monotonic() < deadline, "the task was not settled without a poll"
            time.sleep(0.1)
        done = settled(client, base, created["result"]["taskId"], None)
    assert done["result"]["content"][0]["text"] == "computed quiet after 0.5s"


@pytest.mark.peers
def test_after_the_upstream_forgot_its_sessions_new_tasks_start_and_lost_ones_fail(
    task_fixture_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A 404 for the pooled session: a new task is sent once more on a fresh
    session (the handler never ran) and pins that one; a task pinned to the
    forgotten session can no longer be reached and settles failed."""
    log = tmp_path_factory.mktemp("tasks-expired") / "gateway.log"
    fixture = task_fixture_url.rsplit("/mcp", 1)[0]
    with (
        procs.gateway(task_fixture_url, procs.free_port(), log_path=log) as base,
        httpx.Client(timeout=30) as client,
    ):
        slow = {"name": "slow_compute", "arguments": {"seconds": 30, "label": "lost"}}
        _, before = modern(client, base, "tools/call", slow, auth="Bearer e")
        httpx.post(fixture + "/debug/expire-sessions", timeout=10).raise_for_status()
        quick = {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": "fresh"}}
        status, after = modern(client, base, "tools/call", quick, auth="Bearer e")
        assert status == 200, after
        assert after["result"]["resultType"] == "task"
        done = settled(client, base, after["result"]["taskId"], "Bearer e")
        assert done["result"]["content"][0]["text"] == "computed fresh after 0.2s"
        lost = settled(client, base, before["result"]["taskId"], "Bearer e")
    assert lost["status"] == "failed", lost
    assert lost["error"]["code"] == -32603
