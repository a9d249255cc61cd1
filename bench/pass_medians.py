"""bench/peers.py's ratios again, from the medians of each cell's passes.

    .venv/bin/python bench/pass_medians.py results/bench/peers.json [more.json ...]

bench/peers.py's tables show each gateway's best pass (the most calls/s), so
on a noisy machine one lucky pass of one row decides a ratio. This reads the
runs it wrote with `--json` and shows, per server, client kind and
concurrency, the ratios of the issue's targets from each row's medians
instead (calls/s, gateway CPU per call and p99, each the median of the
cell's passes without errors): the default against one worker, and each
mcp-shim row against the best peer of the cell (the best median per figure).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.peers import METRICS, SHIMS  # noqa: E402

FIGURES = (("rps", "calls/s"), ("cpu_us", "CPU"), ("p99_ms", "p99"))


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    clean = [r for r in runs if not r["errors"]] or runs
    return {metric: statistics.median(r[metric] for r in clean) for metric, _ in FIGURES}


def lines(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    cells: dict[tuple[str, str, str], dict[str, dict[str, float]]] = {}
    for row in rows:
        for c, runs in row["runs"].items():
            if runs:
                key = (row["server"], row["kind"], c)
                cells.setdefault(key, {})[row["gateway"]] = medians(runs)
    for (server, kind, c), by in sorted(cells.items(), key=lambda kv: (kv[0][:2], int(kv[0][2]))):
        parts = []
        one, default = by.get("shim-1"), by.get("shim-default")
        if one and default:
            shown = ", ".join(f"{default[m] / one[m]:.2f}x {n}" for m, n in FIGURES[:2])
            parts.append(f"default / 1 worker {shown}")
        peers = {g: f for g, f in by.items() if g not in SHIMS}
        for name, mine in (("1 worker", one), ("default", default)):
            if mine is None or not peers:
                continue
            shown = []
            for metric, label in FIGURES:
                pick = max if METRICS[metric] else min
                best = pick(peers, key=lambda g, m=metric: peers[g][m])
                shown.append(f"{mine[metric] / peers[best][metric]:.2f}x {label} ({best})")
            parts.append(f"{name} / best peer " + ", ".join(shown))
        out.append(f"{server} {kind} c{c}: " + "; ".join(parts))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="files bench/peers.py --json wrote")
    args = parser.parse_args()
    for path in args.runs:
        print(path)
        for line in lines(json.loads(path.read_text())):
            print("  " + line)


if __name__ == "__main__":
    main()
