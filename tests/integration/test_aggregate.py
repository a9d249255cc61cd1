"""The aggregated /mcp in front of real servers of three kinds: the legacy
fixture (mcp 1.x, Streamable HTTP), the modern fixture (mcp 2.x, 2026-07-28
only) and npm's server-everything over stdio, one gateway with a servers file.

Real clients of both eras (mcp 2.x from .peers/modern, mcp 1.x from
.peers/legacy) list every server's tools, prefixed, and call one of each,
including the legacy server's elicitation; every listed resource is read
through the aggregate from the server that listed it; a hung server is left
out of the list within the bound and its tools come back when it does; and
with aggregation off /mcp is not served while the named routes are.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.everything import EVERYTHING, node_command

BOUND_S = 3.0
CALLS = (
    'legacy__echo:{"text": "hi legacy"}',
    'modern__test_echo:{"text": "hi modern"}',
    'everything__echo:{"message": "hi everything"}',
    'legacy__test_elicitation:{"message": "Who are you?"}',
)


def servers_file(path: Path, legacy: str, modern: str, stdio: bool = True) -> Path:
    entries: dict[str, Any] = {"legacy": {"url": legacy}, "modern": {"url": modern}}
    if stdio:
        words = shlex.split(node_command(EVERYTHING, "stdio"))
        entries["everything"] = {"command": words[0], "args": words[1:]}
    path.write_text(json.dumps({"mcpServers": entries}))
    return path


@contextmanager
def many_servers_gateway(env: dict[str, str], log: Path) -> Iterator[str]:
    """The gateway in front of a servers file (no single upstream); its base URL."""
    port = procs.free_port()
    full = {"MCP_SHIM_PORT": str(port), "MCP_SHIM_HOST": "127.0.0.1", **env}
    base = f"http://127.0.0.1:{port}"
    with procs.running(
        [sys.executable, "-m", "app.serving.cli"], base + "/healthz", env=full, log_path=log
    ):
        yield base


def logged(log: Path, event: str, **fields: str) -> list[dict[str, Any]]:
    return [
        line
        for line in wire.log_lines(log)
        if line.get("event") == event and all(line.get(k) == v for k, v in fields.items())
    ]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, int]]:
    logs = tmp_path_factory.mktemp("aggregate-servers")
    with (
        procs.legacy_server(procs.free_port(), log_path=logs / "legacy.log") as legacy,
        procs.modern_server(procs.free_port(), log_path=logs / "modern.log") as modern,
    ):
        yield legacy, modern, _pid_on(modern)


def _pid_on(url: str) -> int:
    """The modern fixture's process (to stop and continue it): the one listening on its port."""
    port = httpx.URL(url).port
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True)
    pid = out.stdout.split("pid=")[1].split(",")[0]
    return int(pid)


