"""The aggregate: every member presented as one 2026-07-28 MCP server.

`Aggregator.answer` takes one modern request and answers it: discovery and
the lists from every member at once (members.py `bounded`: a member down or
hung is left out within `MCP_SHIM_AGGREGATE_LIST_TIMEOUT_S`), anything else
from the one member it belongs to (routing.py), its answer renamed for the
aggregate (answers.py) as it streams. `subscriptions/listen` is listen.py's.
The aggregate is served by its endpoint (endpoint.py) and a gateway graph
of its own sits in front of it at `/mcp` (serve.py), so every client era is
translated there exactly as for one modern server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog

from app.call import Message
from app.cluster.sealing import Sealer
from app.rejections import INTERNAL_ERROR, INVALID_PARAMS, Rejection
from app.servers.aggregate import answers, capabilities, lists, names, routing, sealed, uris
from app.servers.aggregate.members import (
    Crawled,
    LeftOut,
    Member,
    Refused,
    bounded,
    crawl,
    is_final,
    member_headers,
    result_of,
)
from app.upstream.base import Exchange
from app.upstream.errors import UpstreamError
from translators.registry import LATEST_MODERN

log = structlog.get_logger("mcp_shim.aggregate")

SERVER_INFO: Final = {"name": "mcp-shim aggregate", "version": "1"}
# Reads of URIs no list showed refresh the lists at most this often.
REFRESH_EVERY_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class Whole:
    """One JSON answer."""

    status: int
    message: Message


@dataclass(slots=True)
class Streamed:
    """An answer that streams: a member's notifications before its result."""

    messages: AsyncIterator[Message]
    exchange: Exchange

    async def aclose(self) -> None:
        await self.exchange.aclose()


Answer = Whole | Streamed


def _reply(message: Message, result: dict[str, Any]) -> Whole:
    return Whole(200, {"jsonrpc": "2.0", "id": message.get("id"), "result": result})


def _refusal(refused: Rejection) -> Whole:
    return Whole(refused.http_status, refused.to_message())


class Aggregator:
    def __init__(
        self,
        members: Sequence[Member],
        *,
        separator: str,
        list_timeout_s: float,
        sealer: Sealer,
        left_out: LeftOut,
    ) -> None:
        self.members = tuple(members)
        self._by_name = {m.name: m for m in self.members}
        self.separator = separator
        self.list_timeout_s = list_timeout_s
        self.sealer = sealer
        self.left_out = left_out
        self.version = LATEST_MODERN.name
        self.page_items = lists.PAGE_ITEMS
        # Ownership of URIs from the latest resource lists read (uris.py).
        self._resources: dict[str, list[str]] = {}
        self._templates: dict[str, list[str]] = {}
        self.owners = uris.Owners(order=tuple(m.name for m in self.members))
        self._logged_shared: set[tuple[str, str, str]] = set()
        self._refreshed_at = float("-inf")

    def table(self) -> routing.Table:
        return routing.Table(
            members=tuple(self._by_name),
            separator=self.separator,
            owners=self.owners,
            sealer=self.sealer,
        )

    def member(self, name: str) -> Member:
        return self._by_name[name]

    async def answer(self, message: Message, headers: Mapping[str, str]) -> Answer:
        """The aggregate's answer to one request (not `subscriptions/listen`)."""
        routed = routing.route(self.table(), message)
        if isinstance(routed, Rejection) and _by_uri(message):
            # A URI no list has shown yet: read the lists once, then decide.
            await self.refresh_owners(message, headers)
            routed = routing.route(self.table(), message)
        if isinstance(routed, Rejection):
            log.info("aggregate_refused", method=message.get("method"), code=routed.code)
            return _refusal(routed)
        if isinstance(routed, str):
            return await self._local(routed, message, headers)
        return await self._forward(routed, headers, _task_named(message, routed))

    async def _local(self, method: str, message: Message, headers: Mapping[str, str]) -> Answer:
        if method == "ping":
            return _reply(message, {"resultType": "complete"})
        if method == "server/discover":
            return _reply(message, await self.discover(message, headers))
        if method == "subscriptions/listen":  # listen.py, by the endpoint
            return _refusal(
                Rejection(INVALID_PARAMS, "subscriptions/listen streams", id=message.get("id"))
            )
        return await self._list(lists.KINDS[method], message, headers)

    async def discover(self, message: Message, headers: Mapping[str, str]) -> dict[str, Any]:
        meta = _meta(message)

        async def ask(member: Member) -> dict[str, Any]:
            request = {
                "jsonrpc": "2.0",
                "id": "agg-discover",
                "method": "server/discover",
                "params": {"_meta": meta},
            }
            return await result_of(member, request, headers, self.version)

        found = await bounded(
            self.members, ask, self.list_timeout_s, "server/discover", self.left_out
        )
        result = capabilities.discover_result(
            [(m.name, r) for m, r in found], [self.version], SERVER_INFO, self.separator
        )
        partial = len(found) < len(self.members)
        return {
            **result,
            "resultType": "complete",
            "cacheScope": "private",
            "ttlMs": 0 if partial else 60000,
        }

    async def crawl_all(
        self, kind: lists.Kind, message: Message, headers: Mapping[str, str]
    ) -> list[tuple[Member, Crawled]]:
        meta = _meta(message)

        async def ask(member: Member) -> Crawled:
            return await crawl(member, kind, meta, headers, self.version)

        found = await bounded(self.members, ask, self.list_timeout_s, kind.method, self.left_out)
        if kind.by_uri:
            keyed = self._resources if kind.method == "resources/list" else self._templates
            for member, crawled in found:
                keyed[member.name] = lists.keys(crawled.items, kind)
            self._recompute_owners()
        return found

    async def refresh_owners(self, message: Message, headers: Mapping[str, str]) -> None:
        """Both resource lists read again, at once; at most once per
        `REFRESH_EVERY_S`, so that reads of unknown URIs cannot make every
        member list its resources at the caller's pace."""
        now = asyncio.get_running_loop().time()
        if now - self._refreshed_at < REFRESH_EVERY_S:
            return
        self._refreshed_at = now
        await asyncio.gather(
            *(
                self.crawl_all(lists.KINDS[method], message, headers)
                for method in ("resources/list", "resources/templates/list")
            )
        )

    def _recompute_owners(self) -> None:
        order = [m.name for m in self.members]
        self.owners = uris.owners(order, self._resources, self._templates)
        for shared in self.owners.shared:
            if shared not in self._logged_shared and len(self._logged_shared) < 10000:
                self._logged_shared.add(shared)
                uri, owner, other = shared
                log.warning(
                    "aggregate_uri_shared",
                    uri=uri,
                    kept_by=owner,
                    server=other,
                    listed_as=uris.made(other, uri),
                )

    async def _list(self, kind: lists.Kind, message: Message, headers: Mapping[str, str]) -> Whole:
        params = message.get("params")
        cursor = params.get("cursor") if isinstance(params, dict) else None
        offset = 0
        if cursor is not None:
            opened = sealed.open_cursor(self.sealer, kind.method, cursor)
            if opened is None:
                return _refusal(
                    Rejection(
                        INVALID_PARAMS,
                        f"invalid cursor for {kind.method}; list again from the start",
                        id=message.get("id"),
                    )
                )
            offset = opened
        found = await self.crawl_all(kind, message, headers)
        merged = lists.merge(
            kind, [(m.name, c.items) for m, c in found], self.separator, self.owners
        )
        if not kind.by_uri:
            long = [i[kind.key] for i in merged if names.too_long(i[kind.key])]
            if long:  # still listed: the spec's 128 characters are a SHOULD
                log.warning("aggregate_names_too_long", method=kind.method, count=len(long))
        page, following = lists.page(merged, offset, self.page_items)
        partial = len(found) < len(self.members)
        ttls = [c.ttl_ms for _, c in found]
        result: dict[str, Any] = {
            kind.array: page,
            "resultType": "complete",
            "cacheScope": "public" if found and not any(c.private for _, c in found) else "private",
            # A member left out comes back at the next read: nothing may keep this list.
            "ttlMs": 0 if partial or not ttls else min(ttls),
        }
        if following is not None:
            result["nextCursor"] = sealed.seal_cursor(self.sealer, kind.method, following)
        return _reply(message, result)

    async def _forward(
        self, routed: routing.Routed, headers: Mapping[str, str], task: tuple[str, str] | None
    ) -> Answer:
        member = self._by_name[routed.member]
        method = str(routed.message.get("method"))
        scope = answers.Scope(self.sealer, member.name, self.owners, task)
        rid = routed.message.get("id")
        try:
            exchange = await member.link.request(
                routed.message, member_headers(routed.message, headers, self.version)
            )
        except UpstreamError as exc:
            return _unreachable(member.name, method, rid, exc)
        return Streamed(_renamed(exchange, scope, method, member.name, rid), exchange)


