"""A member's answers and notifications as the aggregate shows them.

What a member hands out that must come back to it is sealed with its name
(`requestState`, task ids: app/servers/aggregate/sealed.py); what names a
resource is shown by the aggregate's URI ownership (uris.py); a log message
names its member in `logger`. Everything else passes unchanged. Inputs are
never mutated; a message with nothing to change is returned itself. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from app.cluster.sealing import Sealer
from app.servers.aggregate import sealed
from app.servers.aggregate.uris import Owners

ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"
SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"


class TooLong(ValueError):
    """A member's value too long to seal for the aggregate."""


@dataclass(frozen=True, slots=True)
class Scope:
    """What renaming one member's messages needs."""

    sealer: Sealer
    member: str
    owners: Owners
    # The task id the request named, the member's and the client's: answered
    # as the client sent it, not sealed anew (a client may compare them).
    task: tuple[str, str] | None = None

    def wrap(self, purpose: bytes, value: str) -> str:
        if purpose == sealed.TASK and self.task is not None and self.task[0] == value:
            return self.task[1]
        token = sealed.wrap(self.sealer, purpose, self.member, value)
        if token is None:
            raise TooLong(
                f"server {self.member!r} handed out a value over "
                f"{sealed.MAX_WRAPPED_CHARS} characters"
            )
        return token


def _content(scope: Scope, item: Any) -> Any:
    """A content block (tool result, prompt message, embedded resource) with
    its resource URI shown as the aggregate shows it."""
    if not isinstance(item, dict):
        return item
    kind = item.get("type")
    if kind == "resource_link" and isinstance(item.get("uri"), str):
        uri = scope.owners.outward(scope.member, item["uri"])
        return item if uri == item["uri"] else {**item, "uri": uri}
    if kind == "resource" and isinstance(item.get("resource"), dict):
        inner = item["resource"]
        if isinstance(inner.get("uri"), str):
            uri = scope.owners.outward(scope.member, inner["uri"])
            if uri != inner["uri"]:
                return {**item, "resource": {**inner, "uri": uri}}
    return item


def _contents(scope: Scope, items: Any, nested: str | None = None) -> Any:
    if not isinstance(items, list):
        return items
    if nested is None:
        out = [_content(scope, i) for i in items]
    else:
        out = [
            {**m, nested: _content(scope, m[nested])} if isinstance(m, dict) and nested in m else m
            for m in items
        ]
    return items if all(a is b for a, b in zip(out, items, strict=True)) else out


def _read_contents(scope: Scope, items: Any) -> Any:
    if not isinstance(items, list):
        return items
    out = [
        {**c, "uri": scope.owners.outward(scope.member, c["uri"])}
        if isinstance(c, dict) and isinstance(c.get("uri"), str)
        else c
        for c in items
    ]
    return out


def result(scope: Scope, method: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
    """A member's result to `method` as the aggregate answers it. Raises
    `TooLong` for a value too long to seal."""
    out = dict(body)
    state = body.get("requestState")
    if isinstance(state, str):
        out["requestState"] = scope.wrap(sealed.STATE, state)
    task_id = body.get("taskId")
    if isinstance(task_id, str) and (
        body.get("resultType") == "task" or method.startswith("tasks/")
    ):
        out["taskId"] = scope.wrap(sealed.TASK, task_id)
    if "content" in body:
        out["content"] = _contents(scope, body["content"])
    if method == "prompts/get" and "messages" in body:
        out["messages"] = _contents(scope, body["messages"], nested="content")
    if method == "resources/read" and "contents" in body:
        out["contents"] = _read_contents(scope, body["contents"])
    if all(out[k] is body[k] for k in body):
        return body
    return out


def notification(scope: Scope, message: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A member's notification as the aggregate sends it; None: the aggregate's
    own business (a member's listen acknowledgement: the aggregate sends one
    of its own). Raises `TooLong` for a task id too long to seal."""
    method = message.get("method")
    params = message.get("params")
    if method == ACKNOWLEDGED:
        return None
    if not isinstance(params, dict):
        return message
    if method == "notifications/resources/updated" and isinstance(params.get("uri"), str):
        uri = scope.owners.outward(scope.member, params["uri"])
        if uri != params["uri"]:
            return {**message, "params": {**params, "uri": uri}}
    elif method == "notifications/tasks" and isinstance(params.get("taskId"), str):
        return {
            **message,
            "params": {**params, "taskId": scope.wrap(sealed.TASK, params["taskId"])},
        }
    elif method == "notifications/message":
        logger = params.get("logger")
        named = scope.member if not isinstance(logger, str) else f"{scope.member}/{logger}"
        return {**message, "params": {**params, "logger": named}}
    return message


def for_listen(message: Mapping[str, Any], listen_id: Any) -> dict[str, Any]:
    """A notification on the aggregate's listen stream: it names the client's
    `subscriptions/listen` request (2026-07-28 basic/patterns/subscriptions:
    every notification on the stream carries it), not the aggregator's own to
    the member."""
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    return {**message, "params": {**params, "_meta": {**meta, SUBSCRIPTION_ID: listen_id}}}
