"""Task shapes from 2026-07-28's ``io.modelcontextprotocol/tasks`` extension
(SEP-2663) to 2025-11-25 (core experimental tasks): what a legacy client in
front of a modern upstream sees (app/upstream/modern/tasks.py). The other
way, a modern client in front of a 2025-11-25 server, is translators/tasks.py.

What changes on the wire (2025-11-25 basic/utilities/tasks; SEP-2663):

* ``CreateTaskResult``: ``{task: Task}`` in 2025-11-25, flat ``Result & Task``
  with ``resultType: "task"`` in the extension.
* ``Task``: ``ttl`` / ``pollInterval`` became ``ttlMs`` / ``pollIntervalMs``
  (both milliseconds already); ``taskId``, ``status``, ``statusMessage``,
  ``createdAt``, ``lastUpdatedAt`` are the same.
* ``tasks/get``: 2025-11-25's ``GetTaskResult`` is ``Result & Task``; the
  extension's ``DetailedTask`` also inlines ``result`` / ``error`` once terminal
  and ``inputRequests`` while ``input_required``, which a 2025-11-25 client
  reads from ``tasks/result`` and from server requests instead.
* The server capability: 2025-11-25 ``capabilities.tasks`` (``list``,
  ``cancel``, ``requests.tools.call``); the extension is
  ``capabilities.extensions["io.modelcontextprotocol/tasks"]``.
* A result delivered by ``tasks/result`` carries
  ``_meta["io.modelcontextprotocol/related-task"]``; the extension's inlined
  result must not.

Pure functions on parsed JSON, inputs never mutated.
"""

from __future__ import annotations

from typing import Any, Final

from translators._base import (
    META_CLIENT_CAPABILITIES,
    META_RELATED_TASK,
    JSONObject,
    meta_with,
)

EXTENSION: Final = "io.modelcontextprotocol/tasks"
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
# The extension's name -> 2025-11-25's, for the Task fields that were renamed.
_RENAMED: Final = {"ttlMs": "ttl", "pollIntervalMs": "pollInterval"}
_TASK_FIELDS: Final = ("taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt")
# What 2025-11-25 servers offer with tasks, as the gateway serves it to a legacy client.
LEGACY_SERVER_CAPABILITY: Final[JSONObject] = {
    "list": {},
    "cancel": {},
    "requests": {"tools": {"call": {}}},
}


def legacy_task(task: JSONObject) -> JSONObject:
    """An extension ``Task`` (or ``CreateTaskResult``/``DetailedTask``) as a
    2025-11-25 ``Task``: renamed fields, nothing of the envelope around it."""
    out: JSONObject = {key: task[key] for key in _TASK_FIELDS if key in task}
    for modern, legacy in _RENAMED.items():
        if modern in task:
            out[legacy] = task[modern]
    if "ttl" not in out:
        out["ttl"] = None  # required in 2025-11-25: null is "unlimited"
    return out


def create_task_result_down(res: JSONObject) -> JSONObject:
    """The extension's flat ``CreateTaskResult`` as 2025-11-25's ``{task: Task}``."""
    return {"task": legacy_task(res)}


def is_create_task_result(res: Any) -> bool:
    """An extension ``CreateTaskResult`` (``resultType: "task"`` and a ``taskId``)."""
    if not isinstance(res, dict) or res.get("resultType") != "task":
        return False
    return isinstance(res.get("taskId"), str)


def get_task_result_down(detailed: JSONObject) -> JSONObject:
    """A ``DetailedTask`` (``tasks/get``) as 2025-11-25's ``GetTaskResult``; the
    inlined ``result``/``error``/``inputRequests`` are for ``tasks/result``."""
    return legacy_task(detailed)


def task_payload(result: JSONObject, task_id: str) -> JSONObject:
    """An inlined task result as 2025-11-25's ``tasks/result`` answer: with the
    related-task ``_meta`` (basic/utilities/tasks "Related Task Metadata")."""
    return meta_with(result, META_RELATED_TASK, {"taskId": task_id})


def related_request(request: JSONObject, task_id: str) -> JSONObject:
    """A server request made during a task, as 2025-11-25 delivers it on the
    ``tasks/result`` stream: its params carry the related-task ``_meta``."""
    params = request.get("params")
    params = params if isinstance(params, dict) else {}
    return {**request, "params": meta_with(params, META_RELATED_TASK, {"taskId": task_id})}


def server_capabilities_down(caps: JSONObject) -> JSONObject:
    """Modern server capabilities with the extension: the 2025-11-25 ``tasks``
    capability added (``extensions`` itself stays for the caller to drop)."""
    extensions = caps.get("extensions")
    if not isinstance(extensions, dict) or EXTENSION not in extensions or "tasks" in caps:
        return caps
    return {**caps, "tasks": LEGACY_SERVER_CAPABILITY}


def declaring_extension(message: JSONObject) -> JSONObject:
    """A modern request whose ``_meta`` client capabilities declare the extension
    (SEP-2575 per-request capabilities): what makes a server create a task."""
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    caps = meta.get(META_CLIENT_CAPABILITIES)
    caps = dict(caps) if isinstance(caps, dict) else {}
    extensions = caps.get("extensions")
    extensions = dict(extensions) if isinstance(extensions, dict) else {}
    if EXTENSION in extensions:
        return message
    extensions[EXTENSION] = {}
    caps["extensions"] = extensions
    params = {**params, "_meta": {**meta, META_CLIENT_CAPABILITIES: caps}}
    return {**message, "params": params}
