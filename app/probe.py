"""`mcp-shim probe`: what the gateway will find behind it, before deploying it.

With the gateway's own settings, the probe first tells the upstream's era as
the gateway does (app/upstream/era.py: a `server/discover` POST to an HTTP
upstream; a stdio server is legacy). A modern (2026-07-28) upstream keeps no
session and refuses `initialize`: the probe reads its `DiscoverResult` and
sends the list methods of its capabilities as stateless modern requests. A
legacy one gets one session through the transport the gateway would use
(`app.upstream.choice.build_upstream`): `initialize` and
`notifications/initialized`, the list methods, then the session is closed
(DELETE over HTTP, the process stopped over stdio). An HTTP upstream is then
asked whether it speaks the other era too (a dual-era server): a modern one
gets a legacy `initialize`, its session closed at once (DELETE), nothing asked
in it; one the gateway treats as legacy, a `server/discover` unless the era
probe already had its refusal. Nothing else is sent, so nothing can change on
the server. The report: the server, its era and negotiated version, the
transport, its capabilities as declared and as 2026-07-28 clients will see
them, its tools, whether it is dual-era and what each MCP_SHIM_UPSTREAM_ERA
then gives, and what the gateway translates for a 2026-07-28 client, derived
from the translator registry (the negotiated version's features against
2026-07-28's), not from a list kept here.

Exit codes (also in `mcp-shim probe --help`): 0 the upstream answered; 2 the
configuration is invalid; 3 unreachable; 4 refused (an HTTP error, an
authorization challenge, a JSON-RPC error or something that is not MCP);
5 timed out; 6 the stdio command failed to start or exited.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import structlog

from app.config import Settings, SettingsError, command_argv, load_settings
from app.subscriptions import filters as subscription_filters
from app.upstream.base import Message, Session, Transport
from app.upstream.choice import Upstream, build_upstream, transport_name
from app.upstream.era import Era, EraInconclusive, discover, probe_era
from app.upstream.errors import (
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.listener import default_answer
from app.upstream.modern.upstream import ModernHttpUpstream, standard_headers
from app.upstream.stdio.process import StdioProcessExited
from translators import translate, v2024_11_05
from translators._base import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
)
from translators.explain import pass_through as modern_translations
from translators.explain import translations
from translators.registry import LATEST_MODERN, Version, get_version

# The shape of `--json` output; raised only when a field changes meaning or goes.
JSON_SHAPE = 1

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_UNREACHABLE = 3
EXIT_REFUSED = 4
EXIT_TIMEOUT = 5
EXIT_COMMAND_FAILED = 6

DESCRIPTION = """\
Connect to the upstream named by the gateway's own environment
(MCP_SHIM_UPSTREAM_URL or MCP_SHIM_UPSTREAM_COMMAND, with every other MCP_SHIM_*
setting) through the transport the gateway would use, and print the server, its
protocol version, capabilities and tools, and what the gateway translates for
2026-07-28 clients. Only server/discover, initialize and list methods are sent
(a modern upstream's lists are asked statelessly; its initialize only tells
whether it is dual-era, the session closed at once); a session is closed
afterwards (DELETE over HTTP, the process stopped over stdio). A dual-era
upstream is reported with what each MCP_SHIM_UPSTREAM_ERA gives."""

EXIT_CODES_HELP = """\
exit codes:
  0  the upstream answered (the report is printed)
  2  invalid configuration (the variable is named) or command line
  3  unreachable: nothing accepted the connection, or it broke
  4  refused: an HTTP error or authorization challenge, a JSON-RPC error to
     initialize or server/discover, or an answer that is not MCP
  5  timed out (--timeout, or MCP_SHIM_STDIO_START_TIMEOUT_S for a command)
  6  the stdio command failed to start or exited (its last stderr lines shown)"""

CLIENT_INFO = {"name": "mcp-shim-probe", "version": "0.1.0"}
# A server that pages its lists forever is not followed past this.
MAX_PAGES = 100
# What of a failed command's stderr goes into the one-line reason.
STDERR_LINES = 5
STDERR_CHARS = 400
# What of the other era's refusal goes into the report.
REASON_CHARS = 300


class ProbeFailed(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


# -- the probe ------------------------------------------------------------------


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


def _describe_upstream(settings: Settings) -> str:
    if settings.upstream_command is not None:
        return " ".join(command_argv(settings.upstream_command)[:1])
    parts = urlsplit(str(settings.upstream_url))
    # Neither credentials in the URL nor its query go into a report.
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


async def _ask(session: Session, method: str, params: dict[str, Any], ident: str) -> Message:
    """One request's response; server requests meanwhile get the gateway's default answer."""
    message: Message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
    exchange = await session.request(message)
    try:
        async for reply in exchange:
            if "method" in reply:
                if "id" in reply:
                    await session.respond(default_answer(reply))
                continue
            if reply.get("id") == ident:
                return reply
    finally:
        await exchange.aclose(drain=True)
    raise UpstreamError(f"upstream ended {method} without answering")


# One request of the probe and its response: (method, params, id) -> response.
Ask = Callable[[str, dict[str, Any], str], Awaitable[Message]]
# The list methods, by the capability that declares them, and their result's list.
LISTS = tuple((m.capability, method, m.member) for method, m in v2024_11_05.LISTS.items())


async def _list(
    ask: Ask, method: str, key: str, ids: Iterator[int]
) -> tuple[list[Any] | None, str | None]:
    """Every item of a paged list method, or the JSON-RPC error it answered."""
    items: list[Any] = []
    cursor: Any = None
    for _ in range(MAX_PAGES):
        params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
        reply = await ask(method, params, f"probe-{next(ids)}")
        error = reply.get("error")
        if isinstance(error, dict):
            return None, f"{error.get('code')} {error.get('message')}"
        result = reply.get("result")
        if not isinstance(result, dict) or not isinstance(result.get(key), list):
            return None, f"the result has no {key} list"
        items.extend(result[key])
        cursor = result.get("nextCursor")
        if not cursor:
            break
    return items, None


@dataclass
class _Found:
    """What the upstream answered, whatever its era."""

    era: str
    version: Version
    offered: str
    transport: str
    server: dict[str, Any]
    capabilities: dict[str, Any]
    instructions: bool
    lists: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass
class _Step:
    """What the probe is waiting for, for the timeout's reason."""

    now: str = "server/discover"
    # The upstream is being asked as a modern one: a failure names that transport.
    modern: bool = False


