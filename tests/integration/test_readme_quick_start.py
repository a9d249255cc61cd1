"""The README's quick start, run as a new user would: its commands taken from
README.md itself, in a fresh clone of the committed HEAD with nothing installed
in it (no .venv, no .peers), so that what the README says and what works
cannot drift apart.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from tests import procs

ROOT = procs.ROOT
# The demo installs mcp-shim and the legacy server's environment first.
START_TIMEOUT_S = 420


def quick_start_commands() -> list[str]:
    """Every command of the README's "Quick start" shell blocks, continuation
    lines joined and comments dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command:
                commands.append(" ".join(command.split()))
    return commands


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    # A user's shell: nothing that points Python at this checkout's environment,
    # no gateway setting of the outer run.
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("MCP_SHIM_", "PYTEST_"))
    }
    return {**env, "TMPDIR": str(tmp_path), **extra}


def test_the_quick_start_names_the_demo_docker_and_pip_ways() -> None:
    commands = quick_start_commands()
    assert commands[0] == "bash scripts/demo.sh", commands
    assert any(c.startswith("docker build --target runtime -t mcp-shim") for c in commands)
    assert any(c.startswith("docker run") and "MCP_SHIM_UPSTREAM_URL=" in c for c in commands)
    assert "pip install ." in commands
    assert any(c.endswith("mcp-shim probe") for c in commands), commands


@pytest.mark.slow
@pytest.mark.peers
def test_the_quick_start_runs_as_written_in_a_fresh_clone(tmp_path: Path) -> None:
    if subprocess.run(["which", "curl"], capture_output=True).returncode != 0:
        raise AssertionError("curl is needed to run the demo's example command")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    assert not (clone / ".venv").exists() and not (clone / ".peers").exists()
    commands = quick_start_commands()
    legacy_port, port = procs.free_port(), procs.free_port()
    env = _env(tmp_path, DEMO_LEGACY_PORT=str(legacy_port), MCP_SHIM_PORT=str(port))
    demo = subprocess.Popen(
        ["bash", "-c", commands[0]],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        printed = procs.read_until(demo, b"Press Ctrl-C", START_TIMEOUT_S).decode()
        lines = printed.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("curl "))
        end = next(i for i in range(start, len(lines)) if not lines[i].endswith("\\"))
        curl = "\n".join(lines[start : end + 1])
        answer = json.loads(
            subprocess.run(
                ["bash", "-c", curl], env=env, capture_output=True, timeout=60, check=True
            ).stdout
        )
        assert answer["result"]["content"] == [{"type": "text", "text": "hello"}], answer

        # The pip way's probe, in the environment the demo installed, against
        # the demo's server (its port instead of the README's example one).
        [probe] = [c for c in commands if c.endswith("mcp-shim probe")]
        words = shlex.split(probe)
        setting = next(w for w in words if w.startswith("MCP_SHIM_UPSTREAM_URL="))
        url = re.sub(r":\d+/", f":{legacy_port}/", setting.split("=", 1)[1])
        probed = subprocess.run(
            [str(clone / ".venv" / "bin" / "mcp-shim"), "probe"],
            cwd=tmp_path,
            env={**env, "MCP_SHIM_UPSTREAM_URL": url},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert probed.returncode == 0, probed.stdout + probed.stderr
        assert "echo" in probed.stdout, probed.stdout

        os.killpg(demo.pid, signal.SIGINT)
        assert demo.wait(60) == 130
        assert not procs.port_open(port) and not procs.port_open(legacy_port), (
            "the demo left a server"
        )
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGTERM)
            demo.wait(20)
