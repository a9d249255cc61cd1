"""The official TypeScript SDK clients through the aggregated /mcp.

One gateway with a servers file of three kinds of server (the legacy fixture,
mcp 1.x over Streamable HTTP; the modern fixture, mcp 2.x, 2026-07-28 only;
npm's server-everything over stdio), and tests/ts_client/aggregate.cjs run
under the node peer with each of the two SDK lines of tests/peers/package.json:
``@modelcontextprotocol/sdk`` 1.x (a 2025-11-25 client) and
``@modelcontextprotocol/client`` 2.x (pinned to 2026-07-28). Each lists every
server's tools, prefixed, and calls one tool of each server plus the
elicitation tool of the legacy and of the modern fixture, answering the
question: as a server request on the call's stream for 1.x, inside an
``input_required`` result for 2.x.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests import procs
from tests.integration.test_aggregate import many_servers_gateway, servers_file

SCRIPT = procs.ROOT / "tests" / "ts_client" / "aggregate.cjs"
NODE_MODULES = procs.PEERS / "node" / "node_modules"
SDKS = {
    "v1": ("2025-11-25", NODE_MODULES / "@modelcontextprotocol" / "sdk" / "package.json"),
    "v2": ("2026-07-28", NODE_MODULES / "@modelcontextprotocol" / "client" / "package.json"),
}
ELICIT = {"message": "Who are you?"}
CALLS = {
    "legacy__echo": ({"text": "hi legacy"}, "hi legacy"),
    "modern__test_echo": ({"text": "hi modern"}, "hi modern"),
    "everything__echo": ({"message": "hi everything"}, "Echo: hi everything"),
    "legacy__test_elicitation": (ELICIT, '"username": "ada"'),
    "modern__test_elicitation": (ELICIT, '"username": "ada"'),
}


def _run(sdk: str, url: str) -> dict[str, Any]:
    procs.require_peer(SDKS[sdk][1])
    argv = [str(procs.require_peer(procs.NODE)), str(SCRIPT), sdk, url]
    argv += [f"{name}:{json.dumps(args)}" for name, (args, _) in CALLS.items()]
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, f"{sdk} client failed:\n{proc.stderr}\n{proc.stdout}"
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


@pytest.fixture(scope="module")
def aggregate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway's aggregated /mcp, once every server's tools are in its list."""
    logs = tmp_path_factory.mktemp("aggregate-ts")
    with (
        procs.legacy_server(procs.free_port(), log_path=logs / "legacy.log") as legacy,
        procs.modern_server(procs.free_port(), log_path=logs / "modern.log") as modern,
    ):
        env = {"MCP_SHIM_SERVERS_FILE": str(servers_file(logs / "servers.json", legacy, modern))}
        with many_servers_gateway(env, logs / "gateway.log") as base:
            yield base + "/mcp"


@pytest.mark.peers
@pytest.mark.parametrize("sdk", list(SDKS))
def test_typescript_client_lists_and_calls_every_server(aggregate: str, sdk: str) -> None:
    # server-everything's first process starts on first use: on a loaded
    # machine its tools may miss the aggregate's first lists.
    deadline = time.monotonic() + 60
    out = _run(sdk, aggregate)
    while {n.split("__")[0] for n in out["tools"]} != {"legacy", "modern", "everything"}:
        assert time.monotonic() < deadline, f"not every server listed within 60 s: {out}"
        time.sleep(1)
        out = _run(sdk, aggregate)
    assert out["protocolVersion"] == SDKS[sdk][0], out
    assert set(CALLS) <= set(out["tools"]), out["tools"]
    for name, (_, word) in CALLS.items():
        result = out["calls"][name]
        assert "error" not in result, f"{name}: {result['error']}"
        assert not result.get("isError"), f"{name}: {result}"
        text = " ".join(c.get("text", "") for c in result["content"])
        assert word in text, f"{name}: {text!r}"
    assert out["asked"] == ["Who are you?", "Who are you?"], out["asked"]
