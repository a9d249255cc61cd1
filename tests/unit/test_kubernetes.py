"""deploy/kubernetes: valid resources (kubernetes-validate, strict), and an
environment the gateway accepts: real settings, a per-pod advertise URL its
peers can reach, probes on the gateway's health endpoints."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from app.cluster.sealing import parse_keys
from app.config import Settings
from app.fronts.shared.security import check_host
from app.serving import workers

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
K8S_VERSION = kubernetes_validate.latest_version()
_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in MANIFESTS:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _one(kind: str) -> dict[str, Any]:
    found = [d for d in _documents() if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _container() -> dict[str, Any]:
    containers = _one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def _env() -> list[dict[str, Any]]:
    return list(_container()["env"])


def test_every_manifest_is_a_valid_resource() -> None:
    assert {d["kind"] for d in _documents()} >= {"Deployment", "Service", "Secret"}
    for doc in _documents():
        # strict: an unknown or misspelt field is an error, not ignored.
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validator_refuses_a_misspelt_field() -> None:
    # The check above can fail: the same Deployment with one typo does not pass.
    broken = copy.deepcopy(_one("Deployment"))
    probe = broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["periodSecond"] = probe.pop("periodSeconds")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_env_names_are_settings_of_the_gateway() -> None:
    settings = {f"MCP_SHIM_{name.upper()}" for name in Settings.model_fields}
    names = [e["name"] for e in _env()]
    gateway_names = [n for n in names if n.startswith("MCP_SHIM_")]
    assert "MCP_SHIM_UPSTREAM_URL" in gateway_names
    assert sorted(set(gateway_names) - settings) == []
    assert len(names) == len(set(names)), "an env name is set twice"


def test_references_name_variables_defined_before_them() -> None:
    # Kubernetes expands $(NAME) only for variables defined earlier in the list;
    # anything else stays literal and would reach the gateway as "$(POD_IP)".
    defined: set[str] = set()
    for entry in _env():
        for ref in _REF.findall(str(entry.get("value", ""))):
            assert ref in defined, f"{entry['name']} uses $({ref}) before it is defined"
        defined.add(entry["name"])


def _downward(entry: dict[str, Any]) -> str | None:
    source = entry.get("valueFrom", {}).get("fieldRef", {})
    return source.get("fieldPath")


def _resource(ref: dict[str, Any]) -> str:
    """A resourceFieldRef as the kubelet fills it: CPU in whole cores, rounded up."""
    assert ref["containerName"] == _container()["name"]
    assert ref["resource"] == "limits.cpu" and str(ref.get("divisor", "1")) == "1"
    cpu = str(_container()["resources"]["limits"]["cpu"])
    cores = int(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    return str(math.ceil(cores))


def _expanded_env(pod_ip: str, namespace: str, key: str) -> dict[str, str]:
    """The environment one pod gets: downward API values and the Secret filled in."""
    pod_fields = {"status.podIP": pod_ip, "metadata.namespace": namespace}
    env: dict[str, str] = {}
    for entry in _env():
        if (path := _downward(entry)) is not None:
            env[entry["name"]] = pod_fields[path]
        elif (resource := entry.get("valueFrom", {}).get("resourceFieldRef")) is not None:
            env[entry["name"]] = _resource(resource)
        elif "secretKeyRef" in entry.get("valueFrom", {}):
            env[entry["name"]] = key
        else:
            env[entry["name"]] = _REF.sub(lambda m: env[m.group(1)], entry["value"])
    return env


def test_each_pod_advertises_its_own_ip_and_accepts_it_as_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for entry in _env():
        monkeypatch.delenv(entry["name"], raising=False)
    assert any(_downward(e) == "status.podIP" for e in _env())
    for name, value in _expanded_env("10.1.2.3", "tools", "A" * 43).items():
        monkeypatch.setenv(name, value)
    settings = Settings()  # type: ignore[call-arg]
    assert str(settings.advertise_url).rstrip("/") == f"http://10.1.2.3:{settings.port}"
    # A retry another replica forwards arrives with this pod's address as Host;
    # clients in the cluster use the Service's names.
    assert check_host(f"10.1.2.3:{settings.port}", settings.allowed_hosts) is None
    assert check_host("mcp-shim:8080", settings.allowed_hosts) is None
    assert check_host("mcp-shim.tools.svc.cluster.local:8080", settings.allowed_hosts) is None
    assert check_host("10.1.2.4:8080", settings.allowed_hosts) is not None
    assert settings.host == "0.0.0.0"
    assert settings.state_key is not None
    assert parse_keys(settings.state_key.get_secret_value())


def test_state_key_comes_from_the_secret_and_no_real_key_is_shipped() -> None:
    ref = next(e for e in _env() if e["name"] == "MCP_SHIM_STATE_KEY")["valueFrom"]["secretKeyRef"]
    secret = _one("Secret")
    assert secret["metadata"]["name"] == ref["name"]
    shipped = secret["stringData"][ref["key"]]
    # The placeholder must stop start-up (exit 2) rather than seal with a
    # public key: every clone of this repository would know it.
    with pytest.raises(ValueError):
        parse_keys(shipped)


def test_probes_use_the_health_endpoints_on_the_served_port() -> None:
    container = _container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] in ports
    port = next(e["value"] for e in _env() if e["name"] == "MCP_SHIM_PORT")
    assert int(port) in ports.values()


def test_service_selects_the_pods_without_affinity() -> None:
    service = _one("Service")
    labels = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"].get("sessionAffinity", "None") == "None"
    names = {p["name"] for p in _container()["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= names


def test_runs_as_non_root_on_a_read_only_root() -> None:
    pod = _one("Deployment")["spec"]["template"]["spec"]
    container = _container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {"requests", "limits"} <= container["resources"].keys()


def test_one_worker_per_cpu_of_the_limit_each_reachable_from_other_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for entry in _env():
        monkeypatch.delenv(entry["name"], raising=False)
    for name, value in _expanded_env("10.1.2.3", "tools", "A" * 43).items():
        monkeypatch.setenv(name, value)
    settings = Settings()  # type: ignore[call-arg]
    count = workers.worker_count(settings)
    assert count == 2  # limits.cpu "2"
    addresses = workers.worker_addresses(settings, count)
    declared = {p["containerPort"] for p in _container()["ports"]}
    for address in addresses:
        # Bound on every interface, declared, advertised with this pod's IP, and
        # accepted as Host when another pod's worker relays a request to it.
        assert address.bind_host == "0.0.0.0"
        assert address.port in declared
        url = workers.advertise_url(settings, address.port)
        assert url == f"http://10.1.2.3:{address.port}"
        assert check_host(url.removeprefix("http://"), settings.allowed_hosts) is None
