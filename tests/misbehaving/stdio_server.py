"""A stdio MCP server (2025-06-18, newline-delimited JSON-RPC on stdin/stdout) that
misbehaves on demand, for the gateway's stdio upstream tests.

Standard library only, so any Python runs it. What it does wrong is chosen by
arguments, at start-up:

- `--child`: start a child process (in the server's process group) that outlives
  the server when the server exits;
- `--setsid-grandchild`: start a child that calls setsid(), leaving the server's
  process group and session, so signalling the group does not reach it;

and by tool, per call:

- `hang`: never answers (the call stays in flight until the process ends);
- `echo`: answers at once with its `text` argument;
- `pids`: answers with the pids of the server and of what it started, as JSON;
- `exit`: the process exits at once, answering nothing.

Whatever it starts lives at most `--lifetime` seconds (default 120), so a test
that fails leaves nothing running for long.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
TOOLS = [
    {"name": name, "description": text, "inputSchema": {"type": "object"}}
    for name, text in (
        ("hang", "never answers"),
        ("echo", "answers with its text argument"),
        ("pids", "the pids of this server and of what it started"),
        ("exit", "the server exits without answering"),
    )
]


def start_sleeper(lifetime: float, *, new_session: bool) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep({lifetime})"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=new_session,
    )
    return proc.pid


def answer(rid: Any, result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
    sys.stdout.flush()


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def handle(message: dict[str, Any], started: dict[str, int]) -> None:
    method = message.get("method")
    rid = message.get("id")
    if rid is None:
        return  # notifications: nothing to do
    params = message.get("params") or {}
    if method == "initialize":
        asked = params.get("protocolVersion")
        answer(
            rid,
            {
                "protocolVersion": asked if asked in VERSIONS else VERSIONS[-1],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "misbehaving-stdio", "version": "0"},
            },
        )
    elif method == "ping":
        answer(rid, {})
    elif method == "tools/list":
        answer(rid, {"tools": TOOLS})
    elif method == "tools/call":
        name = params.get("name")
        arguments = params.get("arguments") or {}
        if name == "hang":
            # Said on stderr, which the gateway logs: a test can count the calls held.
            print("hanging", file=sys.stderr, flush=True)
            return
        if name == "exit":
            os._exit(3)
        if name == "pids":
            answer(rid, text(json.dumps({"server": os.getpid(), **started})))
        else:
            answer(rid, text(str(arguments.get("text", ""))))
    else:
        error = {"code": -32601, "message": f"unknown method {method}"}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "error": error}) + "\n")
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--setsid-grandchild", action="store_true")
    parser.add_argument("--lifetime", type=float, default=120.0)
    args = parser.parse_args()
    started: dict[str, int] = {}
    if args.child:
        started["child"] = start_sleeper(args.lifetime, new_session=False)
    if args.setsid_grandchild:
        started["setsid"] = start_sleeper(args.lifetime, new_session=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            handle(message, started)


if __name__ == "__main__":
    main()
