"""The pure parts of bench/peers.py: reading wrk's summary line, CPU between
two /proc snapshots, and which peer is the best for a figure. A wrong answer
here would print a wrong table with nothing to show it."""

from __future__ import annotations

import json

import pytest

from bench import peers

SUMMARY = {
    "requests": 2000,
    "duration_us": 2_000_000,
    "p50_us": 900,
    "p99_us": 4100,
    "p90_us": 2000,
    "p999_us": 9000,
    "max_us": 12000,
    "non2xx": 0,
    "connect": 0,
    "read": 0,
    "write": 0,
    "timeout": 0,
}


def wrk_output(**changes: int) -> str:
    line = "BENCH " + json.dumps({**SUMMARY, **changes})
    return f"Running 2s test @ http://127.0.0.1:1/mcp\n  1 threads and 8 connections\n{line}\n"


def test_the_summary_line_is_read_among_wrks_other_lines() -> None:
    assert peers.parse_wrk(wrk_output()) == SUMMARY


@pytest.mark.parametrize("error", ["non2xx", "connect", "read", "write", "timeout"])
def test_a_run_with_any_error_is_no_measurement(error: str) -> None:
    with pytest.raises(ValueError, match=error):
        peers.parse_wrk(wrk_output(**{error: 3}))


def test_no_summary_line_or_no_request_is_an_error() -> None:
    with pytest.raises(ValueError, match="no BENCH line"):
        peers.parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n")
    with pytest.raises(ValueError, match="no request"):
        peers.parse_wrk(wrk_output(requests=0))


def test_cpu_between_snapshots_counts_new_processes_whole_and_leaves_gone_ones_out() -> None:
    before = {10: 1.0, 11: 2.0, 12: 5.0}  # 12 exits during the run
    after = {10: 1.5, 11: 2.25, 13: 0.5}  # 13 starts during it
    assert peers.cpu_delta(before, after) == pytest.approx(0.5 + 0.25 + 0.5)


def cell(rps: float, cpu_us: float, p99_ms: float) -> dict[str, float]:
    return {"rps": rps, "cpu_us": cpu_us, "p99_ms": p99_ms}


def test_the_best_peer_is_picked_per_figure_and_never_an_mcp_shim_row() -> None:
    cells = {
        "shim-1": cell(5000, 100, 1.0),  # better than every peer: not a peer
        "shim-default": cell(6000, 90, 0.5),
        "supergateway": cell(800, 700, 25.0),
        "mcp-proxy-npm": cell(900, 750, 20.0),
        "mcp-proxy-py": cell(700, 650, 30.0),
    }
    assert peers.best_peer(cells, "rps") == ("mcp-proxy-npm", 900)
    assert peers.best_peer(cells, "cpu_us") == ("mcp-proxy-py", 650)
    assert peers.best_peer(cells, "p99_ms") == ("mcp-proxy-npm", 20.0)
    assert peers.best_peer({"shim-1": cells["shim-1"]}, "rps") is None


def test_the_best_pass_is_the_one_with_the_most_calls() -> None:
    runs = [cell(900, 500, 9.0), cell(1100, 520, 12.0), cell(1000, 480, 8.0)]
    assert peers.best(runs) == runs[1]
