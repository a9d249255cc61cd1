"""MCP 2025-03-26, as a delta from 2024-11-05.

Adds (schema.json diff): the ``completions`` server capability, tool
``annotations``, ``audio`` content blocks, ``message`` on progress
notifications, and formal JSON-RPC batches (JSONRPCBatchRequest; batching was
already plain JSON-RPC before). The Streamable HTTP transport replaces
HTTP+SSE; the method sets and error codes do not change.

Upgrading from 2024-11-05 changes nothing (everything old is still valid).
Downgrading removes what 2024-11-05 cannot express.
"""

from __future__ import annotations

from typing import Final

from translators._base import (
    Context,
    Delta,
    Era,
    JSONObject,
    Steps,
    drop_capability,
    drop_content_types,
    drop_item_fields,
    params_of,
    with_params,
    without,
)

NAME: Final = "2025-03-26"

DELTA: Final = Delta(name=NAME, era=Era.LEGACY, batching=True)


def downgrade_result(res: JSONObject, method: str, ctx: Context) -> JSONObject:
    # 2024-11-05 content blocks are text | image | resource only.
    res = drop_content_types(res, method, ("audio",))
    return drop_item_fields(res, method, {"tools/list": ("annotations",)})


def downgrade_notification(msg: JSONObject) -> JSONObject | None:
    if msg.get("method") == "notifications/progress":
        params = params_of(msg)
        if params is not None:
            return with_params(msg, without(params, ("message",)))
    return msg


def downgrade_server_capabilities(caps: JSONObject) -> JSONObject:
    return drop_capability(caps, "completions")


STEPS: Final = Steps(
    downgrade_result=downgrade_result,
    downgrade_notification=downgrade_notification,
    downgrade_server_capabilities=downgrade_server_capabilities,
)
