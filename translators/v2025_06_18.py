"""MCP 2025-06-18, as a delta from 2025-03-26.

Changes (changelog.mdx and schema.json diff):

* JSON-RPC batching removed ("Remove support for JSON-RPC batching").
* ``MCP-Protocol-Version`` header required on HTTP requests after
  initialization (basic/transports "Protocol Version Header").
* Elicitation added: server request ``elicitation/create`` and the
  ``elicitation`` client capability.
* Structured tool output (``structuredContent``, ``Tool.outputSchema``),
  ``resource_link`` content blocks, ``title`` on tools/prompts/resources,
  ``_meta`` on more objects, ``context`` on ``completion/complete``.

Upgrading from 2025-03-26 changes nothing. Downgrading removes what
2025-03-26 cannot express (lossy: structured output survives only as the
text content that tools SHOULD also return).
"""

from __future__ import annotations

from typing import Final

from translators._base import (
    Context,
    Delta,
    Era,
    JSONObject,
    Steps,
    change,
    drop_capability,
    drop_content_types,
    drop_item_fields,
    params_of,
    reshape,
    with_params,
    without,
)

NAME: Final = "2025-06-18"

DELTA: Final = Delta(
    name=NAME,
    era=Era.LEGACY,
    batching=False,
    protocol_version_header=True,
    server_requests=change(add={"elicitation/create"}),
    client_capabilities=reshape(add={"elicitation": {}}),
)

_ADDED_ITEM_FIELDS: Final = {
    "tools/list": ("title", "outputSchema", "_meta"),
    "prompts/list": ("title", "_meta"),
    "resources/list": ("title", "_meta"),
    "resources/templates/list": ("title", "_meta"),
}


def downgrade_request(msg: JSONObject, ctx: Context) -> JSONObject:
    if msg.get("method") == "completion/complete":
        params = params_of(msg)
        if params is not None:
            return with_params(msg, without(params, ("context",)))
    return msg


def downgrade_result(res: JSONObject, method: str, ctx: Context) -> JSONObject:
    if method == "tools/call":
        res = without(res, ("structuredContent",))
    res = drop_content_types(res, method, ("resource_link",))
    return drop_item_fields(res, method, _ADDED_ITEM_FIELDS)


def downgrade_client_capabilities(caps: JSONObject) -> JSONObject:
    return drop_capability(caps, "elicitation")


STEPS: Final = Steps(
    downgrade_request=downgrade_request,
    downgrade_result=downgrade_result,
    downgrade_client_capabilities=downgrade_client_capabilities,
)
