"""Structured JSON logs. Lines carry ids, methods, versions and outcomes;
never bodies, never headers' values, never secrets."""

from __future__ import annotations

import logging
import sys

import orjson
import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure(level: str) -> None:
    # Libraries log through the standard library (uvicorn's server errors,
    # asyncio's unhandled ones): render those as the same JSON lines.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                # A record's exc_info arrives as a tuple; without this it is
                # rendered as its repr, with no stack.
                structlog.processors.format_exc_info,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # Libraries speak only of trouble (httpx would log every upstream request
    # at info); uvicorn's own lifecycle lines follow the configured level.
    root.setLevel(max(_LEVELS[level], logging.WARNING))
    logging.getLogger("uvicorn.error").setLevel(_LEVELS[level])
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            # orjson: a log line per call is on the hot path.
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.BytesLoggerFactory(file=sys.stderr.buffer),
        cache_logger_on_first_use=True,
    )
