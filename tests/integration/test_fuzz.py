"""Property-based fuzzing of the gateway, bounded for the suite (issue 7 "Evidence").

Hostile 2026-07-28 messages (tests/fuzzing.py: generated from the spec's
schema by hypothesis-jsonschema, then mutated) go over real HTTP to a gateway
process of its own in front of a legacy fixture server of its own. For each:
an answer, never a 5xx, a JSON-RPC answer valid against the 2026-07-28 schema
whose id echoes a readable request id (basic/index "Error Responses"), 202 or a
4xx for a notification, 403 for a Host or Origin not allowed; the process
stays alive; a conforming call from another caller is still served; its RSS
stays within tests.fuzzing.RSS_GROWTH_MIB of where it was after the warm-up.

Settings profiles (MCP_SHIM_FUZZ_PROFILE): ``fuzz-ci`` (the default:
derandomized, so every run sends the same messages; no example database;
about 30 s here) and ``fuzz-dev`` (random, more examples). ``scripts/fuzz.py``
is the long run. ``MCP_SHIM_FUZZ_AVOID=known`` steers clear of the defects
issue 7 lists (tests.fuzzing.KNOWN_DEFECTS), to check the harness itself.
Select with ``-k fuzz`` or ``-m fuzz``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests import fuzzing, fuzzing_legacy, procs
from tests.integration.test_legacy_clients import initialize

settings.register_profile(
    "fuzz-ci",
    max_examples=400,
    deadline=None,
    derandomize=True,
    database=None,
    # No shrinking: each example is an HTTP exchange, and the failure report
    # prints the exact bytes (Probe.reproducer) anyway.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
settings.register_profile(
    "fuzz-dev",
    max_examples=2_000,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
PROFILE = settings.get_profile(os.environ.get("MCP_SHIM_FUZZ_PROFILE", "fuzz-ci"))
AVOID = fuzzing.parse_avoid(os.environ.get("MCP_SHIM_FUZZ_AVOID", ""))


@dataclass
class Target:
    port: int
    pid: int
    warm_rss_kib: int
    workers: frozenset[int]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """A legacy fixture server and a gateway of their own: the fuzzing must not
    disturb the other tests' peers, and the gateway's pid is watched."""
    logs: Path = tmp_path_factory.mktemp("fuzz")
    port = procs.free_port()
    with (
        procs.legacy_server(procs.free_port(), log_path=logs / "legacy.log") as legacy_url,
        procs.gateway_process(
            legacy_url, port, env=fuzzing.GATEWAY_ENV, log_path=logs / "gateway.log"
        ) as (_base, proc),
    ):
        # Warm-up: the first calls open the upstream session and fill caches.
        for _ in range(20):
            assert fuzzing.canary(port) is None
        target = Target(port, proc.pid, fuzzing.rss_kib(proc.pid), fuzzing.children(proc.pid))
        yield target
        assert fuzzing.process_alive(proc.pid, target.workers), "the gateway or a worker died"


@pytest.mark.fuzz
@pytest.mark.peers
def test_fuzz_gateway_survives_hostile_messages(target: Target) -> None:
    sent = 0

    @settings(PROFILE)
    @given(fuzzing.probes(target.port, AVOID))
    def one(probe: fuzzing.Probe) -> None:
        nonlocal sent
        answer = fuzzing.send(target.port, probe)
        sent += 1
        failures = fuzzing.check(probe, answer)
        alive = fuzzing.process_alive(target.pid, target.workers)
        assert alive, f"the gateway died on {probe.reproducer()}"
        assert not failures, _explain(probe, answer, failures)
        if sent % 50 == 0:
            # Other callers are unaffected (no lane or session held forever).
            problem = fuzzing.canary(target.port)
            assert problem is None, f"after {sent} messages: {problem}"

    one()
    assert fuzzing.canary(target.port) is None
    grown_mib = (fuzzing.rss_kib(target.pid) - target.warm_rss_kib) / 1024
    assert grown_mib <= fuzzing.RSS_GROWTH_MIB, f"RSS grew {grown_mib:.0f} MiB in {sent} messages"


def _explain(probe: fuzzing.Probe, answer: fuzzing.Answer, failures: list[str]) -> str:
    return (
        f"{failures}\n  mutations: {probe.mutations}\n  request headers: "
        f"{probe.reproducer()['headers']}\n  body ({len(probe.body)} bytes): "
        f"{probe.body[:300]!r}\n  answer: {answer.status} {answer.error or ''} "
        f"{answer.body[:300]!r}"
    )


# ---------------------------------------------------------------------------
# The legacy front: POST /mcp of a 2025-03-26 session, POST /messages of a
# 2024-11-05 HTTP+SSE channel, batches (issue 19; tests/fuzzing_legacy.py)
# ---------------------------------------------------------------------------


@pytest.mark.fuzz
@pytest.mark.peers
def test_fuzz_legacy_front_and_batches(target: Target) -> None:
    base = f"http://127.0.0.1:{target.port}"
    with httpx.Client(timeout=15.0) as client:
        session, _ = initialize(client, base + "/mcp", fuzzing_legacy.SESSION_VERSION)
    channel = fuzzing_legacy.Channel(base)
    owed = 1  # the channel's initialize
    sent = 0
    try:

        @settings(PROFILE, max_examples=max(PROFILE.max_examples // 2, 1))
        @given(fuzzing_legacy.legacy_probes(target.port, session, channel.path))
        def one(probe: fuzzing_legacy.LegacyProbe) -> None:
            nonlocal owed, sent
            answer = fuzzing.send(target.port, probe)
            sent += 1
            owed += fuzzing_legacy.accepted_requests(probe, answer)
            failures = fuzzing_legacy.check(probe, answer)
            alive = fuzzing.process_alive(target.pid, target.workers)
            assert alive, f"the gateway died on {probe!r}"
            assert not failures, _explain(probe, answer, failures)
            if sent % 50 == 0:
                assert fuzzing.canary(target.port) is None
                assert channel.settled(owed) is None

        one()
        # Every request the channel accepted got its one answer on the stream.
        problem = channel.settled(owed)
        assert problem is None, problem
    finally:
        channel.close()
    assert fuzzing.canary(target.port) is None
