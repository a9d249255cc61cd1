"""Many servers behind one gateway (MCP_SHIM_SERVERS_FILE): the official npm
server-everything over stdio, the mcp 1.x legacy server over Streamable HTTP
and the mcp 2.x modern server, each at /servers/NAME/, reached by the real
clients of both eras (and HTTP+SSE ones); readiness, metrics and the probe
over all of them; and one server's death leaving the others' callers served.

The last test kills servers: it runs last, on the module's one gateway."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.metrics import parse_exposition
from tests import procs
from tests.integration.everything import EVERYTHING

# (server, tool, arguments, a word of the tool's text answer)
CALLS = [
    ("everything", "echo", {"message": "many servers"}, "many servers"),
    ("legacy", "test_simple_text", {}, "simple text"),
    ("modern", "test_simple_text", {}, "simple text"),
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_SHIM_UPSTREAM_")}
    return {**env, "MCP_SHIM_HOST": "127.0.0.1", "MCP_SHIM_WORKERS": "1", **extra}


@contextlib.contextmanager
def _server(python: Path, script: Path, log_path: Path) -> Iterator[tuple[str, Any]]:
    port = procs.free_port()
    argv = [str(procs.require_peer(python)), str(script), "--port", str(port)]
    url = f"http://127.0.0.1:{port}/mcp"
    with procs.running(argv, url, log_path=log_path) as proc:
        yield url, proc


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs = tmp_path_factory.mktemp("many")
    with (
        _server(procs.LEGACY_PY, procs.FIXTURE, logs / "legacy.log") as (legacy, legacy_proc),
        _server(procs.MODERN_PY, procs.MODERN_FIXTURE, logs / "modern.log") as (modern, _),
    ):
        secret = logs / "legacy-token"
        secret.write_text("Bearer many-secret\n")
        servers = {
            "mcpServers": {
                "everything": {
                    "command": str(procs.require_peer(procs.NODE)),
                    "args": [str(procs.require_peer(EVERYTHING))],
                    "autoApprove": ["echo"],
                },
                # A second stdio server in the same process, with variables of its own.
                "env-mark": {
                    "type": "stdio",
                    "command": str(procs.require_peer(procs.NODE)),
                    "args": [str(procs.require_peer(EVERYTHING))],
                    "env": {"MANY_SERVERS_MARK": "mark-two"},
                    "cwd": str(logs),
                },
                "legacy": {
                    "url": legacy,
                    "timeout": 60,
                    "headers": {"Authorization": {"file": str(secret)}},
                },
                "modern": {"url": modern, "type": "http", "mcpShim": {"request_timeout_s": 200}},
                "off": {"url": "http://127.0.0.1:9/mcp", "disabled": True},
            }
        }
        path = logs / "servers.json"
        path.write_text(json.dumps(servers))
        port = procs.free_port()
        env = _env(MCP_SHIM_SERVERS_FILE=str(path), MCP_SHIM_PORT=str(port))
        base = f"http://127.0.0.1:{port}"
        log = logs / "gateway.log"
        argv = [sys.executable, "-m", "app.serving.cli"]
        with procs.running(argv, base + "/healthz", env=env, log_path=log) as gateway:
            yield {
                "base": base,
                "env": env,
                "log": log,
                "gateway": gateway,
                "legacy": legacy_proc,
            }


def _text(call: dict[str, Any]) -> str:
    assert "result" in call, call
    result = call["result"]
    assert not result.get("isError"), result
    return " ".join(c.get("text", "") for c in result["content"])


@pytest.mark.parametrize(("name", "tool", "arguments", "word"), CALLS)
def test_a_modern_client_on_each_route(
    many: dict[str, Any], name: str, tool: str, arguments: dict[str, Any], word: str
) -> None:
    url = f"{many['base']}/servers/{name}/mcp"
    out: Any = procs.run_modern_client("list_and_call.py", url, tool, json.dumps(arguments))
    assert out["protocolVersion"] == "2026-07-28"
    assert tool in out["tools"]
    assert word in _text(out["call"]).lower()


@pytest.mark.parametrize(("name", "tool", "arguments", "word"), CALLS)
@pytest.mark.parametrize("route", ["mcp", "sse"])
def test_a_legacy_client_on_each_route(
    many: dict[str, Any], route: str, name: str, tool: str, arguments: dict[str, Any], word: str
) -> None:
    version = "2025-06-18" if route == "mcp" else "2024-11-05"
    url = f"{many['base']}/servers/{name}/{route}"
    out: Any = procs.run_legacy_client(
        "list_and_call.py", url, version, tool, json.dumps(arguments)
    )
    assert out["protocolVersion"] == version
    assert tool in out["tools"]
    assert word in _text(out["call"]).lower()


def test_servers_keep_their_own_tools(many: dict[str, Any]) -> None:
    everything: Any = procs.run_modern_client(
        "list_and_call.py", f"{many['base']}/servers/everything/mcp", "echo", '{"message": "x"}'
    )
    legacy: Any = procs.run_modern_client(
        "list_and_call.py", f"{many['base']}/servers/legacy/mcp", "test_simple_text", "{}"
    )
    assert "get-sum" in everything["tools"] and "get-sum" not in legacy["tools"]
    assert "test_simple_text" not in everything["tools"]


def test_a_stdio_server_gets_its_own_variables(many: dict[str, Any]) -> None:
    url = f"{many['base']}/servers/env-mark/mcp"
    out: Any = procs.run_modern_client("list_and_call.py", url, "get-env", "{}")
    assert "mark-two" in _text(out["call"])
    other: Any = procs.run_modern_client(
        "list_and_call.py", f"{many['base']}/servers/everything/mcp", "get-env", "{}"
    )
    assert "MANY_SERVERS_MARK" not in _text(other["call"])


def test_a_server_gets_its_own_fixed_headers(many: dict[str, Any]) -> None:
    url = f"{many['base']}/servers/legacy/mcp"
    out: Any = procs.run_modern_client("list_and_call.py", url, "whoami", "{}")
    # The fixture tells the digest of the Authorization it received (never the secret).
    digest = hashlib.sha256(b"Bearer many-secret").hexdigest()[:16]
    assert out["call"]["result"]["structuredContent"]["authorization"] == digest
    assert "many-secret" not in many["log"].read_text()


def test_readiness_of_every_server(many: dict[str, Any]) -> None:
    answer = httpx.get(many["base"] + "/readyz", timeout=30)
    assert answer.status_code == 200
    servers = answer.json()["servers"]
    assert set(servers) == {"everything", "env-mark", "legacy", "modern"}
    assert all(body["status"] == "ready" for body in servers.values()), servers
    assert servers["modern"]["upstream"]["era"] == "modern"
    assert servers["legacy"]["upstream"]["era"] == "legacy"
    own = httpx.get(many["base"] + "/servers/modern/readyz", timeout=30)
    assert own.status_code == 200 and own.json()["upstream"]["era"] == "modern"


def test_unknown_routes_are_not_found(many: dict[str, Any]) -> None:
    # /mcp is the aggregate (tests/integration/test_aggregate.py).
    for path in ("/servers/off/mcp", "/servers/nope/mcp", "/servers/legacy"):
        answer = httpx.post(many["base"] + path, json={}, timeout=10)
        assert answer.status_code == 404, path
        assert "/servers/NAME/mcp" in answer.json()["error"]["message"]


def test_metrics_name_each_server(many: dict[str, Any]) -> None:
    text = httpx.get(many["base"] + "/metrics", timeout=10).text
    calls: dict[str, float] = {}
    for name, labels, value in parse_exposition(text):
        if name == "mcp_shim_calls_total" and labels.get("method") == "tools/call":
            calls[labels["server"]] = calls.get(labels["server"], 0) + value
    assert set(calls) == {"everything", "env-mark", "legacy", "modern"}, calls
    assert all(count >= 1 for count in calls.values()), calls
    assert text.count("# TYPE mcp_shim_calls_total counter") == 1


def test_the_log_names_each_server(many: dict[str, Any]) -> None:
    lines = [json.loads(line) for line in many["log"].read_text().splitlines() if line[:1] == "{"]
    started = [line["message"] for line in lines if line.get("event") == "gateway_listening"]
    assert len(started) == 4 and any("/servers/everything/mcp -> stdio" in s for s in started)
    named = {line.get("server") for line in lines if line.get("event") == "legacy_initialize"}
    assert {"everything", "legacy", "modern"} <= named
    # A stdio server's process lines, outliving the request that started it.
    stderr = {line.get("server") for line in lines if line.get("event") == "upstream_stderr"}
    assert {"everything", "env-mark"} <= stderr, stderr
    ignored = [line for line in lines if line.get("event") == "server_keys_ignored"]
    assert {line["server"] for line in ignored} == {"everything", "legacy"}


def test_probe_reports_every_server(many: dict[str, Any]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.serving.cli", "probe", "--json", "--timeout", "60"],
        env=many["env"],
        capture_output=True,
        timeout=120,
        cwd=procs.ROOT,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = json.loads(done.stdout)
    assert report["ok"] and set(report["servers"]) == {"everything", "env-mark", "legacy", "modern"}
    assert report["servers"]["modern"]["era"] == "modern"
    assert report["servers"]["everything"]["transport"] == "stdio"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def test_one_server_dying_never_stops_the_others(many: dict[str, Any]) -> None:
    # The stdio server's processes killed, and the legacy HTTP server stopped.
    stdio = _children(many["gateway"].pid)
    assert stdio, "no stdio server process under the gateway"
    for pid in stdio:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    many["legacy"].kill()
    many["legacy"].wait()
    base = many["base"]
    modern: Any = procs.run_modern_client(
        "list_and_call.py", f"{base}/servers/modern/mcp", "test_simple_text", "{}"
    )
    assert "simple text" in _text(modern["call"]).lower()
    # A new stdio process replaces the killed one.
    out: Any = procs.run_legacy_client(
        "list_and_call.py",
        f"{base}/servers/everything/mcp",
        "2025-06-18",
        "echo",
        '{"message": "again"}',
    )
    assert "again" in _text(out["call"])
    with pytest.raises(AssertionError, match="upstream unreachable"):
        procs.run_modern_client(
            "list_and_call.py", f"{base}/servers/legacy/mcp", "test_simple_text", "{}"
        )
    ready = httpx.get(base + "/readyz", timeout=60)
    assert ready.status_code == 200
    servers = ready.json()["servers"]
    assert servers["legacy"]["status"] == "not_ready" and servers["modern"]["status"] == "ready"
    assert servers["everything"]["status"] == "ready" and servers["env-mark"]["status"] == "ready"
    assert httpx.get(base + "/servers/legacy/readyz", timeout=60).status_code == 503


def test_one_server_file_serves_it_at_mcp_too(tmp_path: Path, many: dict[str, Any]) -> None:
    modern = _modern_url(many)
    servers = {"mcpServers": {"only": {"url": modern}}}
    port = procs.free_port()
    env = _env(MCP_SHIM_SERVERS=json.dumps(servers), MCP_SHIM_PORT=str(port))
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "app.serving.cli"]
    with procs.running(argv, base + "/healthz", env=env, log_path=tmp_path / "gw.log"):
        for url in (base + "/mcp", base + "/servers/only/mcp"):
            out: Any = procs.run_modern_client("list_and_call.py", url, "test_simple_text", "{}")
            assert "simple text" in _text(out["call"]).lower()


def _modern_url(many: dict[str, Any]) -> str:
    servers = json.loads(Path(many["env"]["MCP_SHIM_SERVERS_FILE"]).read_text())
    url: str = servers["mcpServers"]["modern"]["url"]
    return url


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (
            {"MCP_SHIM_UPSTREAM_URL": "http://127.0.0.1:9/mcp"},
            "MCP_SHIM_UPSTREAM_URL and MCP_SHIM_SERVERS",
        ),
        ({}, "server 'bad': unknown key(s) ['envFile']"),
    ],
)
def test_faults_stop_the_start(extra: dict[str, str], words: str) -> None:
    servers = {"mcpServers": {"bad": {"command": "true", "envFile": ".env"}}}
    env = _env(MCP_SHIM_SERVERS=json.dumps(servers), MCP_SHIM_PORT=str(procs.free_port()), **extra)
    done = subprocess.run(
        [sys.executable, "-m", "app.serving.cli"],
        env=env,
        capture_output=True,
        timeout=60,
        cwd=procs.ROOT,
    )
    assert done.returncode == 2 and words in done.stderr.decode(), done.stderr.decode()
