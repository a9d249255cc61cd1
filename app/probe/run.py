"""`mcp-shim probe`: running it. The upstream in the era the gateway will use and
then the other one (app/probe/asking.py, app/probe/dual_era.py) under one
timeout, the gateway's log lines kept, and the report, or the failure as an
exit code and a one-line reason."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import time
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import structlog

from app.config import Settings
from app.probe.asking import Found, Step, ask_legacy, ask_modern, tell_era
from app.probe.dual_era import OtherEra, era_choices, legacy_handshake, modern_answer
from app.subscriptions import filters as subscription_filters
from app.upstream.choice import Upstream, build_upstream, transport_name
from app.upstream.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from app.upstream.stdio.process import StdioProcessExited
from translators import translate
from translators.explain import pass_through as modern_translations
from translators.explain import translations
from translators.registry import LATEST_MODERN

# The shape of `--json` output; raised only when a field changes meaning or goes.
JSON_SHAPE = 1

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_UNREACHABLE = 3
EXIT_REFUSED = 4
EXIT_TIMEOUT = 5
EXIT_COMMAND_FAILED = 6

# What of a failed command's stderr goes into the one-line reason.
STDERR_LINES = 5
STDERR_CHARS = 400


class ProbeFailed(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass
class _Captured:
    """The gateway's log lines during the probe: kept, not printed (a failed
    command's stderr comes from them)."""

    stderr: list[str] = field(default_factory=list)
    exit_tail: list[str] | None = None
    exit_code: int | None = None

    def __call__(self, _logger: object, _name: str, event: MutableMapping[str, Any]) -> Any:
        name = event.get("event")
        if name == "upstream_stderr" and isinstance(event.get("line"), str):
            self.stderr.append(event["line"])
            del self.stderr[:-STDERR_LINES]
        elif name in ("upstream_process_exited", "upstream_process_ended"):
            if isinstance(event.get("stderr_tail"), list):
                self.exit_tail = [str(line) for line in event["stderr_tail"]]
            if isinstance(event.get("exit_code"), int):
                self.exit_code = event["exit_code"]
        raise structlog.DropEvent

    def tail(self) -> list[str]:
        lines = self.exit_tail if self.exit_tail is not None else self.stderr
        return lines[-STDERR_LINES:]


@contextlib.contextmanager
def _capture_logs() -> Iterator[_Captured]:
    captured = _Captured()
    previous = structlog.get_config()
    structlog.configure(processors=[captured], cache_logger_on_first_use=False)
    try:
        yield captured
    finally:
        structlog.configure(**previous)


def describe_upstream(settings: Settings) -> str:
    if settings.upstream_command is not None:
        return " ".join(shlex.split(settings.upstream_command)[:1])
    parts = urlsplit(str(settings.upstream_url))
    # Neither credentials in the URL nor its query go into a report.
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


async def _probe_upstream(
    settings: Settings, chosen: Upstream, step: Step
) -> tuple[Found, OtherEra | None]:
    """The upstream in the era the gateway will use, then whether it answers in
    the other one too (HTTP only: a stdio server is legacy)."""
    transport = chosen.transport
    era, upstream = await tell_era(chosen)
    if era is not None and era.name == "modern":
        assert upstream is not None
        found = await ask_modern(upstream, era, step)
        return found, await legacy_handshake(settings, transport, step)
    found = await ask_legacy(settings, transport, step)
    if upstream is None:
        return found, None
    if era is None or era.source == "setting":
        # The era probe told nothing, or was not sent: ask now.
        return found, await modern_answer(upstream, step)
    return found, OtherEra("modern", False, reason="it refused server/discover")


