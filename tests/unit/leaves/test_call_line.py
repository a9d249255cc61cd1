"""The per-call `call` line (app/logs.py `call_line`): rendered without
structlog's processor chain on the hot path, it must stay the line that chain
renders: the same fields, in the same order, with the same values and the same
JSON shape. Each test renders one line both ways and compares them."""

from __future__ import annotations

import datetime
import io
import logging
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
import structlog

from app import logs

_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z$")


class _Stderr:
    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        self.configure: Callable[..., None] = lambda *_, **__: None

    def write(self, text: str) -> int:
        return self.buffer.write(text.encode())

    def flush(self) -> None:
        pass

    def lines(self) -> list[bytes]:
        return self.buffer.getvalue().splitlines()


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Stderr]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out = _Stderr()
    real = sys.stderr

    def configure(level: str, worker: int | None = None) -> None:
        # In the test's body: pytest sets its own sys.stderr between setup and call.
        sys.stderr = out  # type: ignore[assignment]
        try:
            logs.configure(level, worker=worker)
        finally:
            sys.stderr = real

    out.configure = configure
    try:
        yield out
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.reset_defaults()
        structlog.contextvars.clear_contextvars()


def _fields(method: str = "tools/call") -> dict[str, Any]:
    return {
        "method": method,
        "client_version": "2026-07-28",
        "upstream_version": None,
        "outcome": "ok",
        "status": 200,
        "duration_ms": 1.25,
    }


def _both(out: _Stderr, fields: dict[str, Any]) -> tuple[bytes, bytes]:
    """The line structlog's chain renders, and the line call_line renders."""
    logger = structlog.get_logger("mcp_shim.http")
    logger.info("call", **fields)
    line = logs._call_line
    assert line is not None and line.current()  # the direct path, not the fallback
    logs.call_line(logger, dict(fields))
    chain, direct = out.lines()
    return chain, direct


def _same_but_time(chain: bytes, direct: bytes) -> None:
    by_chain, by_call_line = orjson.loads(chain), orjson.loads(direct)
    assert list(by_call_line) == list(by_chain)  # same fields, same order
    stamps = by_chain.pop("timestamp"), by_call_line.pop("timestamp")
    assert by_call_line == by_chain
    for stamp in stamps:
        assert _TIMESTAMP.match(stamp), stamp
    moments = [datetime.datetime.fromisoformat(s) for s in stamps]
    assert abs((moments[1] - moments[0]).total_seconds()) < 5
    # The same JSON text, the timestamp aside (orjson's compact form, one line).
    assert re.sub(rb'"timestamp":"[^"]*"', b"", direct) == re.sub(
        rb'"timestamp":"[^"]*"', b"", chain
    )


def test_call_line_is_the_chain_line(stderr: _Stderr) -> None:
    stderr.configure("info")
    structlog.contextvars.bind_contextvars(request_id="0123456789abcdef", trace_id="ab" * 16)
    chain, direct = _both(stderr, _fields())
    _same_but_time(chain, direct)
    keys = list(orjson.loads(direct))
    # The context's variables come in the context's own order (a hash map's).
    assert set(keys[7:9]) == {"request_id", "trace_id"}
    assert keys[:7] + keys[9:] == [
        "method",
        "client_version",
        "upstream_version",
        "outcome",
        "status",
        "duration_ms",
        "event",
        "level",
        "timestamp",
    ]


def test_a_legacy_call_line_is_the_chain_line(stderr: _Stderr) -> None:
    """The legacy front's line (app/fronts/legacy/front.py) leads with its era."""
    stderr.configure("info")
    fields = {"era": "legacy", **_fields(), "client_version": "2025-11-25"}
    fields["upstream_version"] = "2025-11-25"
    chain, direct = _both(stderr, fields)
    _same_but_time(chain, direct)
    assert list(orjson.loads(direct))[:2] == ["era", "method"]


def test_call_line_of_a_worker_and_long_values(stderr: _Stderr) -> None:
    stderr.configure("debug", worker=3)

    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    # A value JSON has no form for (structlog's fallback: its repr), a 3 kB method.
    structlog.contextvars.bind_contextvars(request_id="r-1", odd=Opaque())
    chain, direct = _both(stderr, _fields("x" * 3000))
    _same_but_time(chain, direct)
    line = orjson.loads(direct)
    assert line["worker"] == 3
    assert line["odd"] == "<opaque>"
    assert len(line["method"]) < 300


def test_call_line_below_the_level_writes_nothing(stderr: _Stderr) -> None:
    stderr.configure("warning")
    logs.call_line(structlog.get_logger("mcp_shim.http"), _fields())
    assert stderr.lines() == []


def test_call_line_follows_captured_logs(stderr: _Stderr) -> None:
    stderr.configure("info")
    with structlog.testing.capture_logs() as captured:
        logs.call_line(structlog.get_logger("mcp_shim.http"), _fields())
    assert stderr.lines() == []
    assert captured == [{**_fields(), "event": "call", "log_level": "info"}]
    # The chain is back: the direct path again.
    logs.call_line(structlog.get_logger("mcp_shim.http"), _fields())
    assert orjson.loads(stderr.lines()[0])["event"] == "call"


@pytest.mark.parametrize(
    "ns",
    [
        1_764_570_000_000_000_000,  # a whole second: no fraction, as isoformat() writes it
        1_764_570_000_000_000_999,  # under a microsecond: still none
        1_764_570_000_000_001_000,
        1_764_570_059_999_999_999,
        1_764_570_060_123_456_789,
    ],
)
def test_call_line_timestamp_is_structlogs(ns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    line = logs._CallLine([object()], None, io.BytesIO())
    monkeypatch.setattr(logs.time, "time_ns", lambda: ns)
    # structlog's TimeStamper(fmt="iso", utc=True) of the same instant
    # (datetime.now truncates the clock to microseconds).
    moment = datetime.datetime.fromtimestamp(ns // 1000 / 1e6, tz=datetime.UTC).replace(
        microsecond=(ns // 1000) % 1_000_000
    )
    expected = moment.isoformat().replace("+00:00", "Z")
    assert line.timestamp() == expected
    assert line.timestamp() == expected  # the cached second
