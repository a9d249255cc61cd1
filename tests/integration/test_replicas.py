"""Three gateway replicas behind a real load balancer (Debian's haproxy, round
robin, no affinity) in front of the legacy fixture (mcp 1.x)::

    clients ── haproxy ──┬── gateway r1 ──┐
                         ├── gateway r2 ──┼── legacy fixture (its own ledger)
                         └── gateway r3 ──┘

Each request goes to whichever replica haproxy picks. What lives in one
replica's memory (a parked MRTR call, a legacy client's session, an HTTP+SSE
channel) is named, sealed, in what the client holds; the replica a request
reaches relays it to the owner (app/cluster/replicas.py). The tests check that every
kind of client works whichever replica each request reaches, and that each
call reaches the upstream exactly once (the fixture counts tool calls by
name and by `marker` argument).

haproxy is installed by scripts/setup_peers.sh (apt-get); without it these
tests fail, they never skip.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import wire

LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None
    )
    if found is None:
        raise RuntimeError(
            "haproxy is not installed: run scripts/setup_peers.sh haproxy (apt-get install "
            "haproxy as root); the replica tests need a real load balancer"
        )
    return found


HAPROXY_CONFIG = """\
global
    maxconn 1024
defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout http-keep-alive 10s
    # A client that closes its connection mid-answer closes the replica's too, at
    # once: a GET stream's end reaches the owner and the upstream (which allows
    # one GET stream per session) instead of waiting for the next write.
    option abortonclose