async def run_probe(
    settings: Settings,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> dict[str, Any]:
    """The report, or ProbeFailed with its exit code and one-line reason.
    `env`, `cwd`: a stdio server's own (the servers file's)."""
    started = time.monotonic()
    step = Step()
    with _capture_logs() as captured:
        chosen = build_upstream(settings, env, cwd)
        transport = chosen.transport
        try:
            async with asyncio.timeout(timeout_s):
                found, other = await _probe_upstream(settings, chosen, step)
        except TimeoutError:
            await transport.aclose()
            raise ProbeFailed(
                EXIT_TIMEOUT, f"timed out after {timeout_s:g}s waiting for {step.now} (--timeout)"
            ) from None
        except UpstreamError as exc:
            await transport.aclose()
            kind = "streamable-http" if step.modern else transport_name(settings, transport)
            raise _failure(exc, kind, captured) from None
        await transport.aclose()
    modern = found.era == "modern"
    tools = found.lists.get("tools")
    report: dict[str, Any] = {
        "shape": JSON_SHAPE,
        "ok": True,
        "upstream": describe_upstream(settings),
        "transport": found.transport,
        "server": {"name": found.server.get("name"), "version": found.server.get("version")},
        "era": found.era,
        "protocolVersion": found.version.name,
        "offeredProtocolVersion": found.offered,
        "capabilities": found.capabilities,
        # A modern upstream's discover reaches modern clients as it is (passed through).
        "modernCapabilities": found.capabilities
        if modern
        else subscription_filters.advertised(
            translate.server_capabilities(found.capabilities, found.version, LATEST_MODERN)
        ),
        "instructions": found.instructions,
        "tools": None
        if tools is None
        else [
            t.get("name") for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)
        ],
        "prompts": _count(found.lists.get("prompts")),
        "resources": _count(found.lists.get("resources")),
        "resourceTemplates": _count(found.lists.get("resourceTemplates")),
        "listErrors": found.errors,
        "modernVersion": LATEST_MODERN.name,
        "translations": modern_translations()
        if modern
        else translations(found.version, found.capabilities),
        "dualEra": None if other is None else other.accepted,
        "otherEra": None if other is None else other.describe(),
        "eraChoices": era_choices(found, other, settings.upstream_era),
        "elapsedMs": round((time.monotonic() - started) * 1000),
    }
    return report


def _count(items: list[Any] | None) -> int | None:
    return None if items is None else len(items)


def _os_reason(exc: BaseException) -> str | None:
    """The operating system's word for a failed connection ("Connection refused"),
    from the first OSError among the causes."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        nested = getattr(current, "os_error", None)  # aiohttp keeps it there
        for error in (current, nested):
            if isinstance(error, OSError):
                # asyncio words a refused connect as "Connect call failed (...)";
                # the errno's own text is what an operator knows.
                if error.errno and error.errno > 0:
                    return os.strerror(error.errno)
                if error.strerror:
                    return error.strerror
        current = current.__cause__ or current.__context__
    return None


def _failure(exc: UpstreamError, transport: str, captured: _Captured) -> ProbeFailed:
    if isinstance(exc, UpstreamTimeout):
        return ProbeFailed(EXIT_TIMEOUT, f"timed out: {exc.message}")
    if transport == "stdio" and isinstance(exc, UpstreamUnavailable):
        if captured.exit_code is not None:
            # What the process did says more than how writing to it failed.
            what = (
                f"exited with code {captured.exit_code}"
                if captured.exit_code >= 0
                else f"was killed by signal {-captured.exit_code}"
            )
            reason = f"the upstream command {what} during initialize"
        else:
            reason = f"the upstream command failed: {exc.message}"
        tail = captured.tail()
        if isinstance(exc, StdioProcessExited) or tail:
            shown = " | ".join(tail)
            if len(shown) > STDERR_CHARS:
                shown = "..." + shown[-STDERR_CHARS:]
            reason += f"; stderr: {shown}" if shown else "; it wrote nothing to stderr"
        return ProbeFailed(EXIT_COMMAND_FAILED, reason)
    if isinstance(exc, UpstreamUnavailable):
        detail = _os_reason(exc)
        return ProbeFailed(
            EXIT_UNREACHABLE, f"unreachable: {exc.message}" + (f" ({detail})" if detail else "")
        )
    return ProbeFailed(EXIT_REFUSED, f"refused: {exc.message}")
