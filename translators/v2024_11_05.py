"""MCP 2024-11-05: the oldest revision the gateway speaks, and the base of the chain.

Its delta is taken from nothing, so it states the whole first version: the
initialize handshake and sessions (HTTP+SSE transport), server-initiated
``ping``/``roots/list``/``sampling/createMessage``, JSON-RPC batches (plain
JSON-RPC 2.0, which this revision did not restrict), the standard JSON-RPC
error codes and -32002 for a missing resource (server/resources "Error
Handling": "Resource not found: `-32002`").

There is no predecessor, so every step is the shared identity.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from translators._base import BOOL, OPEN, Delta, Era, ListMethod, Steps, change, reshape

NAME: Final = "2024-11-05"

DELTA: Final = Delta(
    name=NAME,
    era=Era.LEGACY,
    batching=True,
    protocol_version_header=False,
    sessions=True,
    server_initiated_requests=True,
    result_type=False,
    per_request_meta=False,
    error_codes={
        "PARSE_ERROR": -32700,
        "INVALID_REQUEST": -32600,
        "METHOD_NOT_FOUND": -32601,
        "INVALID_PARAMS": -32602,
        "INTERNAL_ERROR": -32603,
        "RESOURCE_NOT_FOUND": -32002,
    },
    client_requests=change(
        add={
            "initialize",
            "ping",
            "completion/complete",
            "logging/setLevel",
            "prompts/get",
            "prompts/list",
            "resources/list",
            "resources/templates/list",
            "resources/read",
            "resources/subscribe",
            "resources/unsubscribe",
            "tools/call",
            "tools/list",
        }
    ),
    client_notifications=change(
        add={
            "notifications/cancelled",
            "notifications/initialized",
            "notifications/progress",
            "notifications/roots/list_changed",
        }
    ),
    server_requests=change(add={"ping", "roots/list", "sampling/createMessage"}),
    client_capabilities=reshape(
        add={"experimental": OPEN, "roots": {"listChanged": BOOL}, "sampling": {}}
    ),
    server_notifications=change(
        add={
            "notifications/cancelled",
            "notifications/message",
            "notifications/progress",
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
            "notifications/resources/updated",
            "notifications/tools/list_changed",
        }
    ),
)

# The list methods: the server capability that declares each, the result
# member that holds its items and the notification that says it changed.
LISTS: Final[Mapping[str, ListMethod]] = MappingProxyType(
    {
        "tools/list": ListMethod("tools", "tools", "notifications/tools/list_changed"),
        "prompts/list": ListMethod("prompts", "prompts", "notifications/prompts/list_changed"),
        "resources/list": ListMethod(
            "resources", "resources", "notifications/resources/list_changed"
        ),
        "resources/templates/list": ListMethod(
            "resources", "resourceTemplates", "notifications/resources/list_changed"
        ),
    }
)

STEPS: Final = Steps()
