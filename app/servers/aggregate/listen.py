"""The aggregate's `subscriptions/listen`: one stream from every member's.

The client's filter is split by member (routing.py `member_filters`: every
flag to every member, each subscribed URI to its owner in its own form) and a
listen opened on each member's endpoint, a long-lived stream of its own. The
aggregate acknowledges once every member has, or the list bound has passed:
its acknowledgement is the union of the members' (URIs as the aggregate shows
them). Each member's notifications are renamed (answers.py) and sent as they
come, naming the client's listen. A member whose stream ends or fails is
opened again with a growing pause; when it goes and when it comes back, the
client is told its lists changed (for the lists it listens to), so its next
read leaves the member's items out or has them back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import structlog

from app.call import Message
from app.servers.aggregate import answers, routing
from app.servers.aggregate.aggregator import Aggregator
from app.servers.aggregate.members import Member, Refused, is_final, member_headers
from app.upstream.errors import UpstreamError

log = structlog.get_logger("mcp_shim.aggregate")

# Notifications waiting for the client: past this, the oldest go (a client
# that reads this slowly re-lists anyway). A bound on what members can grow.
QUEUE_BOUND: Final = 256
RETRY_FIRST_S: Final = 1.0
RETRY_MAX_S: Final = 30.0
_CHANGED: Final = {
    "toolsListChanged": "notifications/tools/list_changed",
    "promptsListChanged": "notifications/prompts/list_changed",
    "resourcesListChanged": "notifications/resources/list_changed",
}


class _Merge:
    def __init__(self, aggregator: Aggregator, wanted: Mapping[str, Any]) -> None:
        self.aggregator = aggregator
        self.wanted = wanted
        self.queue: asyncio.Queue[Message] = asyncio.Queue()
        self.acks: dict[str, dict[str, Any]] = {}
        self.acked = asyncio.Event()
        self.expected = 0

    def put(self, note: Message) -> None:
        if self.queue.qsize() >= QUEUE_BOUND:
            with contextlib.suppress(asyncio.QueueEmpty):
                self.queue.get_nowait()
            log.warning("aggregate_listen_dropped", bound=QUEUE_BOUND)
        self.queue.put_nowait(note)

    def changed(self) -> None:
        """A member went or came back: its lists are not what the client read."""
        for flag, method in _CHANGED.items():
            if self.wanted.get(flag) is True:
                self.put({"jsonrpc": "2.0", "method": method})

    def ack(self, member: str, notifications: Any) -> None:
        self.acks[member] = notifications if isinstance(notifications, dict) else {}
        if len(self.acks) >= self.expected:
            self.acked.set()

    def union(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        subscribed: list[str] = []
        owners = self.aggregator.owners
        for member, acked in self.acks.items():
            for key, value in acked.items():
                if key == "resourceSubscriptions" and isinstance(value, list):
                    subscribed += [owners.outward(member, u) for u in value if isinstance(u, str)]
                elif value is True:
                    out[key] = True
        if subscribed:
            out["resourceSubscriptions"] = subscribed
        return out


async def _follow(
    merge: _Merge,
    member: Member,
    wanted: dict[str, Any],
    message: Message,
    headers: Mapping[str, str],
) -> None:
    """One member's listen, opened again whenever it ends, until cancelled."""
    aggregator = merge.aggregator
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    request: Message = {
        "jsonrpc": "2.0",
        "id": message.get("id"),
        "method": "subscriptions/listen",
        "params": {"_meta": meta if isinstance(meta, dict) else {}, "notifications": wanted},
    }
    sent = member_headers(request, headers, aggregator.version)
    pause = RETRY_FIRST_S
    was_up = True
    while True:
        try:
            exchange = await member.link.request(request, sent, long_lived=True)
            try:
                async for got in exchange:
                    if is_final(got):
                        break
                    if got.get("method") == answers.ACKNOWLEDGED:
                        merge.ack(member.name, (got.get("params") or {}).get("notifications"))
                        if not was_up:
                            log.info("aggregate_listen_back", server=member.name)
                            merge.changed()
                        was_up, pause = True, RETRY_FIRST_S
                        continue
                    if "id" in got:  # a server request has no place on a listen
                        continue
                    note = answers.notification(
                        answers.Scope(aggregator.sealer, member.name, aggregator.owners), got
                    )
                    if note is not None:
                        merge.put(dict(note))
            finally:
                await exchange.aclose()
            reason = "ended"
        except (UpstreamError, Refused, answers.TooLong) as exc:
            reason = type(exc).__name__
        if member.name not in merge.acks:
            merge.ack(member.name, {})  # do not hold the acknowledgement for it
        log.warning("aggregate_listen_lost", server=member.name, reason=reason, retry_s=pause)
        if was_up:
            merge.changed()
            was_up = False
        await asyncio.sleep(pause)
        pause = min(pause * 2, RETRY_MAX_S)


async def listen(
    aggregator: Aggregator, message: Message, headers: Mapping[str, str]
) -> AsyncIterator[Message]:
    """The aggregate's listen stream: the acknowledgement, then the members'
    notifications, for as long as the caller reads (closing the iterator
    closes every member's stream)."""
    params = message.get("params")
    wanted = params.get("notifications") if isinstance(params, dict) else None
    wanted = wanted if isinstance(wanted, dict) else {}
    rid = message.get("id")
    filters, unknown = routing.member_filters(aggregator.table(), wanted)
    if unknown:
        await aggregator.refresh_owners(message, headers)
        filters, unknown = routing.member_filters(aggregator.table(), wanted)
    merge = _Merge(aggregator, wanted)
    merge.expected = len(filters)
    tasks = [
        asyncio.create_task(_follow(merge, aggregator.member(name), wanted_m, message, headers))
        for name, wanted_m in filters.items()
    ]
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(aggregator.list_timeout_s):
                await merge.acked.wait()
        if unknown:
            log.info("aggregate_listen_unknown_uris", count=len(unknown))
        yield answers.for_listen(
            {
                "jsonrpc": "2.0",
                "method": answers.ACKNOWLEDGED,
                "params": {"notifications": merge.union()},
            },
            rid,
        )
        while True:
            yield answers.for_listen(await merge.queue.get(), rid)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