async def _lists(ask: Ask, found: _Found, step: _Step) -> None:
    """The list methods of the capabilities the server declared, into `found`."""
    ids = itertools.count(1)
    for capability, method, key in LISTS:
        if capability not in found.capabilities:
            continue
        step.now = method
        items, error = await _list(ask, method, key, ids)
        if error is not None:
            found.errors[method] = error
        found.lists[key] = items


async def _era(upstream: Upstream) -> tuple[Era | None, ModernHttpUpstream | None]:
    """The upstream's era as the gateway tells it (app/wiring.py's start-up): an
    HTTP upstream is asked `server/discover`; a stdio one is legacy. None when the
    probe tells nothing (unreachable, a challenge): the legacy handshake then
    reports the failure, as the gateway's first call would."""
    if upstream.modern is None:
        return None, None
    try:
        return await upstream.era.current(), upstream.modern
    except UpstreamError:
        return None, upstream.modern


def _initialize(offered: str) -> Message:
    return {
        "jsonrpc": "2.0",
        "id": "probe-init",
        "method": "initialize",
        # No client capabilities: the server has nothing to ask the probe.
        "params": {"protocolVersion": offered, "capabilities": {}, "clientInfo": CLIENT_INFO},
    }


async def _legacy(settings: Settings, transport: Transport, step: _Step) -> _Found:
    offered = settings.upstream_protocol_version
    step.now = "initialize"
    step.modern = False
    session, result = await transport.open_session(_initialize(offered), {})
    try:
        version = get_version(result.get("protocolVersion"))
        assert version is not None  # the transports check it
        capabilities = result.get("capabilities")
        info = result.get("serverInfo")
        found = _Found(
            era=version.era.value,
            version=version,
            offered=offered,
            transport=transport_name(settings, transport),
            server=info if isinstance(info, dict) else {},
            capabilities=capabilities if isinstance(capabilities, dict) else {},
            instructions=isinstance(result.get("instructions"), str),
        )

        async def ask(method: str, params: dict[str, Any], ident: str) -> Message:
            return await _ask(session, method, params, ident)

        await _lists(ask, found, step)
    finally:
        step.now = "closing the session"
        await session.close()
    return found


