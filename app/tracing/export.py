"""Whether the standard `OTEL_*` variables ask for trace export, and its life in a process.

Export is off unless asked for: `OTEL_TRACES_EXPORTER=otlp`, or an OTLP
endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
with no `OTEL_TRACES_EXPORTER` saying otherwise; `OTEL_SDK_DISABLED=true`
turns it off. Only OTLP over HTTP with protobuf is exported (the SDK's
exporter reads the endpoint, headers, timeout and compression from the
same variables itself). Off, nothing of the SDK is imported. The variables
are OpenTelemetry's, not the gateway's settings: the start-up check of
unknown variables (app/settings/check.py) judges `MCP_SHIM_*` names only.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import structlog

from app import tracing

log = structlog.get_logger("mcp_shim.tracing")

_PROTOCOL = "http/protobuf"
EXTRA_HINT = "pip install 'mcp-shim[otel]'"


def choice(environ: Mapping[str, str]) -> tuple[bool, str | None]:
    """(export on?, why it stays off although asked for, else None)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False, None
    exporters = {
        e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()
    }
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not exporters:
        if not endpoint:
            return False, None
    elif "otlp" not in exporters:
        if exporters == {"none"}:
            return False, None
        named = ",".join(sorted(exporters))
        return False, f"OTEL_TRACES_EXPORTER={named}: the gateway exports with otlp only"
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", _PROTOCOL
    )
    if protocol.strip().lower() != _PROTOCOL:
        return False, f"OTLP protocol {protocol!r}: the gateway exports with {_PROTOCOL} only"
    return True, None


@asynccontextmanager
async def exported(environ: Mapping[str, str] | None = None) -> AsyncIterator[None]:
    """This process's spans exported while the context is open (the app's lifespan);
    on the way out, what is left is exported (bounded by OTEL_BSP_EXPORT_TIMEOUT)."""
    on, problem = choice(os.environ if environ is None else environ)
    if problem is not None:
        log.warning("tracing_not_exported", reason=problem)
    if not on:
        yield
        return
    try:
        from app.tracing.spans import Spans
    except ImportError as exc:
        log.warning(
            "tracing_not_exported",
            reason=f"the OpenTelemetry SDK is not installed ({exc.name}): {EXTRA_HINT}",
        )
        yield
        return
    spans = Spans.from_environment()
    tracing.set_spans(spans)
    log.info("tracing_exported", protocol=_PROTOCOL)
    try:
        yield
    finally:
        tracing.set_spans(None)
        await asyncio.to_thread(spans.shutdown)
