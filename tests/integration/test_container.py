"""The images, built from the Dockerfile as it is and run, with podman.

No registry can be reached from these machines, so the Dockerfile's base image
is a local stand-in tagged with the Dockerfile's own base name
(scripts/container_base.sh, made once and kept), and the images are built with
`--pull=never` and `--format docker` (the OCI format drops HEALTHCHECK).
Nothing in the Dockerfile exists for this test.

Then, as an operator would: both targets (`runtime`, `demo`) build; they run
as their non-root users; their HEALTHCHECK commands exit 0; each stops on
SIGTERM within the grace period; a stdio upstream inside the gateway's
container leaves no zombie; and the containerized gateway in front of the
containerized demo server passes the conformance suite's 2026-07-28 set and
serves the official mcp 1.x client.

Needs root, podman and debootstrap (scripts/setup_peers.sh podman installs
them); anything missing fails the test with what to do, nothing is skipped.
podman runs with runc and cgroupfs (the machine's cgroups are hybrid, which
crun refuses) and explicit ulimits within the machine's hard limits.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration.test_conformance import RESULTS, run_conformance
from tests.integration.test_docker import answer_of, compose, healthcheck_command

ROOT = procs.ROOT
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs"]
LIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096"]
# The healthcheck is run by the test (`podman healthcheck run`); no timer, which
# would need systemd.
RUN = [*LIMITS, "--health-interval=disable"]
# The images as docker-compose.yml names them.
GATEWAY_IMAGE = compose()["services"]["mcp-shim"]["image"]
DEMO_IMAGE = compose()["services"]["legacy"]["image"]
# The runtime image's growth over its base: the gateway's installed packages
# (about 70 MB, docs/operations.md "The image"); a stray build tree or pip
# cache would show here.
MAX_ADDED_MB = 90
# The time podman stop gives before SIGKILL; the gateway's own graceful
# shutdown takes well under it.
GRACE_S = 10
PROTOCOL = "2026-07-28"


def podman(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            [*PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"podman {' '.join(args)} did not end within {timeout} s") from None
    if check and proc.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args)} failed ({proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


@pytest.fixture(scope="module")
def base_image() -> str:
    """The stand-in base, made by scripts/container_base.sh when it is missing."""
    if os.geteuid() != 0:
        pytest.fail("the container tests run podman as root: run them as root", pytrace=False)
    for tool in ("podman", "debootstrap"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: run scripts/setup_peers.sh podman", pytrace=False)
    made = subprocess.run(
        ["bash", str(ROOT / "scripts" / "container_base.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert made.returncode == 0, f"the stand-in base image:\n{made.stdout}\n{made.stderr}"
    return next(
        line.split()[1]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("FROM ") and line.rstrip().endswith(" AS base")
    )


@dataclass(frozen=True)
class Images:
    base: str
    build_s: dict[str, float]


def _build(target: str, tag: str) -> float:
    started = time.monotonic()
    podman(
        "build",
        "--pull=never",
        "--format",
        "docker",
        "--network=host",
        # The runtime stage installs the wheel from a bind mount of the builder's
        # output, and buildah's layer cache does not look at what a mount holds:
        # a cached build would keep an earlier tree's code.
        "--no-cache",
        *LIMITS,
        "--target",
        target,
        "-t",
        tag,
        str(ROOT),
        timeout=900,
    )
    return time.monotonic() - started


@pytest.fixture(scope="module")
def images(base_image: str) -> Images:
    build_s = {"runtime": _build("runtime", GATEWAY_IMAGE), "demo": _build("demo", DEMO_IMAGE)}
    return Images(base_image, build_s)


def image_size(image: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())


def wait_http(url: str, container: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        state = podman("inspect", "--format", "{{.State.Status}}", container).stdout.strip()
        if state not in ("running", "created", "configured"):
            logs = podman("logs", container, check=False)
            raise AssertionError(f"{container} is {state}:\n{logs.stdout}\n{logs.stderr}")
        time.sleep(0.2)
    logs = podman("logs", container, check=False)
    raise AssertionError(f"{url} did not answer within {timeout} s:\n{logs.stdout}\n{logs.stderr}")


@dataclass(frozen=True)
class Pod:
    gateway: str
    legacy: str
    base: str


@pytest.fixture(scope="module")
def pod(images: Images, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    """The demo server and the gateway in one network namespace (the demo
    container's, as a pod would share one; a pod's infra container cannot be
    given the ulimits this machine needs), the gateway published on a
    loopback port."""
    name = f"mcp-shim-test-{uuid.uuid4().hex[:8]}"
    port = procs.free_port()
    legacy, gateway = f"{name}-legacy", f"{name}-gateway"
    try:
        podman(
            "run", "-d", "--name", legacy, *RUN, "-p", f"127.0.0.1:{port}:8080", DEMO_IMAGE
        )  # fmt: skip
        # The demo server's own HEALTHCHECK says when it serves.
        deadline = time.monotonic() + 60
        while podman("healthcheck", "run", legacy, check=False).returncode != 0:
            assert time.monotonic() < deadline, podman("logs", legacy, check=False).stderr
            time.sleep(0.2)
        podman(
            "run", "-d", "--network", f"container:{legacy}", "--name", gateway, *RUN,
            "-e", "MCP_SHIM_UPSTREAM_URL=http://127.0.0.1:3001/mcp",
            GATEWAY_IMAGE,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", gateway)
        yield Pod(gateway, legacy, base)
    finally:
        logs = tmp_path_factory.mktemp("container-logs")
        for container in (gateway, legacy):
            out = podman("logs", container, check=False)
            (logs / f"{container}.log").write_text(out.stdout + out.stderr)
            podman("rm", "--force", container, check=False)


def call(base: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One 2026-07-28 tools/call through the gateway; the JSON-RPC answer."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    response = httpx.post(base + "/mcp", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, f"{response.status_code} {response.text}"
    return answer_of(response)


# ---------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------


def test_both_targets_build_and_the_runtime_stays_small(images: Images) -> None:
    added = (image_size(GATEWAY_IMAGE) - image_size(images.base)) / 1e6
    assert added < MAX_ADDED_MB, f"the runtime image adds {added:.0f} MB over its base"
    assert image_size(DEMO_IMAGE) > image_size(images.base)
    # --format docker keeps the HEALTHCHECK: the image carries the Dockerfile's command.
    for image, stage in ((GATEWAY_IMAGE, "runtime"), (DEMO_IMAGE, "demo")):
        test = podman("image", "inspect", "--format", "{{json .Config.Healthcheck.Test}}", image)
        assert json.loads(test.stdout) == ["CMD", *healthcheck_command(stage)], test.stdout


# ---------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------


def _tree_digest(files: list[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, data in sorted(files):
        digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


# Run inside the image: the same digest over the installed packages' sources.
_DIGEST_IN_IMAGE = """
import hashlib, pathlib, app, translators
files = []
for package in (app, translators):
    root = pathlib.Path(package.__file__).parent
    for path in root.rglob("*.py"):
        files.append((str(path.relative_to(root.parent)), path.read_bytes()))
