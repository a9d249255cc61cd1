"""app/metrics.py without a server: bounded labels, the upstream timing holder
(app/call.py), gauges read on the event loop, the outcome list kept in step
with the code."""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest

from app import call, metrics
from app.metrics import LiveState, Metrics, parse_exposition
from app.subscriptions.mailbox import End
from app.upstream import errors
from tests.waiting import one_turn
from translators.registry import get_version

ROOT = Path(__file__).resolve().parents[3]
MODERN = get_version("2026-07-28")
assert MODERN is not None


def samples(registry_metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(registry_metrics.registry).decode()
    return {
        (name, frozenset(labels.items())): value
        for name, labels, value in parse_exposition(text)
        if name.startswith("mcp_shim_")
    }


def test_labels_come_from_fixed_sets() -> None:
    # A method is its own label when the registry knows it, else "other" (call_done).
    assert "tools/call" in metrics.METHODS
    assert "initialize" in metrics.METHODS  # a legacy client's method
    assert "tools/call2" not in metrics.METHODS and "" not in metrics.METHODS
    assert metrics.version_label("2025-06-18") == "2025-06-18"
    assert metrics.version_label("2099-01-01") == "other"
    assert metrics.outcome_label("error -32602") == "error"
    assert metrics.outcome_label("error 123456789") == "error"
    assert metrics.outcome_label("UpstreamTimeout") == "UpstreamTimeout"
    assert metrics.outcome_label("something new") == "other"
    assert metrics.status_label(404) == "404"
    assert metrics.status_label(1000) == "other"


def _outcomes_in_source() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "app").rglob("*.py"):
        found |= set(re.findall(r'outcome = "([^"]+)"', path.read_text(encoding="utf-8")))
    return found


def _import_every_app_module() -> None:
    # Error kinds live beside their transport (app/upstream/stdio/process.py...): a
    # subclass is only known once its module is imported.
    import app

    for info in pkgutil.walk_packages(app.__path__, "app."):
        importlib.import_module(info.name)


def _error_classes(base: type[errors.UpstreamError]) -> set[type[errors.UpstreamError]]:
    _import_every_app_module()
    out: set[type[errors.UpstreamError]] = set()
    for sub in base.__subclasses__():
        out |= {sub, *_error_classes(sub)}
    return out


def test_every_outcome_the_code_sets_is_a_label_of_its_own() -> None:
    """A new outcome somewhere in app/ must be added to metrics.OUTCOMES, or its
    calls would be counted as "other" (tests the list, not the code)."""
    literal = _outcomes_in_source()
    assert {"ok", "rejected", "input_required", "listening"} <= literal  # the scan works
    # The computed ones: f"closed_{End}", f"upstream_{401|403}", type(exc).__name__.
    computed = {f"closed_{end.value}" for end in End} | {"upstream_401", "upstream_403"}
    kinds = {cls.__name__ for cls in _error_classes(errors.UpstreamError)}
    kinds.discard("UpstreamAuthChallenge")  # its outcome is upstream_401 / upstream_403
    assert kinds == set(metrics.UPSTREAM_ERROR_KINDS)
    for outcome in literal | computed | kinds | {"client_disconnected"}:
        assert metrics.outcome_label(outcome) == outcome, outcome


def test_client_chosen_values_never_become_labels() -> None:
    registry = Metrics(process=False)
    for i in range(200):
        registry.call_done(f"bogus/{i}", MODERN, f"error {i}", 400, 0.01, None)
    series = samples(registry)
    calls = {labels: v for (name, labels), v in series.items() if name == "mcp_shim_calls_total"}
    assert calls == {
        frozenset(
            {
                "method": "other",
                "client_era": "modern",
                "client_version": "2026-07-28",
                "outcome": "error",
                "status": "400",
            }.items()
        ): 200.0
    }
    assert series["mcp_shim_call_duration_seconds_count", frozenset({("method", "other")})] == 200


def test_upstream_errors_are_counted_by_kind_and_the_upstream_part_observed() -> None:
    registry = Metrics(process=False)
    registry.call_done("tools/call", MODERN, "UpstreamTimeout", 504, 1.5, None)
    registry.call_done("tools/call", MODERN, "ok", 200, 0.2, 0.15)
    series = samples(registry)
    assert series["mcp_shim_upstream_errors_total", frozenset({("kind", "UpstreamTimeout")})] == 1
    assert series["mcp_shim_upstream_errors_total", frozenset({("kind", "PoolExhausted")})] == 0
    method = frozenset({("method", "tools/call")})
    assert series["mcp_shim_call_duration_seconds_count", method] == 2
    assert series["mcp_shim_upstream_duration_seconds_count", method] == 1
    assert series["mcp_shim_upstream_duration_seconds_sum", method] == pytest.approx(0.15)


