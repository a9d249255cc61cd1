"""Every log line has one rendering: the lines of libraries that log through the
standard library (uvicorn's "Started server process", "Application startup
complete", its errors) are rendered by the same JSON renderer as the gateway's
own structlog lines: compact, the same key order, nothing that tells them apart
but their fields."""

from __future__ import annotations

import logging
import re

import orjson
import structlog

from tests.unit.leaves.test_call_line import _Stderr, stderr  # noqa: F401

_TIMESTAMP = re.compile(rb'"timestamp":"[^"]+"')


def test_uvicorn_lines_are_rendered_as_the_gateways(stderr: _Stderr) -> None:  # noqa: F811
    stderr.configure("info", worker=1)
    structlog.contextvars.bind_contextvars(request_id="r-1")
    try:
        structlog.get_logger("mcp_shim.test").info("Started server process [7]")
        logging.getLogger("uvicorn.error").info("Started server process [7]")
    finally:
        structlog.contextvars.unbind_contextvars("request_id")
    ours, uvicorns = stderr.lines()
    # Byte for byte the same line, the timestamp aside.
    assert _TIMESTAMP.sub(b"", uvicorns) == _TIMESTAMP.sub(b"", ours), (ours, uvicorns)
    assert b'", "' not in uvicorns and b'": ' not in uvicorns, uvicorns
    assert list(orjson.loads(uvicorns)) == [
        "event",
        "worker",
        "request_id",
        "level",
        "timestamp",
    ]