digest = hashlib.sha256()
for name, data in sorted(files):
    digest.update(name.encode() + b"\\0" + data + b"\\0")
print(digest.hexdigest())
"""


def test_the_image_holds_this_trees_code(images: Images) -> None:
    """What runs in the image is this checkout's app/ and translators/, not a cached
    build of an earlier tree."""
    here = [
        (str(path.relative_to(ROOT)), path.read_bytes())
        for package in ("app", "translators")
        for path in (ROOT / package).rglob("*.py")
    ]
    inside = podman("run", "--rm", *LIMITS, "--entrypoint", "python", GATEWAY_IMAGE, "-c",
                    _DIGEST_IN_IMAGE)  # fmt: skip
    assert inside.stdout.strip() == _tree_digest(here)


def test_processes_run_as_the_images_users_not_root(pod: Pod) -> None:
    for container, uid in ((pod.gateway, "10001"), (pod.legacy, "10002")):
        users = podman("top", container, "user").stdout.split()[1:]
        assert users and "root" not in users, f"{container}: {users}"
        assert podman("exec", container, "id", "-u").stdout.strip() == uid


def test_healthchecks_pass(pod: Pod) -> None:
    for container in (pod.gateway, pod.legacy):
        checked = podman("healthcheck", "run", container, check=False)
        assert checked.returncode == 0, f"{container}: {checked.stdout} {checked.stderr}"


def test_a_call_and_readiness_through_the_containers(pod: Pod) -> None:
    answer = call(pod.base, "echo", {"text": "from the container"})
    assert answer["result"]["content"] == [{"type": "text", "text": "from the container"}]
    assert httpx.get(pod.base + "/readyz", timeout=15).status_code == 200


def test_conformance_2026_07_28_through_the_containers(pod: Pod) -> None:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-container"
    report = run_conformance(pod.base + "/mcp", RESULTS / stamp)
    assert report.scored, "no scored scenarios found in the suite's requirements file"
    assert report.exit_code == 0, "\n" + report.text()


def test_legacy_client_through_the_containers(pod: Pod) -> None:
    out: Any = procs.run_legacy_client("tour.py", pod.base + "/mcp", "2025-11-25")
    assert out["initialize"]["protocolVersion"] == "2025-11-25"
    assert out["initialize"]["serverInfo"]["name"] == "mcp-shim-legacy-fixture"
    assert out["simple"]["result"]["content"][0]["text"].startswith("This is a simple text")
    assert out["sampling"]["result"]["content"][0]["text"] == "LLM response: Paris"


@pytest.mark.parametrize("image", [GATEWAY_IMAGE, DEMO_IMAGE])
def test_sigterm_stops_the_container_within_the_grace_period(images: Images, image: str) -> None:
    name = f"mcp-shim-test-stop-{uuid.uuid4().hex[:8]}"
    port = procs.free_port()
    internal = "8080" if image == GATEWAY_IMAGE else "3001"
    podman(
        "run", "-d", "--name", name, *RUN, "-p", f"127.0.0.1:{port}:{internal}",
        "-e", "MCP_SHIM_UPSTREAM_URL=http://127.0.0.1:3001/mcp", image,
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", name)
        started = time.monotonic()
        podman("stop", "--time", str(GRACE_S), name, timeout=GRACE_S + 30)
        elapsed = time.monotonic() - started
        code = int(podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout)
        logs = podman("logs", name, check=False)
        # 137 is SIGKILL: the grace period ran out.
        assert code in (0, 143), f"exit {code} after {elapsed:.1f} s:\n{logs.stderr[-2000:]}"
        assert elapsed < GRACE_S, f"{elapsed:.1f} s"
    finally:
        podman("rm", "--force", name, check=False)


def _zombie_state(container: str, pid: str) -> str | None:
    """The State line of `pid` in the container, None when the process is gone."""
    status = podman("exec", container, "cat", f"/proc/{pid}/status", check=False)
    if status.returncode != 0:
        return None
    return next(
        (line for line in status.stdout.splitlines() if line.startswith("State:")), "State: ?"
    )


# The gateway is the container's PID 1 (the image has no init), so every orphan
# of its stdio servers becomes its child. With workers the supervisor is PID 1
# and reaps any child (app/workers.py); a single gateway process reaps the
# orphans that are not its own servers (app/upstream/containment.py).
@pytest.mark.parametrize("workers", ["1", "2"])
def test_stdio_upstream_leaves_no_zombie(images: Images, workers: str) -> None:
    name = f"mcp-shim-test-stdio-{uuid.uuid4().hex[:8]}"
    port = procs.free_port()
    podman(
        "create", "--name", name, *RUN, "-p", f"127.0.0.1:{port}:8080",
        "-e", "MCP_SHIM_UPSTREAM_COMMAND=python /tmp/stdio_orphan_server.py",
        "-e", f"MCP_SHIM_WORKERS={workers}",
        GATEWAY_IMAGE,
    )  # fmt: skip
    try:
        fixture = ROOT / "tests" / "fixtures" / "stdio_orphan_server.py"
        podman("cp", str(fixture), f"{name}:/tmp/stdio_orphan_server.py")
        podman("start", name)
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", name)
        answer = call(base, "orphan", {})
        assert "error" not in answer, answer
        pid = answer["result"]["content"][0]["text"]
        assert pid.isdigit(), answer
        # The orphan exits 0.3 s after it started; reaped, its /proc entry goes.
        deadline = time.monotonic() + 15
        while (state := _zombie_state(name, pid)) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert state is None, f"the stdio server's orphan {pid} is left as {state!r}"
    finally:
        podman("rm", "--force", name, check=False)
