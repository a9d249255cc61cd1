"""Structured JSON logs. Lines carry ids, methods, versions and outcomes;
never bodies, never headers' values, never secrets."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import orjson
import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


# Longest string a log field carries: a client's 3 MB method name must not
# become a 3 MB log line. Stacks get more room, cut in the middle.
MAX_FIELD_CHARS = 200
MAX_STACK_CHARS = 8000


def _bound(value: str, limit: int) -> str:
    if len(value) <= limit:
        return value
    if limit >= MAX_STACK_CHARS:
        half = limit // 2
        return f"{value[:half]}... ({len(value) - limit} characters cut) ...{value[-half:]}"
    return f"{value[:limit]}... ({len(value)} characters)"


def bound_fields(_logger: object, _name: str, event: MutableMapping[str, Any]) -> Any:
    """Cut every string field to MAX_FIELD_CHARS, in one place for every line."""
    for key, value in event.items():
        if isinstance(value, str):
            limit = MAX_STACK_CHARS if key in ("exception", "event") else MAX_FIELD_CHARS
            if len(value) > limit:
                event[key] = _bound(value, limit)
    return event


def configure(level: str, *, worker: int | None = None) -> None:
    """`worker`: the index of one of MCP_SHIM_WORKERS processes, on each of its lines."""
    tagged: list[Any] = []
    if worker is not None:

        def tag(_logger: object, _name: str, event: MutableMapping[str, Any]) -> Any:
            event["worker"] = worker
            return event

        tagged.append(tag)
    # Libraries log through the standard library (uvicorn's server errors,
    # asyncio's unhandled ones): render those as the same JSON lines.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                *tagged,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                # A record's exc_info arrives as a tuple; without this it is
                # rendered as its repr, with no stack.
                structlog.processors.format_exc_info,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                bound_fields,
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
    # uvicorn's own logging config (if anything applied it first) gives its
    # loggers handlers of their own and stops propagation: every line must come
    # through the one JSON handler above instead.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        named = logging.getLogger(name)
        named.handlers.clear()
        named.propagate = True
    structlog.configure(
        processors=[
            *tagged,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            bound_fields,
            # orjson: a log line per call is on the hot path.
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.BytesLoggerFactory(file=sys.stderr.buffer),
        cache_logger_on_first_use=True,
    )