@pytest.fixture(scope="module")
def gateway(
    servers: tuple[str, str, int], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    legacy, modern, _ = servers
    where = tmp_path_factory.mktemp("aggregate")
    log = where / "gateway.log"
    env = {
        "MCP_SHIM_SERVERS_FILE": str(servers_file(where / "servers.json", legacy, modern)),
        "MCP_SHIM_AGGREGATE_LIST_TIMEOUT_S": str(BOUND_S),
    }
    with many_servers_gateway(env, log) as base:
        # Every server answering once (a stdio server's first process starts
        # on first use, which a loaded machine may take longer than the bound).
        deadline = time.monotonic() + 60
        while _prefixes(_list(base)[1]) != {"legacy", "modern", "everything"}:
            assert time.monotonic() < deadline, "not every server answered within 60 s"
            time.sleep(0.5)
        yield base, log


def _list(base: str) -> tuple[float, list[str], dict[str, Any]]:
    message = wire.body("tools/list")
    started = time.monotonic()
    with httpx.Client(timeout=30) as client:
        response = wire.post(client, base + "/mcp", message, wire.headers_for(message))
    took = time.monotonic() - started
    result = response.json()["result"]
    return took, [t["name"] for t in result["tools"]], result


def _prefixes(names: list[str]) -> set[str]:
    return {n.split("__")[0] for n in names}


def _check_calls(out: dict[str, Any]) -> None:
    assert _prefixes(out["tools"]) == {"legacy", "modern", "everything"}
    calls = out["calls"]
    texts = {name: calls[name]["result"]["content"][0]["text"] for name in calls}
    assert texts["legacy__echo"] == "hi legacy"
    assert texts["modern__test_echo"] == "hi modern"
    assert texts["everything__echo"] == "Echo: hi everything"
    assert '"username": "ada"' in texts["legacy__test_elicitation"]
    assert out["asked"] == ["Who are you?"]


def test_modern_client_lists_and_calls_every_server(gateway: tuple[str, Path]) -> None:
    base, _ = gateway
    out = procs.run_modern_client("aggregate.py", base + "/mcp", *CALLS)
    assert isinstance(out, dict)
    assert out["protocolVersion"] == "2026-07-28"
    _check_calls(out)


def test_legacy_client_lists_and_calls_every_server(gateway: tuple[str, Path]) -> None:
    base, _ = gateway
    out = procs.run_legacy_client("aggregate.py", base + "/mcp", "2025-11-25", *CALLS)
    assert isinstance(out, dict)
    assert out["initialize"]["serverInfo"]["name"] == "mcp-shim aggregate"
    assert (
        "## everything (tools and prompts named `everything__...`)"
        in out["initialize"]["instructions"]
    )
    _check_calls(out)


def test_http_sse_client_at_the_aggregate(gateway: tuple[str, Path]) -> None:
    """A 2024-11-05 HTTP+SSE client at /sse: every server's tools, and a call."""
    base, _ = gateway
    arguments = json.dumps({"message": "over sse"})
    out: Any = procs.run_legacy_client(
        "list_and_call.py", base + "/sse", "2024-11-05", "everything__echo", arguments
    )
    assert out["protocolVersion"] == "2024-11-05"
    assert out["server"]["name"] == "mcp-shim aggregate"
    assert _prefixes(out["tools"]) == {"legacy", "modern", "everything"}
    assert out["call"]["result"]["content"][0]["text"] == "Echo: over sse"


def test_every_listed_resource_is_read_from_its_server(gateway: tuple[str, Path]) -> None:
    """The two fixtures share URIs: the first server in the file (legacy) keeps
    them, the modern server's copies are listed and read as `mcp-shim:modern/...`."""
    base, log = gateway
    served_by: dict[str, str] = {}
    with httpx.Client(timeout=30) as client:
        listed = wire.body("resources/list")
        response = wire.post(client, base + "/mcp", listed, wire.headers_for(listed))
        uris = [r["uri"] for r in response.json()["result"]["resources"]]
        assert len(uris) == len(set(uris)), "a URI listed twice would be routed to one server"
        for uri in uris[:40]:
            read = wire.body("resources/read", {"uri": uri})
            answer = wire.post(client, base + "/mcp", read, wire.headers_for(read))
            result = wire.answer_messages(answer)[-1]["result"]
            served_by[uri] = result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"]
            if result.get("resultType") == "input_required":  # asks first: its state sealed
                assert isinstance(result["requestState"], str), result
                continue
            assert result["contents"][0]["uri"] == uri, (uri, result)
        unknown = wire.body("resources/read", {"uri": "file:///no/such/resource"})
        answer = wire.post(client, base + "/mcp", unknown, wire.headers_for(unknown))
        assert answer.json()["error"]["code"] == -32602
    made = {u for u in uris if u.startswith("mcp-shim:")}
    assert made, "the fixtures share URIs: the modern server's copies are gateway-made"
    shared = {(s["server"], s["uri"]) for s in logged(log, "aggregate_uri_shared")}
    for uri in made:
        assert served_by[uri] == "mcp-shim-modern-fixture"
        own = uri.removeprefix("mcp-shim:modern/")
        assert ("modern", own) in shared
        assert served_by[own] == "mcp-shim-legacy-fixture"


def test_hung_server_left_out_within_the_bound_and_back_when_it_is(
    servers: tuple[str, str, int], gateway: tuple[str, Path]
) -> None:
    _, _, pid = servers
    base, log = gateway
    _, before, _ = _list(base)
    assert "modern" in _prefixes(before)
    os.kill(pid, signal.SIGSTOP)
    try:
        took, names, result = _list(base)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert took < BOUND_S + 1.5, took
    assert _prefixes(names) == {"legacy", "everything"}
    assert result["ttlMs"] == 0
    assert [n for n in before if not n.startswith("modern__")] == names
    assert logged(log, "aggregate_member_left_out", server="modern", reason="timeout")
    _, after, _ = _list(base)
    assert after == before
    with httpx.Client(timeout=10) as client:
        metrics = client.get(base + "/metrics").text
    assert 'mcp_shim_aggregate_left_out_total{reason="timeout",server="modern"}' in metrics


def test_aggregation_off_serves_named_routes_only(
    servers: tuple[str, str, int], tmp_path: Path
) -> None:
    legacy, modern, _ = servers
    env = {
        "MCP_SHIM_SERVERS_FILE": str(
            servers_file(tmp_path / "servers.json", legacy, modern, stdio=False)
        ),
        "MCP_SHIM_AGGREGATE": "false",
    }
    with many_servers_gateway(env, tmp_path / "gateway.log") as base:
        message = wire.body("tools/list")
        with httpx.Client(timeout=30) as client:
            top = wire.post(client, base + "/mcp", message, wire.headers_for(message))
            named = wire.post(
                client, base + "/servers/legacy/mcp", message, wire.headers_for(message)
            )
        assert top.status_code == 404
        assert "echo" in [t["name"] for t in named.json()["result"]["tools"]]


def _call(base: str, name: str, rid: int) -> dict[str, Any]:
    message = wire.body("tools/call", {"name": name, "arguments": {}}, rid=rid)
    with httpx.Client(timeout=30) as client:
        answer = wire.post(client, base + "/mcp", message, wire.headers_for(message))
    return wire.answer_messages(answer)[-1]


def test_listen_merges_every_servers_notifications(gateway: tuple[str, Path]) -> None:
    """One listen at /mcp: acknowledged for all, and a list change of the
    legacy server and of the modern server both arrive on it, naming it."""
    base, _ = gateway
    message = wire.body(
        "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, rid=77
    )
    with (
        httpx.Client(timeout=20) as client,
        client.stream(
            "POST", base + "/mcp", json=message, headers=wire.headers_for(message)
        ) as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = (json.loads(line[5:]) for line in stream.iter_lines() if line.startswith("data:"))
        first = next(events)
        assert first["method"] == "notifications/subscriptions/acknowledged"
        assert first["params"]["notifications"] == {"toolsListChanged": True}
        for rid, tool in enumerate(
            ("legacy__test_trigger_tool_change", "modern__test_trigger_tool_change")
        ):
            assert "result" in _call(base, tool, 100 + rid)
            changed = next(events)
            assert changed["method"] == "notifications/tools/list_changed", changed
            assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 77


def test_a_task_through_the_aggregate_is_polled_at_its_server(
    servers: tuple[str, str, int], tmp_path: Path
) -> None:
    """The task fixture (mcp 1.x, 2025-11-25 tasks) as a member: a task made at
    /mcp has an id the aggregate sealed with the member's name, polled to its
    end at /mcp; the id means nothing at the member's own route."""
    legacy, _, _ = servers
    ext = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    with procs.legacy_tasks_server(procs.free_port(), log_path=tmp_path / "tasks.log") as tasks:
        path = tmp_path / "servers.json"
        path.write_text(
            json.dumps({"mcpServers": {"legacy": {"url": legacy}, "tasks": {"url": tasks}}})
        )
        with (
            many_servers_gateway(
                {"MCP_SHIM_SERVERS_FILE": str(path)}, tmp_path / "gateway.log"
            ) as base,
            httpx.Client(timeout=30) as client,
        ):

            def ask(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
                message = wire.body(method, params, meta={wire.META_CAPABILITIES: ext})
                extra = {"mcp_name": params["taskId"]} if method.startswith("tasks/") else {}
                answer = wire.post(client, url, message, wire.headers_for(message, **extra))
                return wire.answer_messages(answer)[-1]

            made = ask(
                base + "/mcp",
                "tools/call",
                {"name": "tasks__slow_compute", "arguments": {"seconds": 1, "label": "agg"}},
            )
            assert made["result"]["resultType"] == "task", made
            task_id = made["result"]["taskId"]
            deadline = time.monotonic() + 30
            while True:
                got = ask(base + "/mcp", "tasks/get", {"taskId": task_id})["result"]
                if (
                    got["status"] in ("completed", "failed", "cancelled")
                    or time.monotonic() > deadline
                ):
                    break
                time.sleep(0.2)
            assert got["status"] == "completed", got
            assert got["taskId"] == task_id
            elsewhere = ask(base + "/servers/tasks/mcp", "tasks/get", {"taskId": task_id})
            assert elsewhere["error"]["code"] == -32602
            forged = ask(base + "/mcp", "tasks/get", {"taskId": task_id[:-4] + "AAAA"})
            assert forged["error"]["code"] == -32602


def _calls_counted(base: str, era: str = "modern") -> dict[str, float]:
    """tools/call answers to clients of `era` counted on /metrics, by the graph that answered."""
    text = httpx.get(base + "/metrics", timeout=10).text
    counted: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("mcp_shim_calls_total{") and 'method="tools/call"' in line:
            if f'client_era="{era}"' in line:
                server = line.split('server="')[1].split('"')[0]
                counted[server] = counted.get(server, 0.0) + float(line.rsplit(" ", 1)[1])
    return counted


def test_a_modern_call_on_the_aggregate_is_answered_by_its_servers_route(
    gateway: tuple[str, Path],
) -> None:
    """A 2026-07-28 tools/call on /mcp goes straight to the member's route
    (app/servers/aggregate/direct.py): counted there, not by the top-level
    graph in front of the aggregate's endpoint."""
    base, _ = gateway
    before = _calls_counted(base)
    answer = _call(base, "legacy__echo", 501)
    assert answer["result"]["isError"] is False, answer
    after = _calls_counted(base)
    assert after.get("legacy", 0) == before.get("legacy", 0) + 1
    assert after.get("/mcp", 0) == before.get("/mcp", 0)


def test_a_legacy_sessions_call_is_answered_at_its_servers_route_in_a_session_of_its_own(
    gateway: tuple[str, Path],
) -> None:
    """A legacy client's tools/call on /mcp goes to the member's route in a
    session the gateway opened there for this client session
    (app/servers/aggregate/direct_legacy.py): counted at the member in the
    client's era, not by the top-level graph; the client's DELETE ends it."""
    base, log = gateway
    plain = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    with httpx.Client(timeout=30) as client:
        opened = client.post(base + "/mcp", json=wire.legacy_initialize(), headers=plain)
        assert opened.status_code == 200, opened.text
        session = {
            **plain,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert client.post(base + "/mcp", json=done, headers=session).status_code == 202
        before = _calls_counted(base, "legacy")
        for rid in (1, 2):
            call = {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "tools/call",
                "params": {"name": "legacy__echo", "arguments": {"text": f"direct {rid}"}},
            }
            answer = wire.answer_messages(client.post(base + "/mcp", json=call, headers=session))
            assert answer[-1]["result"]["content"][0]["text"] == f"direct {rid}", answer
        after = _calls_counted(base, "legacy")
        assert after.get("legacy", 0) == before.get("legacy", 0) + 2
        assert after.get("/mcp", 0) == before.get("/mcp", 0)
        opened_there = logged(log, "aggregate_member_session_opened", server="legacy")
        assert opened_there, "no session opened at the member's route"
        ended = len(logged(log, "legacy_session_ended", server="legacy"))
        assert client.delete(base + "/mcp", headers=session).status_code == 200
    # The member's session ends with the client's.
    deadline = time.monotonic() + 10
    while len(logged(log, "legacy_session_ended", server="legacy")) <= ended:
        assert time.monotonic() < deadline, "the member's session outlived the client's"
        time.sleep(0.1)
