"""Which member a client's request goes to, and the request in that member's
own names.

A tool or prompt goes by its prefix (names.py), a resource by its URI's owner
(uris.py), a task by its sealed id, a retry by its sealed `requestState`
(sealed.py): the member that asked gets the answer, whatever name the retry
carries. What concerns every member (discovery, lists, listen, ping) is the
aggregator's own (`LOCAL`). Anything else is refused with the spec's error and
a message a person can act on. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.cluster.sealing import Sealer
from app.quoting import quoted
from app.rejections import INVALID_PARAMS, METHOD_NOT_FOUND, Rejection
from app.servers.aggregate import names, sealed
from app.servers.aggregate.lists import KINDS
from app.servers.aggregate.uris import Owners

LOCAL: Final = frozenset({"server/discover", "ping", "subscriptions/listen", *KINDS})
_BY_NAME: Final = {"tools/call": "tool", "prompts/get": "prompt"}
_TASKS: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


@dataclass(frozen=True, slots=True)
class Routed:
    member: str
    message: dict[str, Any]  # the request as the member is to get it


@dataclass(frozen=True, slots=True)
class Table:
    """What routing needs: the members (servers file order), the separator,
    URI ownership and the sealer."""

    members: Sequence[str]
    separator: str
    owners: Owners
    sealer: Sealer


def route(table: Table, message: Mapping[str, Any]) -> Routed | Rejection | str:
    """The member and its request; a Rejection; or the method itself when it
    is the aggregator's own (`LOCAL`)."""
    method = message.get("method")
    rid = message.get("id")
    if not isinstance(method, str):
        return Rejection(METHOD_NOT_FOUND, "a request without a method", id=rid)
    if method in LOCAL:
        return method
    params = message.get("params")
    params = dict(params) if isinstance(params, dict) else {}
    target = _target(table, method, params, rid)
    if isinstance(target, Rejection):
        return target
    state = params.get("requestState")
    if state is not None:
        opened = sealed.unwrap(table.sealer, sealed.STATE, state)
        if opened is None or opened[0] != target:
            return Rejection(
                INVALID_PARAMS,
                "requestState is not one this gateway handed out for this request; "
                "send the request again without it",
                id=rid,
            )
        params["requestState"] = opened[1]
    return Routed(target, {**message, "params": params})


def _target(table: Table, method: str, params: dict[str, Any], rid: Any) -> str | Rejection:
    """The member `params` names, `params` rewritten in its own names."""
    members = frozenset(table.members)
    if method in _BY_NAME:
        split = names.split(params.get("name"), members, table.separator)
        if split is None:
            return _unknown(_BY_NAME[method], params.get("name"), table, rid)
        params["name"] = split[1]
        return split[0]
    if method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        return _by_uri(table, params, "uri", rid)
    if method == "completion/complete":
        ref = params.get("ref")
        if isinstance(ref, dict):
            ref = dict(ref)
            params["ref"] = ref
            if ref.get("type") == "ref/prompt":
                split = names.split(ref.get("name"), members, table.separator)
                if split is None:
                    return _unknown("prompt", ref.get("name"), table, rid)
                ref["name"] = split[1]
                return split[0]
            if ref.get("type") == "ref/resource":
                return _by_uri(table, ref, "uri", rid)
        return Rejection(
            INVALID_PARAMS, "completion/complete needs a ref naming a prompt or a resource", id=rid
        )
    if method in _TASKS:
        opened = sealed.unwrap(table.sealer, sealed.TASK, params.get("taskId"))
        if opened is None or opened[0] not in members:
            return Rejection(INVALID_PARAMS, f"unknown task {quoted(params.get('taskId'))}", id=rid)
        params["taskId"] = opened[1]
        return opened[0]
    return Rejection(
        METHOD_NOT_FOUND,
        f"method {quoted(method)} is not served by the aggregate endpoint; "
        "use a server's own endpoint, /servers/NAME/mcp",
        id=rid,
    )


def _by_uri(table: Table, holder: dict[str, Any], field: str, rid: Any) -> str | Rejection:
    uri = holder.get(field)
    found = table.owners.route(uri, table.members) if isinstance(uri, str) else None
    if found is None:
        # 2026-07-28 server/resources: resource not found is -32602.
        return Rejection(
            INVALID_PARAMS, f"Resource not found: {quoted(uri)}", id=rid, data={"uri": uri}
        )
    holder[field] = found[1]
    return found[0]


def _unknown(what: str, name: Any, table: Table, rid: Any) -> Rejection:
    return Rejection(
        INVALID_PARAMS,
        f"Unknown {what}: {quoted(name)}; the aggregate's names are SERVER{table.separator}NAME, "
        f"SERVER one of {', '.join(table.members) or '(none)'}",
        id=rid,
    )


def member_filters(
    table: Table, notifications: Mapping[str, Any]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """A listen request's filter split by member: every flag to every member,
    each subscribed URI to its owner in its own form; and the URIs no member
    owns (the aggregator acknowledges them as not subscribed)."""
    flags = {k: v for k, v in notifications.items() if k != "resourceSubscriptions"}
    out: dict[str, dict[str, Any]] = {m: dict(flags) for m in table.members}
    unknown: list[str] = []
    uris = notifications.get("resourceSubscriptions")
    for uri in uris if isinstance(uris, list) else ():
        found = table.owners.route(uri, table.members) if isinstance(uri, str) else None
        if found is None:
            unknown.append(str(uri))
            continue
        out[found[0]].setdefault("resourceSubscriptions", []).append(found[1])
    return out, unknown
