"""Settings a person can handle, on the real command line (`python -m app.serving.cli`,
what the `mcp-shim` script runs): `mcp-shim config`, flags, unknown
variables, mistakes answered with what to write, and the probe checking what
`serve` checks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests import procs

GATEWAY_CMD = [sys.executable, "-m", "app.serving.cli"]
KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="  # 32 bytes in base64


def clean_env(**settings: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("MCP_SHIM_")}
    return {**base, **settings}


def run(*args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [*GATEWAY_CMD, *args],
            env=clean_env(**settings),
            capture_output=True,
            text=True,
            timeout=30,
            cwd=procs.ROOT,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"mcp-shim {' '.join(args)} did not exit: it started") from None


def nobody() -> str:
    """An upstream URL nobody listens on: enough for everything but calls."""
    return f"http://127.0.0.1:{procs.free_port()}/mcp"


@contextmanager
def gateway(args: list[str], port: int, **settings: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [*GATEWAY_CMD, *args],
        env=clean_env(**settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=procs.ROOT,
    )
    try:
        procs.wait_until_up(f"http://127.0.0.1:{port}/healthz", proc)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- mcp-shim config ----------------------------------------------------------------


def test_config_prints_every_setting_its_source_and_masks_secrets() -> None:
    upstream = nobody()
    proc = run(
        "config",
        "--port",
        "9123",
        MCP_SHIM_UPSTREAM_URL=upstream,
        MCP_SHIM_PORT="8000",
        MCP_SHIM_STATE_KEY=KEY,
        MCP_SHIM_TASK_STORE="redis://:hunter2@cache.internal:6379/1",
        MCP_SHIM_MAX_SESSIONS="800",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    lines = {line.split()[0]: line.split(None, 2)[1:] for line in out.splitlines()[1:]}
    assert lines["MCP_SHIM_PORT"] == ["flag", "9123"]
    assert lines["MCP_SHIM_UPSTREAM_URL"] == ["environment", upstream]
    assert lines["MCP_SHIM_HOST"] == ["default", "127.0.0.1"]
    assert lines["MCP_SHIM_STATE_KEY"] == ["environment", "(set, hidden)"]
    assert lines["MCP_SHIM_TASK_STORE"] == ["environment", "redis://:***@cache.internal:6379/1"]
    assert lines["MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL"] == [
        "default",
        "200 (default: a quarter of MCP_SHIM_MAX_SESSIONS)",
    ]
    assert KEY not in out and "hunter2" not in out


def test_config_json_for_machines() -> None:
    proc = run("config", "--json", "--workers", "3", MCP_SHIM_UPSTREAM_URL=nobody())
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    settings = {row["variable"]: row for row in report["settings"]}
    assert report["shape"] == 1
    assert (settings["MCP_SHIM_WORKERS"]["value"], settings["MCP_SHIM_WORKERS"]["source"]) == (
        3,
        "flag",
    )
    assert settings["MCP_SHIM_PORT"] == {
        "variable": "MCP_SHIM_PORT",
        "value": 8080,
        "source": "default",
        "note": None,
    }
    assert settings["MCP_SHIM_STATE_KEY"]["value"] is None


def test_config_exits_2_on_a_bad_value_as_serve_does() -> None:
    for command in ("config", "serve"):
        proc = run(command, MCP_SHIM_UPSTREAM_URL=nobody(), MCP_SHIM_PORT="70000")
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert "MCP_SHIM_PORT='70000' is out of range" in proc.stderr
        assert "e.g. MCP_SHIM_PORT=8080" in proc.stderr


def test_a_url_without_its_scheme_is_answered_with_the_fix() -> None:
    proc = run("config", MCP_SHIM_UPSTREAM_URL="127.0.0.1:3001/mcp")
    assert proc.returncode == 2
    assert (
        "MCP_SHIM_UPSTREAM_URL='127.0.0.1:3001/mcp' is not a URL: add the scheme, e.g. "
        "MCP_SHIM_UPSTREAM_URL=http://127.0.0.1:3001/mcp"
    ) in proc.stderr


# -- unknown variables ----------------------------------------------------------------


@pytest.mark.parametrize("command", ["serve", "probe", "config"])
def test_an_unknown_variable_exits_2_naming_the_closest(command: str) -> None:
    proc = run(command, MCP_SHIM_UPSTREAM_URL=nobody(), MCP_SHIM_PROT="9000")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "MCP_SHIM_PROT is not a setting; did you mean MCP_SHIM_PORT?" in proc.stderr


def test_the_scripts_own_variables_are_tolerated() -> None:
    proc = run("config", MCP_SHIM_UPSTREAM_URL=nobody(), MCP_SHIM_PEERS_DIR="/tmp/peers")
    assert proc.returncode == 0, proc.stderr


# -- the command line -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (("9000",), "--port 9000 or MCP_SHIM_PORT=9000"),
        (("--port", "9000", "9000"), "--port 9000"),
        (("http://127.0.0.1:3001/mcp",), "--upstream http://127.0.0.1:3001/mcp"),
        (("probe", "9000"), "unrecognized arguments: 9000"),
    ],
)
def test_a_word_that_is_no_command_never_names_the_worker(args: tuple[str, ...], hint: str) -> None:
    proc = run(*args, MCP_SHIM_UPSTREAM_URL=nobody(), MCP_SHIM_PORT=str(procs.free_port()))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert hint in proc.stderr, proc.stderr
    assert not re.search(r"(?<![-\w])worker\b", proc.stderr), proc.stderr


def test_help_lists_the_flags_with_their_variables_and_not_the_worker() -> None:
    proc = run("--help")
    assert proc.returncode == 0, proc.stderr
    for flag, name in [
        ("--host", "MCP_SHIM_HOST"),
        ("--port", "MCP_SHIM_PORT"),
        ("--upstream", "MCP_SHIM_UPSTREAM_URL"),
        ("--stdio", "MCP_SHIM_UPSTREAM_COMMAND"),
        ("--workers", "MCP_SHIM_WORKERS"),
    ]:
        assert re.search(rf"{flag} .*\s+.*\[{name}\]", proc.stdout), flag
    assert "config" in proc.stdout
    assert not re.search(r"(?<![-\w])worker\b", proc.stdout)


@pytest.mark.parametrize("before", [True, False])
def test_the_port_flag_serves_on_that_port(before: bool) -> None:
    port = procs.free_port()
    flag = ["--port", str(port)]
    args = [*flag, "serve"] if before else ["serve", *flag]
    # The variable names another port: the flag wins.
    with gateway(
        args, port, MCP_SHIM_UPSTREAM_URL=nobody(), MCP_SHIM_PORT="1", MCP_SHIM_WORKERS="1"
    ):
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()["status"] == "ok"


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_flags_reach_the_workers() -> None:
    port = procs.free_port()
    upstream = nobody()
    # No upstream variable at all: a worker without the flag would refuse to start.
    args = ["--upstream", upstream, "--port", str(port), "--workers", "2"]
    with gateway(args, port, MCP_SHIM_STATE_KEY=KEY) as proc:
        workers = _children(proc.pid)
        assert len(workers) == 2, workers
        for pid in workers:
            environ = _environ(pid)
            assert environ["MCP_SHIM_UPSTREAM_URL"] == upstream
            assert environ["MCP_SHIM_PORT"] == str(port)
            assert "MCP_SHIM_STATE_KEY" not in environ
        for _ in range(4):
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200


# -- the probe checks what serve checks -------------------------------------------------


def test_probe_refuses_a_bad_state_key_as_serve_does() -> None:
    for command in ("probe", "serve"):
        proc = run(command, MCP_SHIM_UPSTREAM_URL=nobody(), MCP_SHIM_STATE_KEY="abc")
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert "MCP_SHIM_STATE_KEY" in proc.stderr and "abc" not in proc.stderr
