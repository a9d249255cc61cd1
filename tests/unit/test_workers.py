"""app/serving/workers.py without processes: how many workers, where each is reached,
what each gets in its environment (never the state key), and the merged /metrics of all of them."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import structlog.testing
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from app.config import Settings, SettingsError
from app.metrics import parse_exposition
from app.serving import workers, workers_metrics
from app.settings.load import load_settings

UPSTREAM = "http://127.0.0.1:3001/mcp"


def settings(**values: object) -> Settings:
    # Unset unless a test sets it, whatever the environment says (the integration
    # tests' conftest sets MCP_SHIM_WORKERS=1 for the whole run).
    values.setdefault("workers", None)
    return Settings(upstream_url=UPSTREAM, **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("max 100000\n", None),
        ("200000 100000\n", 2.0),
        ("150000 100000", 1.5),
        ("50000 100000", 0.5),
        ("garbage", None),
        ("", None),
    ],
)
def test_cpu_max_is_read_as_cpus_of_quota(text: str, cpus: float | None) -> None:
    assert workers.parse_cpu_max(text) == cpus


def test_cgroup_v2_quota_is_read_before_v1(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert workers.cgroup_cpu_quota(tmp_path) == 4.0  # v1 only
    (tmp_path / "cpu.max").write_text("300000 100000\n")
    assert workers.cgroup_cpu_quota(tmp_path) == 3.0


def test_no_quota_anywhere_is_none(tmp_path: Path) -> None:
    assert workers.cgroup_cpu_quota(tmp_path) is None
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert workers.cgroup_cpu_quota(tmp_path) is None


@pytest.mark.parametrize(
    ("affinity", "quota", "count"),
    [(2, None, 2), (8, 2.0, 2), (8, 1.5, 1), (8, 0.5, 1), (2, 16.0, 2), (1, None, 1)],
)
def test_default_count_is_the_smaller_of_affinity_and_quota(
    affinity: int, quota: float | None, count: int
) -> None:
    assert workers.available_cpus(affinity, quota) == count


@pytest.mark.parametrize(
    ("cpus", "count"), [(1, 1), (2, 2), (8, 8), (9, 8), (64, 8), (256, 8), (0, 1)]
)
def test_the_unset_default_is_the_cpu_count_capped(cpus: int, count: int) -> None:
    # A container with no CPU limit on a 64-core host sees 64 CPUs: not 64 workers.
    assert workers.default_workers(cpus) == count
    assert workers.DEFAULT_WORKERS_CAP == 8


def test_the_cap_applies_to_the_unset_default_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "available_cpus", lambda affinity=None, quota=None: 64)
    assert workers.worker_count(settings()) == workers.DEFAULT_WORKERS_CAP
    assert workers.worker_count(settings(workers=32)) == 32


def test_the_default_count_is_logged_with_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "available_cpus", lambda affinity=None, quota=None: 64)
    with structlog.testing.capture_logs() as seen:
        workers.log_worker_count(settings())
        workers.log_worker_count(settings(workers=3))
    assert [(e["event"], e["workers"]) for e in seen] == [("workers_default", 8), ("workers", 3)]
    assert (seen[0]["cpus"], seen[0]["cap"], seen[0]["capped"]) == (64, 8, True)


def test_an_explicit_count_wins_and_zero_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_SHIM_WORKERS", raising=False)
    assert workers.worker_count(settings(workers=3)) == 3
    assert workers.worker_count(settings()) == workers.available_cpus(
        quota=workers.cgroup_cpu_quota()
    )
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_URL", UPSTREAM)
    monkeypatch.setenv("MCP_SHIM_WORKERS", "0")
    with pytest.raises(SettingsError, match="MCP_SHIM_WORKERS"):
        load_settings()
    monkeypatch.setenv("MCP_SHIM_WORKERS", "")
    assert load_settings().workers is None


def test_worker_ports_are_any_free_ones_on_loopback_by_default() -> None:
    found = workers.worker_addresses(settings(port=8080, host="0.0.0.0"), 3)
    assert [(a.index, a.bind_host, a.port) for a in found] == [
        (0, "127.0.0.1", 0),
        (1, "127.0.0.1", 0),
        (2, "127.0.0.1", 0),
    ]
    based = workers.worker_addresses(settings(port=8080, worker_port_base=8081), 3)
    assert [a.port for a in based] == [8081, 8082, 8083]


def test_with_an_advertise_url_the_workers_listen_where_other_replicas_reach_them() -> None:
    config = settings(
        host="0.0.0.0", port=8080, worker_port_base=9100, advertise_url="http://10.1.2.3:8080"
    )
    found = workers.worker_addresses(config, 2)
    assert [(a.bind_host, a.port) for a in found] == [("0.0.0.0", 9100), ("0.0.0.0", 9101)]
    assert workers.advertise_url(config, 9101) == "http://10.1.2.3:9101"
    v6 = settings(advertise_url="http://[fd00::7]:8080")
    assert workers.advertise_url(v6, 9100) == "http://[fd00::7]:9100"
    assert workers.advertise_url(settings(), 40000) == "http://127.0.0.1:40000"


def test_worker_ports_must_not_take_the_gateway_or_metrics_port() -> None:
    with pytest.raises(SettingsError, match="MCP_SHIM_METRICS_PORT"):
        workers.worker_addresses(settings(port=8080, metrics_port=8082, worker_port_base=8081), 2)
    with pytest.raises(SettingsError, match="MCP_SHIM_PORT"):
        workers.worker_addresses(settings(port=8080, worker_port_base=8079), 2)
    with pytest.raises(SettingsError, match="beyond 65535"):
        workers.worker_addresses(settings(port=8080, worker_port_base=65535), 2)
    # 0: any free ports, chosen when bound.
    assert {a.port for a in workers.worker_addresses(settings(worker_port_base=0), 4)} == {0}


def test_the_supervisor_reaches_a_wildcard_listener_on_loopback() -> None:
    assert workers.local_url("0.0.0.0", 9100) == "http://127.0.0.1:9100"
    assert workers.local_url("::", 9100) == "http://127.0.0.1:9100"
    assert workers.local_url("10.0.0.5", 9100) == "http://10.0.0.5:9100"
    assert workers.local_url("::1", 9100) == "http://[::1]:9100"


def test_a_worker_environment_names_it_and_never_carries_the_key() -> None:
    source = {
        "MCP_SHIM_UPSTREAM_URL": UPSTREAM,
        "MCP_SHIM_METRICS_PORT": "9090",
        "MCP_SHIM_ADVERTISE_URL": "http://10.1.2.3:8080",
        "MCP_SHIM_STATE_KEY": "S2V5",
        "PATH": "/usr/bin",
    }
    env = workers.worker_environment(source, "http://10.1.2.3:8081")
    assert env["MCP_SHIM_ADVERTISE_URL"] == "http://10.1.2.3:8081"
    # The key reaches a worker by a pipe (app/serving/state_key.py), even when the
    # supervisor was started with it in its own environment.
    assert "MCP_SHIM_STATE_KEY" not in env
    assert "MCP_SHIM_METRICS_PORT" not in env  # the supervisor serves it
    assert env["PATH"] == "/usr/bin"
    assert source["MCP_SHIM_ADVERTISE_URL"] == "http://10.1.2.3:8080"  # not mutated
    assert source["MCP_SHIM_STATE_KEY"] == "S2V5"


def _exposition(calls: float, parked: float) -> str:
    registry = CollectorRegistry()
    Counter("mcp_shim_calls", "Calls", ["method"], registry=registry).labels("tools/call").inc(
        calls
    )
    Gauge("mcp_shim_mrtr_parked", "Parked", registry=registry).set(parked)
    return generate_latest(registry).decode()


class _Fixed(Collector):
    def __init__(self, texts: list[tuple[int, str]]) -> None:
        self._texts = texts

    def collect(self) -> list[Metric]:
        return workers_metrics.merge_expositions(self._texts)


def test_every_workers_metrics_come_out_once_per_family_with_a_worker_label() -> None:
    registry = CollectorRegistry()
    registry.register(_Fixed([(0, _exposition(3, 1)), (1, _exposition(5, 0))]))
    text = generate_latest(registry).decode()
    assert text.count("# TYPE mcp_shim_calls_total counter") == 1
    samples = {
        (name, labels.get("worker")): value for name, labels, value in parse_exposition(text)
    }
    assert samples[("mcp_shim_calls_total", "0")] == 3
    assert samples[("mcp_shim_calls_total", "1")] == 5
    assert samples[("mcp_shim_mrtr_parked", "0")] == 1
    assert samples[("mcp_shim_mrtr_parked", "1")] == 0


def test_restarts_back_off_while_a_worker_keeps_failing() -> None:
    with socket.socket() as sock:
        worker = workers.Worker(0, sock, "http://127.0.0.1:1", "http://127.0.0.1:1")
        supervisor = workers.Supervisor(settings(), sock, [worker], {}, None)

        def delay(ran_s: float) -> float:
            worker.started = time.monotonic() - ran_s
            before = time.monotonic()
            supervisor._schedule_restart(worker, "worker_exited", {"worker": 0})
            assert worker.restart_at is not None
            return round(worker.restart_at - before, 1)

        delays = [delay(1.0) for _ in range(9)]
        assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
        assert delay(workers.STABLE_S) == 0.5  # it ran long enough: start over


def test_each_worker_gets_its_inbox_and_every_siblings_outbox() -> None:
    pairs = [workers.handoff_pair() for _ in range(3)]
    try:
        crew = [
            workers.Worker(i, socket.socket(), f"http://127.0.0.1:{9000 + i}", "", pairs[i])
            for i in range(3)
        ]
        supervisor = workers.Supervisor(None, socket.socket(), crew, {}, "k")  # type: ignore[arg-type]
        argv: list[str] = []
        fds = supervisor._handoff_fds(crew[1], argv)
        assert fds == [pairs[1][0].fileno(), pairs[0][1].fileno(), pairs[2][1].fileno()]
        assert argv == [
            "--handoff-inbox",
            str(pairs[1][0].fileno()),
            "--handoff-outbox",
            f"http://127.0.0.1:9000={pairs[0][1].fileno()}",
            "--sibling",
            "0=http://127.0.0.1:9000",
            "--handoff-outbox",
            f"http://127.0.0.1:9002={pairs[2][1].fileno()}",
            "--sibling",
            "2=http://127.0.0.1:9002",
        ]
        # What a sibling writes to a worker's outbox arrives whole at its inbox;
        # the inbox itself sends nothing.
        inbox, outbox = pairs[1]
        outbox.send(b"one message")
        assert inbox.recv(100) == b"one message"
        with pytest.raises(OSError):
            inbox.send(b"back")
        for worker in crew:
            worker.internal.close()
        supervisor._listener.close()
    finally:
        for pair in pairs:
            for end in pair:
                end.close()


def test_no_handover_channel_without_a_stdio_upstream() -> None:
    worker = workers.Worker(0, socket.socket(), "http://127.0.0.1:9000", "")
    supervisor = workers.Supervisor(None, socket.socket(), [worker], {}, "k")  # type: ignore[arg-type]
    argv: list[str] = []
    assert supervisor._handoff_fds(worker, argv) == [] and argv == []
    worker.internal.close()
    supervisor._listener.close()


def test_workers_accept_one_connection_per_wake_unless_the_operator_says_otherwise() -> None:
    # Without it, libuv hands a burst of connections to whichever worker wakes
    # first (bench/accept_spread.py).
    env = workers.worker_environment({"PATH": "/usr/bin"}, "http://127.0.0.1:8081")
    assert env[workers.SINGLE_ACCEPT] == "1"
    kept = workers.worker_environment({workers.SINGLE_ACCEPT: "0"}, "http://127.0.0.1:8081")
    assert kept[workers.SINGLE_ACCEPT] == "0"
