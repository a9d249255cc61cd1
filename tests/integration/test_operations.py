"""What an operator meets first: the command line, the status of a failed
answer in either form, and the request id on every answer.

The gateway runs as its own process (`python -m app.serving.cli`, what the `mcp-shim`
script calls); "upstream down" is a gateway whose MCP_SHIM_UPSTREAM_URL points
at a loopback port nobody listens on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.schema import SPEC, check_modern_error

GATEWAY_CMD = [sys.executable, "-m", "app.serving.cli"]
GENERATED_ID = re.compile(r"^[0-9a-f]{16}$")


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command with a valid configuration: an ignored argument would start the
    gateway, which never exits by itself, so that shows up as a timeout."""
    full_env = {
        "MCP_SHIM_UPSTREAM_URL": f"http://127.0.0.1:{procs.free_port()}/mcp",
        "MCP_SHIM_PORT": str(procs.free_port()),
        **(env or {}),
    }
    try:
        return subprocess.run(
            [*GATEWAY_CMD, *args],
            env={**_base_env(), **full_env},
            capture_output=True,
            text=True,
            timeout=20,
            cwd=procs.ROOT,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"mcp-shim {' '.join(args)} did not exit: the gateway started"
        ) from None


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MCP_SHIM_")}


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------


def test_help_prints_usage_and_the_configuration_variables() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("usage: mcp-shim"), out
    assert "MCP_SHIM_UPSTREAM_URL" in out and "(required)" in out
    assert "environment variables" in out and "README.md" in out
    assert "serve" in out and "probe" in out


def test_probe_help_documents_its_exit_codes() -> None:
    proc = run_cli("probe", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: mcp-shim probe"), proc.stdout
    assert "--json" in proc.stdout and "--timeout" in proc.stdout
    for code in ("0", "2", "3", "4", "5", "6"):
        assert f"\n  {code}  " in proc.stdout, code


def test_version_prints_the_installed_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"mcp-shim {metadata.version('mcp-shim')}"


@pytest.mark.parametrize("args", [("--bogus",), ("probe", "--bogus"), ("serve", "extra")])
def test_unknown_arguments_exit_2_with_a_message(args: tuple[str, ...]) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "usage: mcp-shim" in proc.stderr and "error:" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_serve_runs_the_gateway() -> None:
    port = procs.free_port()
    env = {
        "MCP_SHIM_UPSTREAM_URL": f"http://127.0.0.1:{procs.free_port()}/mcp",
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
    }
    base = f"http://127.0.0.1:{port}"
    with procs.running([*GATEWAY_CMD, "serve"], base + "/healthz", env=env):
        # No upstream listens there: the era is not known, and liveness does not care.
        assert httpx.get(base + "/healthz", timeout=5).json() == {
            "status": "ok",
            "upstream": {"era": None, "protocol_version": None, "era_source": None},
        }


# ---------------------------------------------------------------------------
# Upstream down: the same error status whichever form the client accepted
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lonely_gateway(logs_dir: Path) -> Iterator[tuple[str, Path]]:
    """A gateway whose upstream is not there (a loopback port nobody listens on)."""
    log = logs_dir / "lonely-gateway.log"
    nobody = f"http://127.0.0.1:{procs.free_port()}/mcp"
    with procs.gateway(nobody, procs.free_port(), log_path=log) as base:
        yield base + "/mcp", log


def echo_call(rid: int) -> dict[str, Any]:
    return wire.body("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, rid=rid)


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        ("application/json", "application/json"),
        (wire.ACCEPT_BOTH, "application/json"),
        # The case that used to be 200: an SSE stream holding only the error.
        ("text/event-stream", "text/event-stream"),
    ],
)
def test_an_unreachable_upstream_is_502_in_either_form(
    lonely_gateway: tuple[str, Path], accept: str, content_type: str
) -> None:
    url, log = lonely_gateway
    message = echo_call(rid=81)
    headers = wire.headers_for(message, accept=accept)
    with httpx.Client(timeout=30) as client:
        response = wire.post(client, url, message, headers)
    # An answer that fails before its first byte carries the error status; the
    # 2026-07-28 statuses are part of the answer (streamable-http "Backward
    # Compatibility": clients look at the status, then the body).
    assert response.status_code == 502, response.text
    assert response.headers["content-type"].startswith(content_type)
    [answer] = wire.answer_messages(response)
    check_modern_error(SPEC, answer)
    assert answer["id"] == 81 and answer["error"]["code"] == -32603
    assert "upstream unreachable" in answer["error"]["message"]
    line = wire.wait_for_log(log, headers["x-request-id"], "call")
    assert line["status"] == 502, line


def test_an_unreachable_upstream_at_start_is_a_warning(lonely_gateway: tuple[str, Path]) -> None:
    # A wrong URL or a server not started is the first thing an operator must see.
    _url, log = lonely_gateway
    [line] = [
        entry for entry in wire.log_lines(log) if entry.get("event") == "upstream_era_unknown"
    ]
    assert line["level"] == "warning", line
    assert "unreachable" in line["reason"], line


