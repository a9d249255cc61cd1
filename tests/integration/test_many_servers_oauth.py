"""An OAuth-protected server as one of many (MCP_SHIM_SERVERS): its challenge
and its protected-resource metadata name its own route, /servers/NAME/mcp
(RFC 9728 3.1: the metadata of https://host/servers/NAME/mcp is at
/.well-known/oauth-protected-resource/servers/NAME/mcp), and the modern
client with a token is served through it. The upstream is
tests/fixtures/oauth_server.py (mcp 1.x as an OAuth resource server)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire

FIXTURE = procs.ROOT / "tests" / "fixtures" / "oauth_server.py"
ISSUER = "https://auth.example.test/"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("many-oauth")
    port = procs.free_port()
    argv = [str(procs.require_peer(procs.LEGACY_PY)), str(FIXTURE), "--port", str(port)]
    upstream = f"http://127.0.0.1:{port}/mcp"
    servers = {"mcpServers": {"guarded": {"url": upstream}, "other": {"url": upstream}}}
    gateway_port = procs.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_SHIM_UPSTREAM_")}
    env.update(
        MCP_SHIM_SERVERS=json.dumps(servers),
        MCP_SHIM_PORT=str(gateway_port),
        MCP_SHIM_HOST="127.0.0.1",
        MCP_SHIM_WORKERS="1",
    )
    url = f"http://127.0.0.1:{gateway_port}"
    gateway = [sys.executable, "-m", "app.serving.cli"]
    with (
        procs.running(argv, upstream, log_path=logs / "oauth-server.log"),
        procs.running(gateway, url + "/healthz", env=env, log_path=logs / "gateway.log"),
    ):
        yield url


def metadata_url(base: str, name: str) -> str:
    return f"{base}/.well-known/oauth-protected-resource/servers/{name}/mcp"


def test_the_challenge_names_the_servers_own_metadata(base: str) -> None:
    message = wire.body("tools/call", {"name": "whoami", "arguments": {}}, rid=1)
    with httpx.Client(timeout=30.0) as client:
        response = wire.post(
            client, base + "/servers/guarded/mcp", message, wire.headers_for(message)
        )
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert f'resource_metadata="{metadata_url(base, "guarded")}"' in challenge


@pytest.mark.parametrize("name", ["guarded", "other"])
def test_each_server_has_its_metadata(base: str, name: str) -> None:
    response = httpx.get(metadata_url(base, name), timeout=30)
    assert response.status_code == 200
    document: Any = response.json()
    assert document["resource"] == f"{base}/servers/{name}/mcp"
    assert document["authorization_servers"] == [ISSUER]
    assert httpx.get(metadata_url(base, "nope"), timeout=30).status_code == 404


def test_a_token_is_served_through_the_route(base: str) -> None:
    document: Any = procs.run_modern_client(
        "whoami.py", base + "/servers/guarded/mcp", "Bearer alice-token"
    )
    for outcome in document["calls"]:
        assert outcome["result"]["content"][0]["text"] == "alice", outcome
