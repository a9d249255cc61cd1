"""The pure parts of bench/peers.py: reading wrk's summary line, CPU between
two /proc snapshots, and which peer is the best for a figure. A wrong answer
here would print a wrong table with nothing to show it."""

from __future__ import annotations

import json
from pathlib import Path

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
def test_the_errors_of_a_run_are_counted_by_kind(error: str) -> None:
    summary = peers.parse_wrk(wrk_output(**{error: 3}))
    assert peers.wrk_errors(summary) == {error: 3}
    assert peers.wrk_errors(peers.parse_wrk(wrk_output())) == {}


def test_no_summary_line_or_no_request_is_an_error() -> None:
    with pytest.raises(ValueError, match="no BENCH line"):
        peers.parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n")
    with pytest.raises(ValueError, match=r"no request.*timeout"):
        peers.parse_wrk(wrk_output(requests=0, timeout=8))


def test_cpu_between_snapshots_counts_new_processes_whole_and_leaves_gone_ones_out() -> None:
    before = {10: 1.0, 11: 2.0, 12: 5.0}  # 12 exits during the run
    after = {10: 1.5, 11: 2.25, 13: 0.5}  # 13 starts during it
    assert peers.cpu_delta(before, after) == pytest.approx(0.5 + 0.25 + 0.5)


def test_a_server_that_ended_during_the_run_counts_for_its_time_in_the_run_only() -> None:
    # Server 20 ran 3.0 s before the run, ended in it after 1.0 s more and was
    # reaped by gateway process 1 (its cutime + cstime grew by its whole 4.0 s);
    # server 21 lived through the run (+0.5 s); 22 started and ended in it (0.2 s).
    before, after = {20: 3.0, 21: 1.0}, {21: 1.5}
    reaped_before, reaped_after = {1: 10.0}, {1: 10.0 + 4.0 + 0.2}
    spent = peers.server_cpu(before, after, reaped_before, reaped_after)
    assert spent == pytest.approx(1.0 + 0.5 + 0.2)


def cell(rps: float, cpu_us: float, p99_ms: float, errors: int = 0) -> dict[str, float]:
    figures = {"rps": rps, "cpu_us": cpu_us, "p99_ms": p99_ms, "errors": errors}
    rest = ("p50_ms", "server_cpu_us", "rss_mb", "servers", "relayed_per_1k")
    return {**figures, **dict.fromkeys(rest, 1.0)}


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


def test_the_best_pass_is_the_one_with_the_most_calls_and_no_error() -> None:
    runs = [cell(900, 500, 9.0), cell(1100, 520, 12.0), cell(1000, 480, 8.0)]
    assert peers.best(runs) == runs[1]
    runs[1]["errors"] = 2
    assert peers.best(runs) == runs[2]
    with_errors = [cell(900, 500, 9.0, 1), cell(950, 500, 9.0, 4)]
    assert peers.best(with_errors) == with_errors[1]


def row(gateway: str, runs: dict[int, list[dict[str, float]]]) -> peers.Row:
    server = peers.servers()["python"]
    gw = peers.Gateway(gateway, server, Path("/nonexistent"))
    made = peers.Row(gw, peers.labels(gateway, 2), "legacy", runs=runs)
    made.rss_idle = 100.0 if gateway == "shim-default" else 50.0
    return made


def test_the_ratios_name_the_best_peer_and_leave_a_failed_rows_cells_out() -> None:
    rows = [
        row("shim-1", {8: [cell(1000, 200, 4.0)], 32: [cell(1200, 210, 9.0)]}),
        row("shim-default", {8: [cell(1500, 180, 2.0)], 32: [cell(1800, 190, 6.0)]}),
        row("supergateway", {8: [cell(500, 400, 8.0)], 32: [cell(600, 420, 12.0)]}),
        row("mcp-proxy-py", {8: [cell(800, 600, 5.0)]}),  # failed before c32
    ]
    text = peers.ratios(rows, [8, 32])
    lines = {
        line.split("|")[0].strip(): [x.strip() for x in line.split("|")[1:]]
        for line in text.splitlines()
    }
    assert lines["default / 1 worker, calls/s"] == ["1.50x", "1.50x"]
    assert lines["default / 1 worker, RSS idle"][0] == "2.00x"
    assert lines["mcp-shim, 1 worker / best peer, calls/s"] == [
        "1.25x (mcp-proxy-py)",
        "2.00x (supergateway)",
    ]
    assert lines["mcp-shim, 1 worker / best peer, gw CPU/call"] == [
        "0.50x (supergateway)",
        "0.50x (supergateway)",
    ]
    table = peers.table(rows, [8, 32])
    assert any("mcp-proxy 0.13.0" in line and "failed" in line for line in table.splitlines())
