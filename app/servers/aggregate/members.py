"""The aggregate's members and what it asks of them: one request and its
result, and a whole list within the list bound.

Each member is reached at its own modern endpoint (`/servers/NAME/mcp`, a
full gateway of its own that speaks 2026-07-28 whatever the server's era)
through `ModernHttpUpstream` (app/upstream/modern/upstream.py): every era,
transport and translation is the named route's business, never the
aggregate's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from app.call import Message
from app.servers.aggregate import lists
from app.upstream.base import Exchange
from app.upstream.errors import UpstreamError, UpstreamProtocolError
from app.upstream.modern.upstream import PARAM_PREFIX, standard_headers

log = structlog.get_logger("mcp_shim.aggregate")

# What the aggregate passes on of the request it got to the member it asks.
_PASSED = frozenset({"authorization", "mcp-protocol-version"})


class Link(Protocol):
    """What the aggregate needs of a member's endpoint (`ModernHttpUpstream`)."""

    async def request(
        self, message: Message, headers: Mapping[str, str], *, long_lived: bool = False
    ) -> Exchange: ...


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    link: Link


class Refused(Exception):
    """A member answered with a JSON-RPC error."""

    def __init__(self, error: Any) -> None:
        super().__init__(str(error)[:200])
        self.error = error


def member_headers(message: Message, got: Mapping[str, str], version: str) -> dict[str, str]:
    """The headers of a request to a member: the caller's credential and
    `Mcp-Param-*` (arguments are passed unchanged), the standard ones derived
    from the member's own form of the request (its own tool name in `Mcp-Name`)."""
    out = {k: v for k, v in got.items() if k in _PASSED or k.startswith(PARAM_PREFIX)}
    out.update(standard_headers(message, got.get("mcp-protocol-version", version)))
    return out


def is_final(message: Message) -> bool:
    return "id" in message and ("result" in message or "error" in message)


async def result_of(
    member: Member, message: Message, headers: Mapping[str, str], version: str
) -> dict[str, Any]:
    """A member's result to one request; `Refused` for its error, an
    `UpstreamError` when it cannot be reached or answers nothing."""
    exchange = await member.link.request(message, member_headers(message, headers, version))
    try:
        async for got in exchange:
            if not is_final(got):
                continue
            if "error" in got:
                raise Refused(got["error"])
            result = got["result"]
            if not isinstance(result, dict):
                raise UpstreamProtocolError(
                    f"server {member.name!r} answered with a result that is no object"
                )
            return result
        raise UpstreamProtocolError(f"server {member.name!r} ended its answer without a result")
    finally:
        await exchange.aclose()


@dataclass(frozen=True, slots=True)
class Crawled:
    items: list[dict[str, Any]]
    ttl_ms: int
    private: bool


async def crawl(
    member: Member,
    kind: lists.Kind,
    meta: Mapping[str, Any],
    headers: Mapping[str, str],
    version: str,
) -> Crawled:
    """A member's whole list, its own pages followed (bounded: `lists.MAX_MEMBER_PAGES`
    pages, `lists.MAX_MEMBER_ITEMS` items)."""
    items: list[dict[str, Any]] = []
    ttl: int | None = None
    private = False
    cursor: str | None = None
    for page_no in range(lists.MAX_MEMBER_PAGES):
        params: dict[str, Any] = {"_meta": dict(meta)}
        if cursor is not None:
            params["cursor"] = cursor
        request = {
            "jsonrpc": "2.0",
            "id": f"agg-{page_no}",
            "method": kind.method,
            "params": params,
        }
        result = await result_of(member, request, headers, version)
        page = lists.page_items(result, kind)
        if page is None:
            raise UpstreamProtocolError(
                f"server {member.name!r} answered {kind.method} without {kind.array}"
            )
        items.extend(page[0])
        got_ttl = result.get("ttlMs")
        if isinstance(got_ttl, int) and not isinstance(got_ttl, bool):
            ttl = max(0, got_ttl) if ttl is None else min(ttl, max(0, got_ttl))
        private = private or result.get("cacheScope") != "public"
        cursor = page[1]
        if len(items) >= lists.MAX_MEMBER_ITEMS:
            log.warning(
                "aggregate_list_cut",
                server=member.name,
                method=kind.method,
                kept=lists.MAX_MEMBER_ITEMS,
            )
            del items[lists.MAX_MEMBER_ITEMS :]
            break
        if cursor is None:
            break
    return Crawled(items, ttl or 0, private)


LeftOut = Callable[[str, str], None]  # (member, reason): counted in the metrics


async def bounded(
    members: Sequence[Member],
    ask: Callable[[Member], Any],
    bound_s: float,
    what: str,
    left_out: LeftOut,
) -> list[tuple[Member, Any]]:
    """`ask(member)` of every member at once, each within `bound_s`: the
    members that answered, in order, with their answers. A member down, hung,
    refusing or answering nonsense is left out, logged and counted; the others
    never wait for it longer than the bound."""

    async def one(member: Member) -> Any:
        try:
            async with asyncio.timeout(bound_s):
                return await ask(member)
        except TimeoutError:
            reason = "timeout"
        except Refused:
            reason = "refused"
        except UpstreamError as exc:
            reason = type(exc).__name__
        log.warning(
            "aggregate_member_left_out",
            server=member.name,
            method=what,
            reason=reason,
            bound_s=bound_s,
        )
        left_out(member.name, reason)
        return _MISSING

    answers = await asyncio.gather(*(one(m) for m in members))
    return [(m, a) for m, a in zip(members, answers, strict=True) if a is not _MISSING]


_MISSING: Any = object()
