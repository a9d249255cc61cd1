"""stdio upstreams under a misbehaving server (issue 19): the process pool shared
out per credential, orphans reaped when the gateway is PID 1, and a setsid()
grandchild ended with the gateway.

The server is the project's own, tests/misbehaving/stdio_server.py, which
misbehaves on demand: calls that never answer, a child that outlives it, a
child that leaves its process group with setsid(). Processes are read from
/proc.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from tests import procs
from tests.integration import mrtr_wire as mw
from tests.integration import wire
from tests.integration.everything import text_of, wait_for
from tests.integration.test_legacy_clients import call as legacy_call
from tests.integration.test_legacy_clients import initialize
from tests.integration.test_stdio import stdio_gateway

SERVER = procs.ROOT / "tests" / "misbehaving" / "stdio_server.py"
VERSION = "2025-06-18"
SAMPLING: dict[str, Any] = {"sampling": {}}


def server_command(*args: str) -> str:
    return shlex.join([sys.executable, str(SERVER), *args])


def tool(http: httpx.Client, base: str, name: str, **kwargs: Any) -> mw.Answer:
    caps = kwargs.pop("caps", {})
    return mw.tool_call(http, base, name, {"text": name}, caps=caps, **kwargs)


def state(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a process, None once it is gone (reaped)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def zombies_of(parent: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            found = state(int(name))
            if found is not None and found == ("Z", parent):
                out.append(int(name))
    return out


# ---------------------------------------------------------------------------
# 8. The pool: legacy sessions are never reclaimed; a fair share per credential
# ---------------------------------------------------------------------------


def test_a_legacy_session_survives_anonymous_initializes(tmp_path: Path) -> None:
    """With 4 processes, a credential's legacy session owns one; four anonymous
    legacy `initialize`s used to take all four, stopping it (its next call: 404)."""
    url_of = "{}/mcp".format
    with (
        stdio_gateway(
            server_command(),
            tmp_path / "gateway.log",
            stdio_max_processes="4",
            connect_timeout_s="1",
        ) as (base, _),
        httpx.Client(timeout=30.0) as http,
    ):
        url = url_of(base)
        owner = "Bearer owner"
        session, _ = initialize(http, url, VERSION, authorization=owner)
        statuses = []
        for _ in range(4):
            response = http.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": VERSION,
                        "capabilities": {},
                        "clientInfo": {"name": "anonymous", "version": "0"},
                    },
                },
                headers={"content-type": "application/json", "accept": wire.ACCEPT_BOTH},
            )
            statuses.append(response.status_code)
        # Anonymous callers get their share of the processes, then a refusal.
        assert statuses[:2] == [200, 200], statuses
        assert set(statuses[2:]) <= {200, 429}, statuses
        answer = legacy_call(
            http,
            url,
            session,
            VERSION,
            "tools/call",
            {"name": "echo", "arguments": {"text": "still here"}},
            authorization=owner,
        )
        assert answer.status_code == 200, answer.text
        assert "still here" in answer.text


def test_calls_that_never_answer_hold_only_their_credentials_share(tmp_path: Path) -> None:
    """Eight calls of one credential that the server never answers (each on a
    process of its own: the caller can be asked for input) used to hold all four
    processes, and every other caller got 503 until they ended."""
    log = tmp_path / "gateway.log"
    with stdio_gateway(server_command(), log, stdio_max_processes="4", connect_timeout_s="1") as (
        base,
        _,
    ):
        outcomes: list[int] = []

        def hang() -> None:
            # The client gives up after a while: the gateway then drops the call.
            with httpx.Client(timeout=httpx.Timeout(5.0, read=8.0)) as client:
                try:
                    outcomes.append(
                        tool(client, base, "hang", caps=SAMPLING, authorization="Bearer a").status
                    )
                except httpx.ReadTimeout:
                    pass

        def hanging() -> int:
            return sum(
                1
                for line in wire.log_lines(log)
                if line.get("event") == "upstream_stderr" and line.get("line") == "hanging"
            )

        workers = [threading.Thread(target=hang) for _ in range(8)]
        for worker in workers:
            worker.start()
        try:
            # Every call of the eight either reached a server (and hangs there) or
            # was refused.
            wait_for(lambda: hanging() + len(outcomes) == 8, what="the eight calls placed")
            assert set(outcomes) <= {429, 503}, outcomes
            with httpx.Client(timeout=30.0) as http:
                other = tool(http, base, "echo", authorization="Bearer b")
            assert other.status == 200, other.final
            assert text_of(other) == "echo"
            assert hanging() <= 2  # the first credential's share of four
        finally:
            for worker in workers:
                worker.join(30)
