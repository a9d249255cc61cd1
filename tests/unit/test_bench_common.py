"""bench/common.py's readings of /proc that bench/moves.py prints per call: a
wrong count there would explain a CPU figure with a cause it does not have."""

from __future__ import annotations

import os
import threading
import time

from bench import common


def test_a_thread_that_waits_counts_voluntary_switches() -> None:
    slept, done = threading.Event(), threading.Event()

    def sleeper() -> None:
        for _ in range(20):
            time.sleep(0.001)
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
    assert after[1] >= before[1]


def test_a_process_that_is_gone_counts_nothing() -> None:
    assert common.context_switches(2**22 + 12345) == (0, 0)


def test_the_machine_idle_time_only_grows() -> None:
    before = common.machine_idle_seconds()
    time.sleep(0.2)
    after = common.machine_idle_seconds()
    assert after >= before > 0
