"""Many servers on two replicas: a legacy client's session, owned by the
replica that opened it, is served by the other replica's route of the same
server (relayed to the owner's /servers/NAME/mcp), and ended there. The
upstream is the legacy fixture (mcp 1.x), which tells each call's upstream
session; each replica fronts it and another server."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration.test_replicas import headers, initialize, marker, result_of, whoami


@pytest.fixture(scope="module")
def replicas(logs_dir: Path) -> Iterator[list[str]]:
    key = base64.b64encode(os.urandom(32)).decode()
    ports = [procs.free_port(), procs.free_port()]
    with contextlib.ExitStack() as stack:
        legacy = stack.enter_context(
            procs.legacy_server(procs.free_port(), log_path=logs_dir / "many-replicas-legacy.log")
        )
        servers = {"mcpServers": {"legacy": {"url": legacy}, "again": {"url": legacy}}}
        bases = []
        for n, port in enumerate(ports):
            env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_SHIM_UPSTREAM_")}
            env.update(
                MCP_SHIM_SERVERS=json.dumps(servers),
                MCP_SHIM_PORT=str(port),
                MCP_SHIM_HOST="127.0.0.1",
                MCP_SHIM_WORKERS="1",
                MCP_SHIM_STATE_KEY=key,
                MCP_SHIM_ADVERTISE_URL=f"http://127.0.0.1:{port}",
            )
            base = f"http://127.0.0.1:{port}"
            argv = [sys.executable, "-m", "app.serving.cli"]
            log = logs_dir / f"many-replica-{n}.log"
            stack.enter_context(procs.running(argv, base + "/healthz", env=env, log_path=log))
            bases.append(base)
        yield bases


def test_a_session_is_served_on_either_replica(replicas: list[str]) -> None:
    first, second = (base + "/servers/legacy" for base in replicas)
    with httpx.Client(timeout=30.0) as http:
        session_id = initialize(http, first)
        here = result_of(whoami(http, first, session_id, marker()))
        there = result_of(whoami(http, second, session_id, marker()))
        assert here["sessionId"] == there["sessionId"]
        # Another server's route knows nothing of it.
        other = whoami(http, replicas[1] + "/servers/again", session_id, marker())
        assert other.status_code == 404, other.text
        deleted = http.delete(second + "/mcp", headers=headers(session_id))
        assert deleted.status_code == 200, deleted.text
        gone = whoami(http, first, session_id, marker())
        assert gone.status_code == 404, gone.text
