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
serves the official mcp 1.x client. Then the manifests run with the same
images: deploy/kubernetes/ with `podman kube play` (a variant made from the
manifests at each run) and docker-compose.yml with podman-compose (as written,
beside a generated override); each answers its probes and serves a call.
The stdio variants (`runtime-node`, `runtime-uv`) build and serve a published
npx and uvx server (slow: the builds fetch from Debian and PyPI, the servers
from npm's registry and PyPI at run time).
The images are run by the IDs their build wrote, never by tag.

Needs root, podman and debootstrap (scripts/setup_peers.sh podman installs
them); anything missing fails the test with what to do, nothing is skipped.
podman runs with runc and cgroupfs (the machine's cgroups are hybrid, which
crun refuses) and explicit ulimits within the machine's hard limits.
"""

from __future__ import annotations

import base64
import copy
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration.test_conformance import RESULTS, run_conformance
from tests.integration.test_docker import _yaml, answer_of, compose, healthcheck_command

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
    *args: str,
    timeout: float = 120,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    command: Sequence[str] = PODMAN,
) -> subprocess.CompletedProcess[str]:
    """podman (or `command`, podman-compose) with `args`; `env` added to ours."""
    what = " ".join([Path(command[0]).name, *command[1:], *args])
    try:
        proc = subprocess.run(
            [*command, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, **env} if env else None,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{what} did not end within {timeout} s") from None
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
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
    # The IDs of the images this run built. The tests run these, not the tags:
    # another checkout on the same machine building at the same time moves the
    # tags (docker-compose.yml's names) to its own images.
    gateway: str
    demo: str


def _build(target: str, tag: str, iidfile: Path, *extra: str) -> float:
    started = time.monotonic()
    podman(
        "build",
        "--iidfile",
        str(iidfile),
        "--pull=never",
        "--format",
        "docker",
        "--network=host",
        *LIMITS,
        *extra,
        "--target",
        target,
        "-t",
        tag,
        str(ROOT),
        timeout=900,
    )
    return time.monotonic() - started


@pytest.fixture(scope="module")
def images(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Images:
    ids = tmp_path_factory.mktemp("image-ids")
    build_s = {
        "runtime": _build("runtime", GATEWAY_IMAGE, ids / "runtime"),
        "demo": _build("demo", DEMO_IMAGE, ids / "demo"),
    }
    gateway, demo = ((ids / t).read_text().strip().removeprefix("sha256:") for t in build_s)
    return Images(base_image, build_s, gateway, demo)


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
            "run", "-d", "--name", legacy, *RUN, "-p", f"127.0.0.1:{port}:8080", images.demo
        )  # fmt: skip
        # The demo server's own HEALTHCHECK says when it serves.
        deadline = time.monotonic() + 60
        while podman("healthcheck", "run", legacy, check=False).returncode != 0:
            assert time.monotonic() < deadline, podman("logs", legacy, check=False).stderr
            time.sleep(0.2)
        podman(
            "run", "-d", "--network", f"container:{legacy}", "--name", gateway, *RUN,
            "-e", "MCP_SHIM_UPSTREAM_URL=http://127.0.0.1:3001/mcp",
            images.gateway,
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
    added = (image_size(images.gateway) - image_size(images.base)) / 1e6
    assert added < MAX_ADDED_MB, f"the runtime image adds {added:.0f} MB over its base"
    assert image_size(images.demo) > image_size(images.base)
    # --format docker keeps the HEALTHCHECK: the image carries the Dockerfile's command.
    for image, stage in ((images.gateway, "runtime"), (images.demo, "demo")):
        test = podman("image", "inspect", "--format", "{{json .Config.Healthcheck.Test}}", image)
        assert json.loads(test.stdout) == ["CMD", *healthcheck_command(stage)], test.stdout


# The gateway's packages as installed where this runs, one digest of every
# module's path and bytes: run in the image and in this checkout.
PACKAGES_DIGEST = """
import hashlib, importlib.util, pathlib
digest = hashlib.sha256()
for name in ("app", "translators"):
    base = pathlib.Path(importlib.util.find_spec(name).origin).parent
    for path in sorted(base.rglob("*.py")):
        digest.update(f"{name}/{path.relative_to(base).as_posix()}".encode() + b"\\0")
        digest.update(path.read_bytes())
print(digest.hexdigest())
"""


def test_the_runtime_image_holds_this_checkouts_gateway(images: Images) -> None:
    """podman and buildah reuse the cached install layer of a `RUN
    --mount=...,from=builder` whatever the builder stage now holds (so a
    rebuild after a change of the code kept the old gateway): the Dockerfile
    copies the wheels' digests in first, which a new wheel changes."""
    here = subprocess.run(
        [sys.executable, "-c", PACKAGES_DIGEST],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    ).stdout.strip()
    inside = podman(
        "run", "--rm", *LIMITS, "--entrypoint", "python", images.gateway, "-c", PACKAGES_DIGEST
    ).stdout.strip()  # fmt: skip
    assert inside == here, "the image's gateway is not this checkout's: a stale build layer"


# ---------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------


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


@pytest.mark.parametrize("stage", ["runtime", "demo"])
def test_sigterm_stops_the_container_within_the_grace_period(images: Images, stage: str) -> None:
    name = f"mcp-shim-test-stop-{uuid.uuid4().hex[:8]}"
    port = procs.free_port()
    image = images.gateway if stage == "runtime" else images.demo
    internal = "8080" if stage == "runtime" else "3001"
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
# and reaps any child (app/serving/workers.py); a single gateway process reaps the
# orphans that are not its own servers (app/upstream/stdio/containment.py).
@pytest.mark.parametrize("workers", ["1", "2"])
def test_stdio_upstream_leaves_no_zombie(images: Images, workers: str) -> None:
    name = f"mcp-shim-test-stdio-{uuid.uuid4().hex[:8]}"
    port = procs.free_port()
    podman(
        "create", "--name", name, *RUN, "-p", f"127.0.0.1:{port}:8080",
        "-e", "MCP_SHIM_UPSTREAM_COMMAND=python /tmp/stdio_orphan_server.py",
        "-e", f"MCP_SHIM_WORKERS={workers}",
        images.gateway,
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


# ---------------------------------------------------------------------------
# The runtime variants that can start the README's stdio servers: `npx` in
# runtime-node, `uvx` in runtime-uv. Each runs the gateway in front of a
# published server fetched at run time from inside the container, as an
# operator's would be (npm's registry, PyPI); the versions are the ones the
# peers pin (.peers/node/package.json, tests/peers/legacy-requirements.txt).
# ---------------------------------------------------------------------------

# The Node.js major each Debian release ships (the Dockerfile's NODEJS_MAJOR):
# the stand-in base is Debian 12, the python image it stands in for Debian 13.
NODEJS_MAJOR = {"12": "18", "13": "20"}
VARIANTS = {
    "runtime-node": ("npx -y @modelcontextprotocol/server-everything@2026.8.31", "echo"),
    "runtime-uv": ("uvx mcp-server-time==2026.8.18", "get_current_time"),
}


def list_tools(base: str) -> dict[str, Any]:
    """One 2026-07-28 tools/list through the gateway; the JSON-RPC answer."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": "tools/list",
    }
    # The first call waits for the server's package to be fetched and installed.
    response = httpx.post(base + "/mcp", json=body, headers=headers, timeout=180)
    assert response.status_code == 200, f"{response.status_code} {response.text}"
    return answer_of(response)


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_runtime_variant_serves_a_published_stdio_server(
    base_image: str, tmp_path: Path, variant: str
) -> None:
    debian = podman(
        "run", "--rm", *LIMITS, "--entrypoint", "cat", base_image, "/etc/debian_version"
    ).stdout.split(".")[0]  # fmt: skip
    assert debian in NODEJS_MAJOR, f"a base on Debian {debian}: add its Node.js major"
    build_s = _build(
        variant,
        f"{GATEWAY_IMAGE}-{variant}",
        tmp_path / "iid",
        "--build-arg",
        f"NODEJS_MAJOR={NODEJS_MAJOR[debian]}",
    )
    image = (tmp_path / "iid").read_text().strip().removeprefix("sha256:")
    command, tool = VARIANTS[variant]
    name = f"mcp-shim-test-{variant}-{uuid.uuid4().hex[:8]}"
    port = procs.free_port()
    podman(
        "run", "-d", "--name", name, *RUN, "-p", f"127.0.0.1:{port}:8080",
        "-e", f"MCP_SHIM_UPSTREAM_COMMAND={command}",
        "-e", "MCP_SHIM_WORKERS=1",
        "-e", "MCP_SHIM_CONNECT_TIMEOUT_S=120",
        image,
    )  # fmt: skip
    try:
        users = podman("exec", name, "id", "-u").stdout.strip()
        assert users == "10001", users
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", name, timeout=180)
        started = time.monotonic()
        answer = list_tools(base)
        first_call_s = time.monotonic() - started
        assert "error" not in answer, answer
        names = [t["name"] for t in answer["result"]["tools"]]
        assert tool in names, names
        assert podman("healthcheck", "run", name, check=False).returncode == 0
        print(f"{variant}: build {build_s:.0f} s, first tools/list {first_call_s:.1f} s")
    except AssertionError:
        logs = podman("logs", name, check=False)
        print(logs.stdout[-4000:], logs.stderr[-4000:])
        raise
    finally:
        podman("rm", "--force", name, check=False)


# ---------------------------------------------------------------------------
# The manifests, run: deploy/kubernetes/ with `podman kube play`, and
# docker-compose.yml with podman-compose
# ---------------------------------------------------------------------------

KUBE_DIR = ROOT / "deploy" / "kubernetes"
# The ulimits this machine needs, for the containers `kube play` makes (a pod
# takes no --ulimit): podman reads them from the containers.conf it is given.
CONTAINERS_CONF = '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]\n'
# The demo server beside the gateway in the played pod: its upstream on the
# pod's loopback, as a sidecar would be.
POD_UPSTREAM = "http://127.0.0.1:3001/mcp"


def kube_documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(KUBE_DIR.glob("*.yaml")):
        docs += [d for d in _yaml().safe_load_all(path.read_text()) if d]
    return docs


def _cpu(quantity: str) -> float:
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def downward_value(source: dict[str, Any], container: dict[str, Any]) -> str:
    """What Kubernetes would put in an env entry's valueFrom that podman 4.3's
    `kube play` cannot resolve (status.podIP, metadata.namespace,
    resourceFieldRef): the pod's address as the test reaches it (one pod, so
    loopback), the default namespace, and the limit as the downward API rounds it."""
    if "fieldRef" in source:
        path = source["fieldRef"]["fieldPath"]
        values = {"status.podIP": "127.0.0.1", "metadata.namespace": "default"}
        assert path in values, f"a fieldRef to {path}: teach the test its value"
        return values[path]
    ref = source["resourceFieldRef"]
    assert ref["resource"] == "limits.cpu", f"a resourceFieldRef to {ref['resource']}"
    limit = _cpu(str(container["resources"]["limits"]["cpu"]))
    return str(math.ceil(limit / _cpu(str(ref.get("divisor", "1")))))


def kube_variant(
    name: str,
    host_port: int,
    secret: str,
    gateway_image: str = GATEWAY_IMAGE,
    demo_image: str = DEMO_IMAGE,
) -> list[dict[str, Any]]:
    """deploy/kubernetes/ as `podman kube play` can run it on one machine,
    made from the manifests themselves: one replica named `name`, the locally
    built images, the gateway's http port on `host_port`, the demo server as a
    second container of the pod, the downward API's values written out, the
    state key from the podman secret `secret`. The Secret manifest is a
    template that the gateway refuses (it says so), hence a real key."""
    docs = kube_documents()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["Deployment", "Secret", "Service"], kinds
    deployment = copy.deepcopy(next(d for d in docs if d["kind"] == "Deployment"))
    deployment["metadata"]["name"] = name
    deployment["spec"]["replicas"] = 1
    spec = deployment["spec"]["template"]["spec"]
    (gateway,) = spec["containers"]
    gateway["image"] = gateway_image
    http = next(p for p in gateway["ports"] if p["name"] == "http")
    http["hostPort"] = host_port
    for env in gateway["env"]:
        source = env.get("valueFrom", {})
        if "secretKeyRef" in source:
            source["secretKeyRef"]["name"] = secret
        elif source:
            env["value"] = downward_value(env.pop("valueFrom"), gateway)
        elif env["name"] == "MCP_SHIM_UPSTREAM_URL":
            env["value"] = POD_UPSTREAM
    # The pod's runAsUser is the gateway's; the demo server runs as its image's user.
    demo = {"name": "legacy-mcp", "image": demo_image}
    demo["securityContext"] = {"runAsUser": 10002, "runAsGroup": 10002}
    spec["containers"].append(demo)
    service = next(d for d in docs if d["kind"] == "Service")
    return [deployment, service]


@dataclass(frozen=True)
class Played:
    base: str
    gateway: str
    # Each probe's path and port (the named port's containerPort).
    probes: dict[str, tuple[str, int]]


@pytest.fixture(scope="module")
def played(images: Images, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    """deploy/kubernetes/ run by `podman kube play`, on a free loopback port."""
    work = tmp_path_factory.mktemp("kube")
    name = f"mcp-shim-test-{uuid.uuid4().hex[:8]}"
    secret = f"{name}-state-key"
    port = procs.free_port()
    variant = work / "play.yaml"
    docs = kube_variant(name, port, secret, images.gateway, images.demo)
    variant.write_text(_yaml().safe_dump_all(docs, sort_keys=False))
    conf = work / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    # podman's secrets are what `secretKeyRef` reads in kube play: a JSON map
    # of base64 values.
    key = base64.b64encode(os.urandom(32)).decode()
    value = json.dumps({"MCP_SHIM_STATE_KEY": base64.b64encode(key.encode()).decode()})
    (work / "secret.json").write_text(value)
    gateway_spec = docs[0]["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in gateway_spec["ports"]}
    probes = {
        kind: (get["path"], ports.get(get["port"], get["port"]))
        for kind in ("livenessProbe", "readinessProbe")
        if (get := gateway_spec[kind]["httpGet"])
    }
    podman("secret", "create", secret, str(work / "secret.json"))
    try:
        podman("kube", "play", str(variant), env={"CONTAINERS_CONF": str(conf)}, timeout=300)
        # kube play names a Deployment's pod <name>-pod-0, its containers <pod>-<container>.
        gateway = f"{name}-pod-0-{gateway_spec['name']}"
        base = f"http://127.0.0.1:{port}"
        wait_http(base + probes["readinessProbe"][0], gateway)
        yield Played(base, gateway, probes)
    finally:
        for container in podman("ps", "-a", "--filter", f"pod={name}-pod-0", "--format",
                                "{{.Names}}", check=False).stdout.split():  # fmt: skip
            out = podman("logs", container, check=False)
            (work / f"{container}.log").write_text(out.stdout + out.stderr)
        podman("kube", "down", str(variant), check=False)
        podman("secret", "rm", secret, check=False)


def test_kube_play_of_the_deployment_probes_answer(played: Played) -> None:
    """Each probe as the kubelet sends it (GET on the pod's address at the
    named port's containerPort, here from inside the pod) and through the
    hostPort. podman 4.3 would turn the liveness probe into the healthcheck
    `curl -f http://localhost:0/healthz` (a named port is not resolved, and the
    slim image has no curl), so its own healthcheck of the pod says nothing."""
    for kind, (path, port) in played.probes.items():
        response = httpx.get(played.base + path, timeout=15)
        assert response.status_code == 200, f"{kind} {path}: {response.status_code} {response.text}"
        url = f"http://127.0.0.1:{port}{path}"
        inside = podman(
            "exec", played.gateway, "python", "-c",
            f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=3).status)",
            check=False,
        )  # fmt: skip
        assert inside.stdout.strip() == "200", f"{kind} {url}: {inside.stdout} {inside.stderr}"
    ready = httpx.get(played.base + played.probes["readinessProbe"][0], timeout=15).json()
    assert ready["upstream"]["protocol_version"] == "2025-11-25", ready
    users = podman("top", played.gateway, "user").stdout.split()[1:]
    assert users and "root" not in users, users


def test_kube_play_of_the_deployment_serves_a_call(played: Played) -> None:
    answer = call(played.base, "echo", {"text": "from the pod"})
    assert answer["result"]["content"] == [{"type": "text", "text": "from the pod"}]


def compose_override(host_port: int, images: Mapping[str, str]) -> str:
    """What podman-compose is given beside docker-compose.yml, unchanged: the
    ulimits this machine needs on each service, the images this run built (by
    ID, see Images), and the gateway's published port moved from 8080 to
    `host_port` (`!override`: compose appends port lists). YAML's flow style
    is JSON's, so json.dumps writes the values."""
    limits = {"nofile": {"soft": 20000, "hard": 20000}, "nproc": {"soft": 4096, "hard": 4096}}
    lines = ["services:"]
    for name, service in compose()["services"].items():
        lines += [f"  {name}:", f"    ulimits: {json.dumps(limits)}"]
        lines.append(f"    image: {json.dumps(images[name])}")
        ports = [str(p).rsplit(":", 2) for p in service.get("ports", [])]
        if ports:
            moved = [f"{host}:{host_port}:{inside}" for host, _, inside in ports]
            assert len(moved) == 1, f"{name} publishes {len(moved)} ports: one free port each"
            lines.append(f"    ports: !override {json.dumps(moved)}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Composed:
    base: str
    containers: dict[str, str]


@pytest.fixture(scope="module")
def composed(images: Images, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Composed]:
    """docker-compose.yml brought up by podman-compose with the images built
    above (`--no-build`: the build targets are the ones test_docker.py checks
    against the Dockerfile), under a project name of its own."""
    if importlib.util.find_spec("podman_compose") is None:
        pytest.fail("podman-compose is missing: pip install -e '.[dev]'", pytrace=False)
    work = tmp_path_factory.mktemp("compose")
    project = f"mcp-shim-test-{uuid.uuid4().hex[:8]}"
    port = procs.free_port()
    override = work / "override.yml"
    built = {"mcp-shim": images.gateway, "legacy": images.demo}
    override.write_text(compose_override(port, built))
    command = [
        sys.executable, "-m", "podman_compose", "--podman-args", " ".join(PODMAN[1:]),
        "-p", project, "-f", str(ROOT / "docker-compose.yml"), "-f", str(override),
    ]  # fmt: skip
    containers = {name: f"{project}_{name}_1" for name in compose()["services"]}
    try:
        podman("up", "-d", "--no-build", command=command, timeout=300)
        base = f"http://127.0.0.1:{port}"
        # podman 4.3 cannot wait for `service_healthy` (podman-compose says
        # so and starts the gateway at once): its readiness says when it serves.
        wait_http(base + "/readyz", containers["mcp-shim"])
        yield Composed(base, containers)
    finally:
        for container in containers.values():
            out = podman("logs", container, check=False)
            (work / f"{container}.log").write_text(out.stdout + out.stderr)
        podman("down", "--timeout", str(GRACE_S), command=command, check=False, timeout=120)


def test_compose_up_with_podman_compose_serves_a_call(composed: Composed) -> None:
    answer = call(composed.base, "echo", {"text": "from compose"})
    assert answer["result"]["content"] == [{"type": "text", "text": "from compose"}]
    # The upstream found by its service name on the compose network.
    ready = httpx.get(composed.base + "/readyz", timeout=15).json()
    assert ready["upstream"]["protocol_version"] == "2025-11-25", ready


def test_compose_services_healthy_read_only_and_unprivileged(composed: Composed) -> None:
    for service, container in composed.containers.items():
        checked = podman("healthcheck", "run", container, check=False)
        assert checked.returncode == 0, f"{service}: {checked.stdout} {checked.stderr}"
        declared = compose()["services"][service]
        (inspected,) = json.loads(podman("inspect", container).stdout)
        host = inspected["HostConfig"]
        assert host["ReadonlyRootfs"] is bool(declared.get("read_only")), service
        assert "no-new-privileges" in " ".join(host["SecurityOpt"] or []), (service, host)
        assert declared["cap_drop"] == ["ALL"], service
        assert not inspected["EffectiveCaps"], (service, inspected["EffectiveCaps"])
        users = podman("top", container, "user").stdout.split()[1:]
        assert users and "root" not in users, f"{service}: {users}"
