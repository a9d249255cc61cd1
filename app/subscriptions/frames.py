"""The messages a `subscriptions/listen` stream carries, built from plain values.

Pure. Spec: 2026-07-28 basic/patterns/subscriptions. Every message on the
stream carries `_meta["io.modelcontextprotocol/subscriptionId"]`, the JSON-RPC
id of the listen request: the acknowledgment first, then the notifications,
then (when the gateway ends the subscription) the listen request's response.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from app.call import Message
from app.rejections import INTERNAL_ERROR, RequestId
from app.subscriptions.filters import Filter

SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"


def ack(listen_id: RequestId, honoured: Filter) -> Message:
    """`notifications/subscriptions/acknowledged` with the subset the gateway honours."""
    return {
        "jsonrpc": "2.0",
        "method": ACKNOWLEDGED,
        "params": {"_meta": {SUBSCRIPTION_ID: listen_id}, "notifications": honoured.to_wire()},
    }


def tag(notification: Mapping[str, Any], listen_id: RequestId) -> Message:
    """A copy of `notification` with the subscription id in `params._meta`.

    The input (shared by every listener it was fanned out to) is not mutated.
    """
    params = notification.get("params")
    params = dict(params) if isinstance(params, dict) else {}
    meta = params.get("_meta")
    params["_meta"] = (
        {**meta, SUBSCRIPTION_ID: listen_id}
        if isinstance(meta, dict)
        else {SUBSCRIPTION_ID: listen_id}
    )
    return {"jsonrpc": "2.0", "method": notification.get("method"), "params": params}


def closing_result(listen_id: RequestId) -> Message:
    """The graceful end ("Graceful Closure"): the listen request's own response."""
    return {
        "jsonrpc": "2.0",
        "id": listen_id,
        "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: listen_id}},
    }


def overflow_error(listen_id: RequestId, bound: int) -> Message:
    """The listen request's error response when its client fell `bound` notifications
    behind: the subscription is closed so it cannot slow the others down."""
    return {
        "jsonrpc": "2.0",
        "id": listen_id,
        "error": {
            "code": INTERNAL_ERROR,
            "message": (
                f"Subscription closed: the client fell more than {bound} notifications "
                "behind on this stream; open a new subscriptions/listen and refetch"
            ),
            "data": {
                "reason": "listener_queue_overflow",
                "queueBound": bound,
                SUBSCRIPTION_ID: listen_id,
            },
        },
    }


def upstream_lost_error(listen_id: RequestId, detail: str) -> Message:
    """The listen request's error response when the upstream can no longer serve it."""
    return {
        "jsonrpc": "2.0",
        "id": listen_id,
        "error": {
            "code": INTERNAL_ERROR,
            "message": f"Subscription closed: the upstream MCP server is unavailable ({detail})",
            "data": {"reason": "upstream_unavailable", SUBSCRIPTION_ID: listen_id},
        },
    }