async def test_the_upstream_part_is_from_sending_to_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]  # app/call.py's clock, faked
    monkeypatch.setattr(call, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    async def one_call(send: bool) -> float | None:
        timing = call.start_call()
        now[0] += 1.0  # before sending: not the upstream's part
        if send:
            call.upstream_sent()
        await one_turn()  # the upstream is awaited
        now[0] += 0.02
        call.upstream_answered()
        return timing.upstream_s

    # Each call in its own task, as each request is: no time leaks across.
    sent = await asyncio.create_task(one_call(True))
    assert sent == pytest.approx(0.02)
    assert await asyncio.create_task(one_call(False)) is None
    call.upstream_sent()  # outside any call: nothing to record, no error
    call.upstream_answered()


async def test_gauges_are_read_on_the_event_loop_even_from_another_thread() -> None:
    registry = Metrics(process=False)
    loop_thread = threading.get_ident()
    readers: list[int] = []

    def read(value: int) -> int:
        readers.append(threading.get_ident())
        return value

    registry.watch(
        LiveState(
            sessions=lambda: read(3),
            lanes_busy=lambda: read(1),
            lanes_idle=lambda: read(2),
            parked=lambda: read(4),
            listen_streams=lambda: read(5),
            tasks_live=lambda: read(6),
            task_sessions=lambda: read(7),
            task_connections=lambda: read(8),
        )
    )
    # The separate metrics port scrapes from its own thread.
    text = (await asyncio.to_thread(generate_latest, registry.registry)).decode()
    assert readers and set(readers) == {loop_thread}
    values = {(n, frozenset(labels.items())): v for n, labels, v in parse_exposition(text)}
    assert values["mcp_shim_upstream_sessions", frozenset()] == 3
    assert values["mcp_shim_mrtr_lanes", frozenset({("state", "busy")})] == 1
    assert values["mcp_shim_mrtr_lanes", frozenset({("state", "idle")})] == 2
    assert values["mcp_shim_mrtr_parked", frozenset()] == 4
    assert values["mcp_shim_listen_streams", frozenset()] == 5
    assert values["mcp_shim_tasks_live", frozenset()] == 6
    assert values["mcp_shim_task_upstream_sessions", frozenset()] == 7
    assert values["mcp_shim_task_upstream_connections", frozenset()] == 8
    registry.unwatch()
    assert "mcp_shim_upstream_sessions" not in generate_latest(registry.registry).decode()


def test_rejections_by_code_and_status() -> None:
    registry = Metrics(process=False)
    registry.rejected(-32600, 413)
    registry.rejected(-32600, 413)
    registry.rejected(None, 405)
    rejections = {
        labels: v for (name, labels), v in samples(registry).items() if "rejections" in name
    }
    assert rejections == {
        frozenset({("code", "-32600"), ("status", "413")}): 2,
        frozenset({("code", "none"), ("status", "405")}): 1,
    }


def test_relays_are_counted_by_what_is_owned_and_how_they_ended() -> None:
    registry = Metrics(process=False)
    registry.relayed("legacy_session", "relayed", 0.004, False)
    registry.relayed("legacy_session", "owner_broke_off:ReadError", 1.0, True)
    registry.relayed("mrtr_call", "owner_unreachable", 0.002, False)
    registry.relayed("a label nobody fixed", "an ending nobody fixed", 0.001, False)
    series = samples(registry)

    def relays(owned: str, ending: str) -> float:
        key = frozenset({("owned", owned), ("ending", ending)})
        return series["mcp_shim_replica_relays_total", key]

    assert relays("legacy_session", "relayed") == 1
    assert relays("legacy_session", "owner_broke_off") == 1  # the exception is no label
    assert relays("mrtr_call", "owner_unreachable") == 1
    assert relays("other", "other") == 1
    # A stream's duration is its client's to choose: not observed.
    owned = frozenset({("owned", "legacy_session")})
    assert series["mcp_shim_replica_relay_duration_seconds_count", owned] == 1
    assert series["mcp_shim_replica_relay_duration_seconds_sum", owned] == pytest.approx(0.004)