frontend mcp
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    # Every request to the next replica, whatever connection it came on: no
    # stickiness of any kind (no prefer-last-server, no cookie, no hash).
    balance roundrobin
{servers}
"""


@contextlib.contextmanager
def haproxy(targets: list[int], workdir: Path, log_path: Path) -> Iterator[str]:
    port = procs.free_port()
    servers = "\n".join(f"    server r{n} 127.0.0.1:{p}" for n, p in enumerate(targets, 1))
    config = workdir / "haproxy.cfg"
    config.write_text(HAPROXY_CONFIG.format(port=port, servers=servers))
    binary = haproxy_binary()
    check = subprocess.run([binary, "-c", "-f", str(config)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    base = f"http://127.0.0.1:{port}"
    # -db: foreground, no daemon; it is this test's child and ends with it.
    with procs.running([binary, "-db", "-f", str(config)], base + "/healthz", log_path=log_path):
        yield base


@dataclass
class Cluster:
    url: str  # haproxy's base URL
    replicas: list[str]  # each replica's base URL (direct, for tests that need one)
    logs: list[Path]
    legacy_url: str  # the fixture's MCP endpoint
    ghost: str  # a replica advertising an address where nothing listens

    def stats(self) -> dict[str, Any]:
        return mw.stats(self.legacy_url)

    def events(self, name: str, **match: Any) -> list[int]:
        """How many log lines of this event (with these fields) each replica wrote."""
        return [
            sum(
                1
                for line in wire.log_lines(path)
                if line.get("event") == name and all(line.get(k) == v for k, v in match.items())
            )
            for path in self.logs
        ]


@pytest.fixture(scope="module")
def cluster(logs_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    key = base64.b64encode(os.urandom(32)).decode()
    ports = [procs.free_port() for _ in range(3)]
    logs = [logs_dir / f"replica-{n}.log" for n in (1, 2, 3)]
    ghost_port, nowhere = procs.free_port(), procs.free_port()
    envs = [
        {"MCP_SHIM_STATE_KEY": key, "MCP_SHIM_ADVERTISE_URL": f"http://127.0.0.1:{p}"}
        for p in ports
    ]
    with contextlib.ExitStack() as stack:
        legacy = stack.enter_context(
            procs.legacy_server(procs.free_port(), log_path=logs_dir / "replicas-legacy.log")
        )
        bases = [
            stack.enter_context(procs.gateway(legacy, port, env=env, log_path=log))
            for port, env, log in zip(ports, envs, logs, strict=True)
        ]
        # Same key, but it advertises a port where nothing listens: what the others
        # see of a replica that died after handing out session ids.
        ghost = stack.enter_context(
            procs.gateway(
                legacy,
                ghost_port,
                env={
                    "MCP_SHIM_STATE_KEY": key,
                    "MCP_SHIM_ADVERTISE_URL": f"http://127.0.0.1:{nowhere}",
                },
                log_path=logs_dir / "replica-ghost.log",
            )
        )
        url = stack.enter_context(
            haproxy(ports, tmp_path_factory.mktemp("haproxy"), logs_dir / "haproxy.log")
        )
        yield Cluster(url, bases, logs, legacy, ghost)


def headers(session_id: str | None = None, **extra: str) -> dict[str, str]:
    out = {"content-type": "application/json", "accept": ACCEPT, "mcp-protocol-version": LEGACY}
    if session_id is not None:
        out["mcp-session-id"] = session_id
    out.update(extra)
    return out


def rpc(rid: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


def initialize(http: httpx.Client, url: str, **extra: str) -> str:
    params = {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "replicas-test", "version": "1"},
    }
    response = http.post(
        url + "/mcp", content=rpc(0, "initialize", params), headers=headers(**extra)
    )
    assert response.status_code == 200, response.text
    session_id = response.headers["mcp-session-id"]
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    accepted = http.post(url + "/mcp", content=note, headers=headers(session_id, **extra))
    assert accepted.status_code == 202, accepted.text
    return session_id


def whoami(
    http: httpx.Client, url: str, session_id: str, mark: str, **extra: str
) -> httpx.Response:
    body = rpc(mark, "tools/call", {"name": "whoami", "arguments": {"marker": mark}})
    return http.post(url + "/mcp", content=body, headers=headers(session_id, **extra))


def open_get_stream(http: httpx.Client, base: str, session_id: str) -> None:
    """Open the session's GET stream and close it again. The upstream allows one
    per session (409 for a second) and hears of the last one's close a moment
    later, through the replica that relayed it: a 409 is retried briefly."""
    deadline = time.monotonic() + 5
    while True:
        with http.stream("GET", base + "/mcp", headers=headers(session_id)) as stream:
            if stream.status_code == 409 and time.monotonic() < deadline:
                stream.read()
            else:
                assert stream.status_code == 200, stream.read()
                assert stream.headers["content-type"].startswith("text/event-stream")
                return
        time.sleep(0.1)


def result_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, (response.status_code, response.text)
    answer = wire.answer_messages(response)[-1]
    assert "result" in answer, answer
    structured: dict[str, Any] = answer["result"]["structuredContent"]
    return structured


def marker() -> str:
    return "rep-" + uuid.uuid4().hex[:12]


# ---------------------------------------------------------------------------
# Legacy clients: the official mcp 1.x client, and every request kind by hand
# ---------------------------------------------------------------------------


def test_mcp1_client_tour_whichever_replica_each_request_reaches(cluster: Cluster) -> None:
    before = cluster.stats()["toolCalls"]
    relayed = cluster.events("replica_relayed", owned="legacy_session")
    out: Any = procs.run_legacy_client("tour.py", cluster.url + "/mcp", LEGACY)
    assert out["initialize"]["protocolVersion"] == LEGACY
    assert out["simple"]["result"]["content"][0]["text"].startswith("This is a simple text")
    # Server requests on a call's stream, answered by POSTs that land anywhere.
    assert out["sampling"]["result"]["content"][0]["text"] == "LLM response: Paris"
    assert "ada@example.com" in out["elicitation"]["result"]["content"][0]["text"]
    assert out["roots"]["result"]["content"][0]["text"] == "Found 1 root(s)"
    # The level set by one request applies to a call another replica received.
    assert out["set_level"] == {"result": {}}
    assert [m["data"] for m in out["logs"]] == [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    assert out["progress"] == [0.0, 50.0, 100.0]
    # The upstream closes the call's stream mid-call; the client's GET with
    # Last-Event-ID reaches some replica and is relayed to the session's owner.
    assert "properly reconnected" in out["reconnection"]["result"]["content"][0]["text"]
    assert out["ping"] == {"result": {}}
    after = cluster.stats()["toolCalls"]
    for tool in ("test_simple_text", "test_sampling", "test_elicitation", "test_reconnection"):
        assert after.get(tool, 0) - before.get(tool, 0) == 1, tool
    now = cluster.events("replica_relayed", owned="legacy_session")
    # One session, one owner: the two other replicas relayed what they received.
    assert sum(1 for b, a in zip(relayed, now, strict=True) if a > b) >= 2, (relayed, now)


def test_post_get_and_delete_of_one_session_on_each_replica(cluster: Cluster) -> None:
    with httpx.Client(timeout=30.0) as http:
        session_id = initialize(http, cluster.url)
        # 256 random bits and the owner, sealed: visible ASCII, as the spec asks.
        assert len(session_id) >= 43 and all(0x21 <= ord(c) <= 0x7E for c in session_id)
        marks = [marker() for _ in range(6)]
        seen = [result_of(whoami(http, cluster.url, session_id, m)) for m in marks]
        # Six calls, round robin over three replicas: all on the one upstream
        # session the owner opened for this client, each exactly once.
        assert len({s["sessionId"] for s in seen}) == 1
        markers = cluster.stats()["markers"]
        assert [markers.get(m) for m in marks] == [1] * 6
        # The same calls straight to each replica: every one answers, two by relaying.
        for base in cluster.replicas:
            mark = marker()
            assert (
                result_of(whoami(http, base, session_id, mark))["sessionId"] == seen[0]["sessionId"]
            )
            assert cluster.stats()["markers"].get(mark) == 1
        # The GET stream, opened on each replica in turn.
        for base in [cluster.url] * 3 + cluster.replicas:
            open_get_stream(http, base, session_id)
        # DELETE through the balancer ends it on its owner: every replica then says 404.
        deleted = http.delete(cluster.url + "/mcp", headers=headers(session_id))
        assert deleted.status_code == 200, deleted.text
        for base in cluster.replicas:
            gone = whoami(http, base, session_id, marker())
            assert gone.status_code == 404, gone.text
            assert "initialize" in gone.json()["error"]["message"]


def test_session_id_with_another_credential_or_altered_is_unknown_everywhere(
    cluster: Cluster,
) -> None:
    with httpx.Client(timeout=30.0) as http:
        # Opened on its owner directly: nothing relayed before the count below.
        session_id = initialize(http, cluster.replicas[0], authorization="Bearer alice")
        relays = sum(cluster.events("replica_relayed"))
        tampered = session_id[:-2] + ("AA" if session_id[-2:] != "AA" else "BB")
        for base in cluster.replicas:
            # 2025-11-25 streamable-http "Session Management": an id the server does
            # not know gets 404. Bound to the credential, sealed against edits.
            stolen = whoami(http, base, session_id, marker(), authorization="Bearer mallory")
            assert stolen.status_code == 404, stolen.text
            forged = whoami(http, base, tampered, marker(), authorization="Bearer alice")
            assert forged.status_code == 404, forged.text
        # Refused where they arrived: nothing was relayed for them.
        assert sum(cluster.events("replica_relayed")) == relays
        mark = marker()
        assert result_of(whoami(http, cluster.url, session_id, mark, authorization="Bearer alice"))
        assert cluster.stats()["markers"].get(mark) == 1


def test_owner_unreachable_is_404_so_the_client_initializes_again(cluster: Cluster) -> None:
    with httpx.Client(timeout=30.0) as http:
        session_id = initialize(http, cluster.ghost)
        failed = cluster.events("replica_relay_failed")
        mark = marker()
        answer = whoami(http, cluster.replicas[0], session_id, mark)
        assert answer.status_code == 404, answer.text
        error = answer.json()["error"]
        assert error["code"] == -32600 and "cannot be reached" in error["message"]
        assert cluster.stats()["markers"].get(mark) is None  # never reached the upstream
        assert cluster.events("replica_relay_failed")[0] == failed[0] + 1
        # A request that was relayed once is never relayed again (no loops).
        hop = whoami(http, cluster.replicas[1], session_id, marker(), **{"mcp-shim-hop": "1"})
        assert hop.status_code == 404
        assert cluster.events("replica_relay_refused", reason="hop")[1] >= 1


def test_mcp1_sse_client_whichever_replica_its_posts_reach(cluster: Cluster) -> None:
    relayed = sum(cluster.events("replica_relayed", owned="sse_channel"))
    before = cluster.stats()["toolCalls"]
    out: Any = procs.run_legacy_client("sse_tour.py", cluster.url + "/sse")
    assert out["initialize"]["protocolVersion"] == "2024-11-05"
    assert out["simple"]["result"]["content"][0]["text"].startswith("This is a simple text")
    assert out["sampling"]["result"]["content"][0]["text"] == "LLM response: Paris"
    assert [u["params"]["uri"] for u in out["updates"]] == ["test://watched-resource"]
    assert out["ping"] == {"result": {}}
    after = cluster.stats()["toolCalls"]
    assert after.get("test_simple_text", 0) - before.get("test_simple_text", 0) == 1
    # The channel's stream stayed on one replica; POSTs elsewhere were relayed.
    assert sum(cluster.events("replica_relayed", owned="sse_channel")) > relayed


# ---------------------------------------------------------------------------
# Modern clients: MRTR retries and listen streams
# ---------------------------------------------------------------------------


def test_mrtr_retries_land_anywhere_and_the_call_runs_once(cluster: Cluster) -> None:
    mark = marker()
    args = {"rounds": 3, "keyed": True, "marker": mark}
    forwarded = sum(cluster.events("mrtr_forwarded"))
    with httpx.Client(timeout=30.0) as http:
        answer, keys = mw.answer_rounds(http, itertools.repeat(cluster.url), "ask_in_rounds", args)
    assert keys == ["round_1", "round_2", "round_3"]
    assert list(answer.result["structuredContent"]) == ["round_1", "round_2", "round_3"]
    # Four requests round robin over three replicas: at least two retries
    # reached a replica that does not hold the exchange.
    assert sum(cluster.events("mrtr_forwarded")) - forwarded >= 2
    assert mw.marker_count(cluster.legacy_url, mark) == 1


async def test_listen_streams_on_every_replica_get_the_change(cluster: Cluster) -> None:
    name = "rep_" + uuid.uuid4().hex[:10]
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as http:
        streams: list[httpx.Response] = []
        try:
            for rid in range(3):
                message = wire.body(
                    "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, rid=rid
                )
                request = http.build_request(
                    "POST",
                    cluster.url + "/mcp",
                    content=json.dumps(message).encode(),
                    headers=wire.headers_for(message),
                )
                streams.append(await http.send(request, stream=True))
            readers = [_frames(s) for s in streams]
            for reader in readers:
                first = await asyncio.wait_for(anext(reader), 10)
                assert first["method"] == "notifications/subscriptions/acknowledged", first
            mark_before = cluster.stats()["toolCalls"].get("add_tool", 0)
            message = wire.body("tools/call", {"name": "add_tool", "arguments": {"name": name}})
            added = await http.post(
                cluster.url + "/mcp",
                content=json.dumps(message).encode(),
                headers=wire.headers_for(message),
            )
            assert "result" in wire.answer_messages(added)[-1], added.text
            for reader in readers:
                change = await asyncio.wait_for(_next_change(reader), 10)
                assert change["method"] == "notifications/tools/list_changed"
            assert cluster.stats()["toolCalls"].get("add_tool", 0) == mark_before + 1
        finally:
            for stream in streams:
                await stream.aclose()


async def _frames(response: httpx.Response) -> Any:
    assert response.status_code == 200, await response.aread()
    buffer = b""
    async for chunk in response.aiter_raw():
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            data = [ln[5:].lstrip() for ln in event.decode().split("\n") if ln.startswith("data:")]
            if data:
                yield json.loads("\n".join(data))


async def _next_change(reader: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        frame: dict[str, Any] = await anext(reader)
        if frame.get("method") == "notifications/tools/list_changed":
            return frame
    raise AssertionError("no tools/list_changed")