async def _modern(upstream: ModernHttpUpstream, era: Era, step: _Step) -> _Found:
    """A modern upstream: its DiscoverResult and its lists, each one stateless
    request (2026-07-28 basic/transports/streamable-http), nothing else."""
    step.modern = True
    version = era.version
    if version is None:
        raise UpstreamProtocolError(
            "upstream speaks only modern protocol versions this gateway does not know"
        )
    result = era.discover
    if result is None:  # the era came from a modern error, or from MCP_SHIM_UPSTREAM_ERA
        step.now = "server/discover"
        _, answer = await discover(upstream, version, None)
        error = answer.get("error") if answer is not None else None
        if isinstance(error, dict):
            raise UpstreamProtocolError(
                f"upstream refused server/discover: {error.get('code')} {error.get('message')}"
            )
        result = answer.get("result") if answer is not None else None
        if not isinstance(result, dict) or "supportedVersions" not in result:
            raise UpstreamProtocolError(
                "upstream answered server/discover without a DiscoverResult"
            )
    meta = result.get("_meta")
    info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
    capabilities = result.get("capabilities")
    found = _Found(
        era=era.name,
        version=version,
        offered=LATEST_MODERN.name,
        # The one transport of the modern era.
        transport="streamable-http",
        server=info if isinstance(info, dict) else {},
        capabilities=capabilities if isinstance(capabilities, dict) else {},
        instructions=isinstance(result.get("instructions"), str),
    )

    async def ask(method: str, params: dict[str, Any], ident: str) -> Message:
        message: Message = {
            "jsonrpc": "2.0",
            "id": ident,
            "method": method,
            "params": {
                **params,
                "_meta": {
                    META_PROTOCOL_VERSION: version.name,
                    META_CLIENT_CAPABILITIES: {},
                    META_CLIENT_INFO: CLIENT_INFO,
                },
            },
        }
        exchange = await upstream.request(message, standard_headers(message, version.name))
        try:
            async for reply in exchange:
                if reply.get("id") == ident and "method" not in reply:
                    return reply
        finally:
            await exchange.aclose(drain=True)
        raise UpstreamError(f"upstream ended {method} without answering")

    await _lists(ask, found, step)
    return found


# -- the other era: is the upstream dual-era? ------------------------------------


@dataclass(frozen=True)
class OtherEra:
    """What the upstream answered in the era the gateway does not use with it:
    `accepted` None when its answer told nothing (a timeout, a challenge)."""

    era: str
    accepted: bool | None
    version: Version | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None

    def describe(self) -> dict[str, Any]:
        reason = self.reason
        if reason is not None and len(reason) > REASON_CHARS:
            reason = reason[:REASON_CHARS] + "..."  # the upstream's words, bounded
        return {
            "era": self.era,
            "accepted": self.accepted,
            "protocolVersion": self.version.name if self.version is not None else None,
            "reason": reason,
        }


async def _legacy_handshake(settings: Settings, transport: Transport, step: _Step) -> OtherEra:
    """Whether a modern upstream also accepts `initialize`: one session opened
    and closed again (DELETE), nothing asked in it."""
    step.now = "initialize (does the modern upstream also serve legacy sessions?)"
    try:
        session, result = await transport.open_session(
            _initialize(settings.upstream_protocol_version), {}
        )
    except (UpstreamTimeout, UpstreamUnavailable, UpstreamAuthChallenge) as exc:
        return OtherEra("legacy", None, reason=exc.message)
    except UpstreamError as exc:
        return OtherEra("legacy", False, reason=exc.message)
    try:
        version = get_version(result.get("protocolVersion"))
        capabilities = result.get("capabilities")
    finally:
        step.now = "closing the session"
        await session.close()
    return OtherEra(
        "legacy",
        True,
        version,
        capabilities if isinstance(capabilities, dict) else {},
    )


async def _modern_answer(upstream: ModernHttpUpstream, step: _Step) -> OtherEra:
    """Whether an upstream the gateway treats as legacy (MCP_SHIM_UPSTREAM_ERA=legacy)
    also answers `server/discover` as a modern server."""
    step.now = "server/discover (does the upstream also speak 2026-07-28?)"
    try:
        era = await probe_era(upstream, LATEST_MODERN, None)
    except (UpstreamTimeout, UpstreamUnavailable, UpstreamAuthChallenge, EraInconclusive) as exc:
        return OtherEra("modern", None, reason=exc.message)
    except UpstreamError as exc:
        return OtherEra("modern", False, reason=exc.message)
    if era.name != "modern" or era.version is None:
        return OtherEra("modern", False, reason="it refused server/discover")
    result = era.discover or {}
    capabilities = result.get("capabilities")
    return OtherEra(
        "modern", True, era.version, capabilities if isinstance(capabilities, dict) else {}
    )


def era_choices(found: _Found, other: OtherEra | None, setting: str) -> list[dict[str, Any]]:
    """For a dual-era upstream, what each MCP_SHIM_UPSTREAM_ERA gives 2026-07-28
    clients (docs/probe.md, "When to force legacy"); nothing for one of one era."""
    if other is None or not other.accepted or other.version is None:
        return []
    if found.era == "modern":
        modern, legacy, legacy_capabilities = found.version, other.version, other.capabilities
    else:
        modern, legacy, legacy_capabilities = other.version, found.version, found.capabilities
    chosen = "legacy" if setting == "legacy" else "modern"
    return [
        {
            "era": "modern",
            "setting": "MCP_SHIM_UPSTREAM_ERA=auto|modern",
            "protocolVersion": modern.name,
            "chosen": chosen == "modern",
            "summary": "passed through: the server's own multi round-trip (input_required) "
            "for the input it asks; legacy clients get the server's own sessions",
            "translations": modern_translations(),
        },
        {
            "era": "legacy",
            "setting": "MCP_SHIM_UPSTREAM_ERA=legacy",
            "protocolVersion": legacy.name,
            "chosen": chosen == "legacy",
            "summary": "the gateway's translation: initialize sessions held and pooled by "
            "the gateway, the server's requests for input bridged to input_required "
            "results; for a server that asks for input on legacy sessions only",
            "translations": translations(legacy, legacy_capabilities),
        },
    ]


