"""MCP 2025-11-25, as a delta from 2025-06-18: the last legacy revision.

Changes (changelog.mdx and schema.json diff):

* Experimental tasks: ``tasks/get``, ``tasks/result``, ``tasks/list``,
  ``tasks/cancel`` in both directions, ``notifications/tasks/status``, the
  ``tasks`` client and server capabilities, ``task`` on ``tools/call``,
  ``sampling/createMessage`` and ``elicitation/create`` params, and
  ``Tool.execution``.
* URL mode elicitation (``mode``/``url``/``elicitationId``,
  ``notifications/elicitation/complete``, the ``form``/``url`` sub-capabilities
  of ``elicitation``) and the error ``-32042`` URLElicitationRequiredError
  (client/elicitation "Error Handling").
* Tool calling in sampling (``tools``/``toolChoice``, the ``sampling.tools``
  and ``sampling.context`` sub-capabilities).
* ``icons`` on tools, prompts, resources and resource templates.

Upgrading from 2025-06-18 changes nothing. Downgrading removes what
2025-06-18 cannot express.
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
    drop_item_fields,
    drop_sub_capability,
    params_of,
    reshape,
    with_params,
    without,
)

NAME: Final = "2025-11-25"

_TASK_METHODS: Final = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})

DELTA: Final = Delta(
    name=NAME,
    era=Era.LEGACY,
    error_codes={"URL_ELICITATION_REQUIRED": -32042},
    client_requests=change(add=_TASK_METHODS),
    client_notifications=change(add={"notifications/tasks/status"}),
    server_requests=change(add=_TASK_METHODS),
    server_notifications=change(
        add={"notifications/elicitation/complete", "notifications/tasks/status"}
    ),
    client_capabilities=reshape(
        add={
            "sampling": {"context": {}, "tools": {}},
            "elicitation": {"form": {}, "url": {}},
            "tasks": {
                "cancel": {},
                "list": {},
                "requests": {
                    "elicitation": {"create": {}},
                    "sampling": {"createMessage": {}},
                },
            },
        }
    ),
)

_ADDED_PARAMS: Final = {
    "tools/call": ("task",),
    "sampling/createMessage": ("task", "tools", "toolChoice"),
    "elicitation/create": ("task",),
}

_ADDED_ITEM_FIELDS: Final = {
    "tools/list": ("execution", "icons"),
    "prompts/list": ("icons",),
    "resources/list": ("icons",),
    "resources/templates/list": ("icons",),
}


def downgrade_request(msg: JSONObject, ctx: Context) -> JSONObject:
    method = msg.get("method")
    params = params_of(msg)
    if params is None or not isinstance(method, str):
        return msg
    added = _ADDED_PARAMS.get(method)
    if added is None:
        return msg
    new = without(params, added)
    if method == "elicitation/create" and new.get("mode") == "form":
        # 2025-06-18 elicitation is form-only and has no `mode`. A URL-mode
        # request cannot be expressed and is left for the caller to refuse.
        new = without(new, ("mode",))
    return with_params(msg, new)


def downgrade_result(res: JSONObject, method: str, ctx: Context) -> JSONObject:
    return drop_item_fields(res, method, _ADDED_ITEM_FIELDS)


def downgrade_client_capabilities(caps: JSONObject) -> JSONObject:
    caps = drop_capability(caps, "tasks")
    elicitation = caps.get("elicitation")
    if isinstance(elicitation, dict) and elicitation:
        # client/elicitation "Capabilities": an empty object means form mode
        # only, which is all 2025-06-18 knows. URL-only support has no
        # 2025-06-18 equivalent, so the capability is not declared at all.
        if "form" in elicitation:
            caps = {**caps, "elicitation": {}}
        else:
            caps = drop_capability(caps, "elicitation")
    return drop_sub_capability(caps, "sampling", ("context", "tools"))


def downgrade_server_capabilities(caps: JSONObject) -> JSONObject:
    return drop_capability(caps, "tasks")


STEPS: Final = Steps(
    downgrade_request=downgrade_request,
    downgrade_result=downgrade_result,
    downgrade_client_capabilities=downgrade_client_capabilities,
    downgrade_server_capabilities=downgrade_server_capabilities,
)
