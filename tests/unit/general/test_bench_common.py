"""bench/common.py's readings of /proc that bench/moves.py prints per call: a
wrong count there would explain a CPU figure with a cause it does not have."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from bench import common


def test_a_thread_that_waits_counts_voluntary_switches() -> None:
    slept, done = threading.Event(), threading.Event()

    def sleeper() -> None:
        for _ in range(20):
            time.sleep(0.001)  # the behaviour under test: a thread that waits
        slept.set()
        done.wait()

    before = common.context_switches(os.getpid())
    thread = threading.Thread(target=sleeper)
    thread.start()
    try:
        assert slept.wait(5)
        # Counted while the thread lives: every sleep of its own was a wait.
        after = common.context_switches(os.getpid())
    finally:
        done.set()
        thread.join()
    assert after[0] >= before[0] + 20


def test_a_process_that_is_gone_counts_nothing() -> None:
    assert common.context_switches(2**22 + 12345) == (0, 0)


def test_the_machine_idle_time_only_grows() -> None:
    before = common.machine_idle_seconds()
    sum(i * i for i in range(200_000))  # some time passes
    after = common.machine_idle_seconds()
    assert after >= before > 0


def test_a_gateways_workers_and_its_sessions_owner_come_from_its_log(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    lines = [
        {"event": "worker_started", "worker": 0, "pid": 101, "advertise": "http://127.0.0.1:9000"},
        {"event": "worker_started", "worker": 1, "pid": 102, "advertise": "http://127.0.0.1:9001"},
        {"event": "call", "worker": 0},
        {"event": "legacy_session_opened", "worker": 1},
    ]
    log.write_text("INFO: not JSON\n" + "\n".join(json.dumps(x) for x in lines) + "\n")
    assert common.worker_pids(log) == {0: 101, 1: 102}
    pids, urls, owner = common.workers_in_log(log)
    assert (pids, owner) == ({0: 101, 1: 102}, 1)
    assert urls == {0: "http://127.0.0.1:9000", 1: "http://127.0.0.1:9001"}


def test_a_log_without_two_workers_or_an_owner_stops_the_script(tmp_path: Path) -> None:
    one = tmp_path / "one.log"
    one.write_text(json.dumps({"event": "worker_started", "worker": 0, "pid": 1}) + "\n")
    with pytest.raises(SystemExit, match="no workers"):
        common.worker_pids(one)
    two = tmp_path / "two.log"
    two.write_text(
        "".join(
            json.dumps({"event": "worker_started", "worker": w, "pid": w, "advertise": "u"}) + "\n"
            for w in (0, 1)
        )
    )
    with pytest.raises(SystemExit, match="owner"):
        common.workers_in_log(two)