async def _probe_upstream(
    settings: Settings, chosen: Upstream, step: _Step
) -> tuple[_Found, OtherEra | None]:
    """The upstream in the era the gateway will use, then whether it answers in
    the other one too (HTTP only: a stdio server is legacy)."""
    transport = chosen.transport
    era, upstream = await _era(chosen)
    if era is not None and era.name == "modern":
        assert upstream is not None
        found = await _modern(upstream, era, step)
        return found, await _legacy_handshake(settings, transport, step)
    found = await _legacy(settings, transport, step)
    if upstream is None:
        return found, None
    if era is None or era.source == "setting":
        # The era probe told nothing, or was not sent: ask now.
        return found, await _modern_answer(upstream, step)
    return found, OtherEra("modern", False, reason="it refused server/discover")


async def run_probe(settings: Settings, timeout_s: float) -> dict[str, Any]:
    """The report, or ProbeFailed with its exit code and one-line reason."""
    started = time.monotonic()
    step = _Step()
    with _capture_logs() as captured:
        chosen = build_upstream(settings)
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
        "upstream": _describe_upstream(settings),
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


# -- output -------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    server = report["server"]
    name = f"{server.get('name') or '(no serverInfo)'} {server.get('version') or ''}"
    lines = [
        f"server:      {name.rstrip()}",
        f"upstream:    {report['upstream']} ({report['transport']})",
        f"protocol:    {report['protocolVersion']} ({report['era']}; offered "
        f"{report['offeredProtocolVersion']})",
        "capabilities: " + (", ".join(_capability_summary(report["capabilities"])) or "none"),
    ]
    tools = report["tools"]
    if tools is not None:
        lines.append(f"tools ({len(tools)}): " + (", ".join(tools) or "none"))
    for key, label in (
        ("prompts", "prompts"),
        ("resources", "resources"),
        ("resourceTemplates", "resource templates"),
    ):
        if report[key] is not None:
            lines.append(f"{label}: {report[key]}")
    for method, error in report["listErrors"].items():
        lines.append(f"{method} failed: {error}")
    lines.extend(_dual_era_lines(report))
    lines.append(f"for {report['modernVersion']} clients the gateway:")
    lines.extend(f"  - {item['description']}" for item in report["translations"])
    return "\n".join(lines)


def _dual_era_lines(report: dict[str, Any]) -> list[str]:
    other = report["otherEra"]
    if other is None:
        return []
    if report["dualEra"]:
        lines = [
            f"dual-era:    yes, it also speaks {other['protocolVersion']} ({other['era']}); "
            "MCP_SHIM_UPSTREAM_ERA chooses what 2026-07-28 clients get:"
        ]
        for choice in report["eraChoices"]:
            now = " (in force)" if choice["chosen"] else ""
            lines.append(f"  {choice['era']}, {choice['setting']}{now}: {choice['summary']}")
        return lines
    word = "no" if other["accepted"] is False else "not known"
    return [f"dual-era:    {word} ({other['era']}: {other['reason']})"]


def _capability_summary(capabilities: dict[str, Any]) -> list[str]:
    out = []
    for name, value in capabilities.items():
        flags = [k for k, v in value.items() if v is True] if isinstance(value, dict) else []
        out.append(f"{name} ({', '.join(flags)})" if flags else name)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="longest the whole probe may take (default 30)",
    )


def main(args: argparse.Namespace) -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"mcp-shim probe: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.timeout <= 0:
        print("mcp-shim probe: --timeout must be above 0", file=sys.stderr)
        return EXIT_CONFIG
    try:
        report = asyncio.run(run_probe(settings, args.timeout))
    except ProbeFailed as failed:
        if args.json:
            _out(
                json.dumps(
                    {
                        "shape": JSON_SHAPE,
                        "ok": False,
                        "exitCode": failed.code,
                        "reason": failed.reason,
                        "upstream": _describe_upstream(settings),
                        "transport": transport_name(settings),
                    }
                )
            )
        print(f"mcp-shim probe: {failed.reason}", file=sys.stderr)
        return failed.code
    _out(json.dumps(report, indent=2) if args.json else render(report))
    return EXIT_OK


def _out(text: str) -> None:
    """Print the report; a reader that stopped early (`mcp-shim probe | head -3`)
    is not an error of the probe."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python would report the failed flush again at exit: stdout goes nowhere now.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
