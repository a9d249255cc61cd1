"""`mcp-shim probe`: one era's questions. The era as the gateway tells it, then
a legacy upstream's one session (`initialize`, the list methods, closed) or a
modern one's `DiscoverResult` and stateless list requests."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.call import Message
from app.config import Settings
from app.upstream.base import Session, Transport
from app.upstream.choice import Upstream, transport_name
from app.upstream.errors import UpstreamError, UpstreamProtocolError
from app.upstream.modern.upstream import ModernHttpUpstream, standard_headers
from app.upstream.sessions.era import Era, discover
from app.upstream.sessions.listener import default_answer
from translators import v2024_11_05
from translators._base import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
)
from translators.registry import LATEST_MODERN, Version, get_version

CLIENT_INFO = {"name": "mcp-shim-probe", "version": "0.1.0"}
# A server that pages its lists forever is not followed past this.
MAX_PAGES = 100


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
class Found:
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
class Step:
    """What the probe is waiting for, for the timeout's reason."""

    now: str = "server/discover"
    # The upstream is being asked as a modern one: a failure names that transport.
    modern: bool = False


async def _lists(ask: Ask, found: Found, step: Step) -> None:
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


async def tell_era(upstream: Upstream) -> tuple[Era | None, ModernHttpUpstream | None]:
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


def initialize_request(offered: str) -> Message:
    return {
        "jsonrpc": "2.0",
        "id": "probe-init",
        "method": "initialize",
        # No client capabilities: the server has nothing to ask the probe.
        "params": {"protocolVersion": offered, "capabilities": {}, "clientInfo": CLIENT_INFO},
    }


async def ask_legacy(settings: Settings, transport: Transport, step: Step) -> Found:
    offered = settings.upstream_protocol_version
    step.now = "initialize"
    step.modern = False
    session, result = await transport.open_session(initialize_request(offered), {})
    try:
        version = get_version(result.get("protocolVersion"))
        assert version is not None  # the transports check it
        capabilities = result.get("capabilities")
        info = result.get("serverInfo")
        found = Found(
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


async def ask_modern(upstream: ModernHttpUpstream, era: Era, step: Step) -> Found:
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
    found = Found(
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
