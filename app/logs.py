"""Structured JSON logs. Lines carry ids, methods, versions and outcomes;
never bodies, never headers' values, never secrets."""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import sys
import time
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


def _json_text(value: Any) -> str:
    try:
        raw = orjson.dumps(value, default=structlog.processors._json_fallback_handler)
    except TypeError:  # keys that are not strings, integers past 64 bits: the stdlib's way
        return json.dumps(value, default=repr)
    return raw.decode("utf-8", "replace")


def _json_size(value: Any) -> int:
    return len(_json_text(value))


def _bound_items(items: list[Any] | tuple[Any, ...], limit: int) -> list[Any]:
    """The last items that fit in `limit` characters of JSON, each bounded, after a
    note of how many earlier ones were cut: a list on a log line is a history
    (a process's last stderr lines), whose end tells most."""
    kept: list[Any] = []
    size = 2  # the brackets
    for item in reversed(items):
        item = _bound_value(item, limit)
        width = _json_size(item) + 1
        if kept and size + width > limit:
            break
        kept.append(item)
        size += width
    kept.reverse()
    cut = len(items) - len(kept)
    return [f"... ({cut} earlier items cut)", *kept] if cut else kept


def _bound_value(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return _bound(value, limit)
    if value is None or isinstance(value, bool | int | float):
        return value
    if _json_size(value) <= limit:
        return value
    if isinstance(value, list | tuple):
        return _bound_items(value, limit)
    # A mapping or an object: its JSON text, cut as a string would be.
    return _bound(_json_text(value), limit)


# Values a line carries as they are, by their exact type: `type()` and a set
# look-up cost less than `isinstance` against each type, field by field.
_PLAIN = frozenset({int, float, bool, type(None)})


def bound_fields(_logger: object, _name: str, event: MutableMapping[str, Any]) -> Any:
    """Cut every field to MAX_FIELD_CHARS, in one place for every line: strings
    directly, lists and mappings by the length of their JSON (whatever a call site
    passes, a line stays bounded)."""
    for key, value in event.items():
        kind = type(value)
        if kind is str or (kind not in _PLAIN and isinstance(value, str)):
            # Most strings are short: the field's limit only once one is long.
            if len(value) > MAX_FIELD_CHARS:
                limit = MAX_STACK_CHARS if key in ("exception", "event") else MAX_FIELD_CHARS
                event[key] = _bound(value, limit)
        elif kind not in _PLAIN:
            event[key] = _bound_value(value, MAX_FIELD_CHARS)
    return event


def _orjson_text(value: Any, **kwargs: Any) -> str:
    return orjson.dumps(value, **kwargs).decode()


def configure(level: str, *, worker: int | None = None) -> None:
    """`worker`: the index of one of MCP_SHIM_WORKERS processes, on each of its lines."""
    tagged: list[Any] = []
    if worker is not None:

        def tag(_logger: object, _name: str, event: MutableMapping[str, Any]) -> Any:
            event["worker"] = worker
            return event

        tagged.append(tag)
    # Libraries log through the standard library (uvicorn's lifecycle lines and
    # server errors, asyncio's unhandled ones): their lines go through the same
    # processors and the same orjson renderer as the gateway's own, so every
    # line has one rendering (compact, the same key order).
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                *tagged,
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                # A record's exc_info arrives as a tuple; without this it is
                # rendered as its repr, with no stack.
                structlog.processors.format_exc_info,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                bound_fields,
                # A logging handler writes text: the same bytes, decoded.
                structlog.processors.JSONRenderer(serializer=_orjson_text),
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
    renderer = structlog.processors.JSONRenderer(serializer=orjson.dumps)
    processors: list[Any] = [
        *tagged,
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        bound_fields,
        # orjson: a log line per call is on the hot path.
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.BytesLoggerFactory(file=sys.stderr.buffer),
        cache_logger_on_first_use=True,
    )
    global _call_line
    _call_line = (
        _CallLine(processors, worker, sys.stderr.buffer) if _LEVELS[level] <= logging.INFO else None
    )


class _CallLine:
    """The `call` line rendered without structlog's processor chain: the one
    line every call writes (its chain was 6% of the gateway's CPU per call,
    bench/profile.py). Same fields, in the same order, as the
    chain `configure` installs renders: the call's fields, `event`, `worker`,
    the context variables (request_id...), `level`, `timestamp` (ISO, UTC, the
    same clock and precision as structlog's TimeStamper, its date and time
    formatted once per second), every string bounded; one write per line
    through the same locked file as every other line.

    Used only while that chain is the configured one (`structlog.testing.
    capture_logs` swaps it in place): otherwise the line goes through
    structlog like any other."""

    __slots__ = ("_file", "_last", "_processors", "_renderer", "_second", "_worker")

    def __init__(self, processors: list[Any], worker: int | None, file: Any) -> None:
        self._processors = processors
        self._renderer = processors[-1]
        self._worker = worker
        # Its lock is the file's, shared with structlog's own writers.
        self._file = structlog.BytesLogger(file)
        self._second = -1
        self._last = ""

    def current(self) -> bool:
        processors = self._processors
        return (
            processors[-1] is self._renderer and structlog.get_config()["processors"] is processors
        )

    def timestamp(self) -> str:
        # datetime.now(utc) truncates the system clock to microseconds; so does this.
        now_us = time.time_ns() // 1000
        second, micro = divmod(now_us, 1_000_000)
        if second != self._second:
            moment = datetime.datetime.fromtimestamp(second, tz=datetime.UTC)
            self._last = moment.isoformat()[:19]  # YYYY-MM-DDTHH:MM:SS
            self._second = second
        # isoformat() leaves the fraction out when it is zero.
        return f"{self._last}.{micro:06d}Z" if micro else f"{self._last}Z"

    def write(self, event: dict[str, Any]) -> None:
        event["event"] = "call"
        if self._worker is not None:
            event["worker"] = self._worker
        structlog.contextvars.merge_contextvars(None, "info", event)
        event["level"] = "info"
        event["timestamp"] = self.timestamp()
        bound_fields(None, "info", event)
        # `default`: what structlog's JSONRenderer does with a value JSON has no form for.
        self._file.msg(orjson.dumps(event, default=structlog.processors._json_fallback_handler))


_call_line: _CallLine | None = None


def call_line(logger: Any, fields: dict[str, Any]) -> None:
    """Log one call's `call` line at info: `fields` in the order they appear.
    `logger` writes it when structlog's chain is not the one `configure`
    installed (tests capturing logs, a process that never called it)."""
    line = _call_line
    if line is not None and line.current():
        line.write(fields)
    else:
        logger.info("call", **fields)


def process_context() -> contextvars.Context:
    """A fresh context for a task that outlives the request that started it (a
    stdio server's process): none of the request's fields, only the name of
    the server it belongs to when the gateway serves many (app/servers)."""
    server = structlog.contextvars.get_contextvars().get("server")
    context = contextvars.Context()
    if server is not None:
        context.run(structlog.contextvars.bind_contextvars, server=server)
    return context