# ---------------------------------------------------------------------------
# X-Request-Id on every answer, the id of the answer's log lines
# ---------------------------------------------------------------------------


def _raw(url: str, method: str, body: bytes = b"", **headers: str) -> httpx.Response:
    with httpx.Client(timeout=30) as client:
        return client.request(method, url, content=body, headers=headers)


def test_every_answer_carries_a_request_id(lonely_gateway: tuple[str, Path]) -> None:
    url, log = lonely_gateway
    base = url.removesuffix("/mcp")
    call = echo_call(rid=82)
    call_bytes = json.dumps(call).encode()
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": "test"},
    }
    answers = {
        "healthz": _raw(base + "/healthz", "GET"),
        "get_mcp_405": _raw(url, "GET"),
        "delete_mcp_405": _raw(url, "DELETE"),
        "unknown_path_404": _raw(base + "/nowhere", "GET"),
        "content_type_415": _raw(url, "POST", b"x", **{"content-type": "text/plain"}),
        "parse_error_400": _raw(url, "POST", b"{", **{"content-type": "application/json"}),
        "host_403": _raw(url, "POST", call_bytes, host="evil.example"),
        "notification_202": _raw(
            url, "POST", json.dumps(note).encode(), **wire.headers_for(note, x_request_id=None)
        ),
        "call_json_502": _raw(url, "POST", call_bytes, **wire.headers_for(call, x_request_id=None)),
        "call_sse_502": _raw(
            url,
            "POST",
            call_bytes,
            **wire.headers_for(call, accept="text/event-stream", x_request_id=None),
        ),
    }
    expected_status = {name: int(name.rsplit("_", 1)[1]) for name in answers if name[-1].isdigit()}
    for name, response in answers.items():
        assert response.status_code == expected_status.get(name, 200), (name, response.text)
        assert GENERATED_ID.match(response.headers.get("x-request-id", "")), (
            name,
            response.headers,
        )
    ids = [r.headers["x-request-id"] for r in answers.values()]
    assert len(set(ids)) == len(ids), "request ids repeat"

    # The same id as the log line of that answer.
    refused = wire.wait_for_log(log, answers["get_mcp_405"].headers["x-request-id"])
    assert refused["event"] == "request_refused" and refused["status"] == 405
    for name in ("call_json_502", "call_sse_502"):
        line = wire.wait_for_log(log, answers[name].headers["x-request-id"], "call")
        assert line["status"] == 502, (name, line)
    host = wire.wait_for_log(log, answers["host_403"].headers["x-request-id"])
    assert host["event"] == "request_refused" and host["status"] == 403


@pytest.mark.parametrize(
    ("sent", "echoed"),
    [
        ("abc-123_X.y", True),
        ("a" * 64, True),
        ("a" * 65, False),  # too long
        ("has space", False),
        ("semi;colon", False),
        ("", False),
    ],
)
def test_a_plain_short_request_id_is_echoed_otherwise_replaced(
    lonely_gateway: tuple[str, Path], sent: str, echoed: bool
) -> None:
    url, log = lonely_gateway
    base = url.removesuffix("/mcp")
    call = echo_call(rid=83)
    for response in (
        _raw(base + "/healthz", "GET", **{"x-request-id": sent}),
        _raw(url, "GET", **{"x-request-id": sent}),
        _raw(url, "POST", json.dumps(call).encode(), **wire.headers_for(call, x_request_id=sent)),
    ):
        got = response.headers["x-request-id"]
        if echoed:
            assert got == sent
        else:
            assert GENERATED_ID.match(got), got
    line = wire.wait_for_log(log, got, "call")
    assert line["status"] == 502


def test_answers_from_a_real_upstream_carry_the_request_id(
    gateway_url: str, gateway_log: Path
) -> None:
    url = gateway_url + "/mcp"
    plain = echo_call(rid=84)
    streamed = wire.body(
        "tools/call",
        {"name": "slow_echo", "arguments": {"ms": 50, "steps": 2}},
        rid=85,
        meta={"progressToken": "ops"},
    )
    with httpx.Client(timeout=30) as client:
        json_answer = wire.post(client, url, plain, headers := wire.headers_for(plain))
        sse_answer = wire.post(client, url, streamed, sse_headers := wire.headers_for(streamed))
        fresh = wire.post(client, url, plain, wire.headers_for(plain, x_request_id=None))
    assert json_answer.status_code == 200, json_answer.text
    assert json_answer.headers["content-type"].startswith("application/json")
    assert json_answer.headers["x-request-id"] == headers["x-request-id"]
    assert sse_answer.status_code == 200, sse_answer.text
    assert sse_answer.headers["content-type"].startswith("text/event-stream")
    assert sse_answer.headers["x-request-id"] == sse_headers["x-request-id"]
    assert wire.answer_messages(sse_answer)[-1]["id"] == 85
    generated = fresh.headers["x-request-id"]
    assert GENERATED_ID.match(generated), generated
    for rid in (headers["x-request-id"], sse_headers["x-request-id"], generated):
        assert wire.wait_for_log(gateway_log, rid, "call")["status"] == 200
