"""Run the gateway (`app.serving.cli.main`) with every garbage collection timed.

    BENCH_GC_REPORT=results/bench/gc.json python bench/gc_probe.py

Used by bench/profile.py --gc. On exit writes, per generation, how many
collections ran, their total and longest pause, and how many took 1 ms or
more: a generation-2 pass over a large heap is a stop-the-world pause every
call in flight waits for, i.e. a tail-latency suspect. BENCH_GC_FREEZE=1
also calls gc.freeze() once the gateway has started (objects alive then are
left out of later collections); BENCH_GC_THRESHOLD=700,10,10 sets
gc.set_threshold at start; BENCH_GC_TYPES=1 counts the types of one
second's cyclic garbage (objects only a collection can free);
BENCH_GC_TRACKED=1 adds the objects tracked per generation (costly).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_started: list[float] = [0.0]
_stats: dict[int, dict[str, float]] = {
    g: {"count": 0, "total_ms": 0.0, "max_ms": 0.0, "over_1ms": 0, "collected": 0} for g in range(3)
}
# What the cyclic garbage is made of: type name -> objects, from one window.
_garbage_types: dict[str, int] = {}


def _callback(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    pause = (time.perf_counter() - _started[0]) * 1000
    s = _stats[info["generation"]]
    s["count"] += 1
    s["total_ms"] += pause
    s["max_ms"] = max(s["max_ms"], pause)
    s["over_1ms"] += pause >= 1.0
    s["collected"] += info["collected"]


def _report() -> None:
    path = os.environ.get("BENCH_GC_REPORT")
    if path:
        rounded = {
            f"gen{g}": {k: round(v, 2) if isinstance(v, float) else v for k, v in s.items()}
            for g, s in _stats.items()
        }
        top = sorted(_garbage_types.items(), key=lambda kv: -kv[1])[:25]
        tracked: dict[str, int] = {"frozen": gc.get_freeze_count()}
        if os.environ.get("BENCH_GC_TRACKED") == "1":  # costly: a list of every object
            tracked |= {f"tracked_gen{g}": len(gc.get_objects(g)) for g in range(3)}
        report = {**rounded, **tracked, "garbage_types": dict(top)}
        Path(path).write_text(json.dumps(report) + "\n")


def _background() -> None:
    # uvicorn ends on SIGTERM by re-raising the signal after its shutdown, so
    # atexit alone would not run: the report is also rewritten every second.
    started = time.monotonic()
    frozen = os.environ.get("BENCH_GC_FREEZE") != "1"
    while True:
        time.sleep(1)
        if not frozen and time.monotonic() - started > 3:
            gc.freeze()  # after start-up and the first calls (benchmarks warm up for 2 s)
            frozen = True
        if (
            os.environ.get("BENCH_GC_TYPES") == "1"
            and not _garbage_types
            and time.monotonic() - started > 6
        ):
            _census()
        _report()


def _census() -> None:
    """Keep one second of cyclic garbage instead of freeing it, and count its types."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    time.sleep(1)
    gc.collect()
    gc.set_debug(0)
    for obj in gc.garbage:
        name = type(obj).__qualname__
        _garbage_types[name] = _garbage_types.get(name, 0) + 1
    gc.garbage.clear()


def install() -> None:
    if threshold := os.environ.get("BENCH_GC_THRESHOLD"):
        gc.set_threshold(*(int(n) for n in threshold.split(",")))
    gc.callbacks.append(_callback)
    atexit.register(_report)
    threading.Thread(target=_background, daemon=True).start()


if __name__ == "__main__":
    install()
    from app.serving.cli import main

    main()