def unreachable_message(member: str, method: str, rid: Any, exc: Exception) -> Message:
    """The error a client gets for a member's answer that cannot reach it."""
    return _unreachable(member, method, rid, exc).message


def _unreachable(member: str, method: str, rid: Any, exc: Exception) -> Whole:
    log.warning("aggregate_member_failed", server=member, method=method, error=type(exc).__name__)
    refused = Rejection(
        INTERNAL_ERROR,
        f"server {member!r} did not answer {method}: {type(exc).__name__}",
        id=rid,
        status=502,
    )
    return _refusal(refused)


async def _renamed(
    exchange: Exchange, scope: answers.Scope, method: str, member: str, rid: Any
) -> AsyncIterator[Message]:
    """A member's answer stream renamed; a value too long to seal or a broken
    stream ends it with an error the client can act on."""
    try:
        async for got in exchange:
            if is_final(got):
                if "result" in got and isinstance(got["result"], dict):
                    got = {**got, "result": answers.result(scope, method, got["result"])}
                yield got
                return
            if "method" in got and "id" not in got:
                note = answers.notification(scope, got)
                if note is not None:
                    yield dict(note)
            # A member's server request has no place in a stateless answer: the
            # named route turns those into input_required rounds already.
        yield _unreachable(
            member, method, rid, UpstreamError("answer ended without a result")
        ).message
    except (answers.TooLong, UpstreamError, Refused) as exc:
        yield _unreachable(member, method, rid, exc).message


def _task_named(message: Message, routed: routing.Routed) -> tuple[str, str] | None:
    """(the member's task id, the client's) of a request naming a task."""
    outer = (message.get("params") or {}).get("taskId")
    inner = routed.message["params"].get("taskId")
    if isinstance(outer, str) and isinstance(inner, str) and outer != inner:
        return inner, outer
    return None


def _meta(message: Message) -> dict[str, Any]:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return dict(meta) if isinstance(meta, dict) else {}


def _by_uri(message: Message) -> bool:
    method = message.get("method")
    if method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        return True
    params = message.get("params")
    ref = params.get("ref") if isinstance(params, dict) else None
    return (
        method == "completion/complete"
        and isinstance(ref, dict)
        and ref.get("type") == "ref/resource"
    )
