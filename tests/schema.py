"""The spec's JSON schemas, for every test that checks a message against them.

The files are the spec's own, copied unchanged into ``tests/spec/<version>/``
(tests/spec/README.md says where from, and their license). Validators are
built once per (version, definition) and cached. :class:`Spec` knows definitions; the ``check_*``
functions know which definition a given message must satisfy, for the
modern (2026-07-28) answers the gateway sends its clients and for the
legacy messages it sends its upstream.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

SPEC_DIR = Path(__file__).resolve().parent / "spec"
MODERN = "2026-07-28"


class Spec:
    """The published spec revisions: schema.json per version and the 2026 examples."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def available(self) -> bool:
        return self.has_schema(MODERN)

    def has_schema(self, version: str) -> bool:
        return (self.root / version / "schema.json").is_file()

    @functools.cache  # noqa: B019 - one Spec per session
    def schema(self, version: str) -> dict[str, Any]:
        with (self.root / version / "schema.json").open(encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
        return data

    def definitions(self, version: str) -> dict[str, Any]:
        """The schema's named definitions (``definitions`` up to 2025-06-18, ``$defs`` after)."""
        schema = self.schema(version)
        defs: dict[str, Any] = schema.get("$defs") or schema["definitions"]
        return defs

    @functools.cache  # noqa: B019 - one Spec per session
    def validator(self, version: str, definition: str) -> Validator:
        schema = self.schema(version)
        key = "$defs" if "$defs" in schema else "definitions"
        if definition not in schema[key]:
            raise KeyError(f"{version} schema has no definition {definition!r}")
        cls = validator_for(schema)  # draft-07 or 2020-12, as the schema declares
        root = {**schema, "$ref": f"#/{key}/{definition}"}
        validator: Validator = cls(root)
        return validator

    def validate(self, version: str, definition: str, instance: Any) -> None:
        self.validator(version, definition).validate(instance)

    @functools.cache  # noqa: B019 - one Spec per session
    def method_definition(self, version: str, method: str, suffix: str) -> str | None:
        """The definition named ``*<suffix>`` whose ``method`` is the constant ``method``."""
        for name, d in self.definitions(version).items():
            if not name.endswith(suffix) or name.startswith(("Client", "Server")):
                continue
            if d.get("properties", {}).get("method", {}).get("const") == method:
                return name
        return None

    def example(self, type_name: str, file: str) -> dict[str, Any]:
        path = self.root / MODERN / "schema-examples" / type_name / f"{file}.json"
        with path.open(encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
        return data


SPEC = Spec(SPEC_DIR)

# The result definition of each request method (any version that has it).
RESULT_DEFS = {
    "tools/call": "CallToolResult",
    "tools/list": "ListToolsResult",
    "prompts/list": "ListPromptsResult",
    "prompts/get": "GetPromptResult",
    "resources/list": "ListResourcesResult",
    "resources/templates/list": "ListResourceTemplatesResult",
    "resources/read": "ReadResourceResult",
    "completion/complete": "CompleteResult",
    "server/discover": "DiscoverResult",
    "subscriptions/listen": "SubscriptionsListenResult",
    "initialize": "InitializeResult",
    "elicitation/create": "ElicitResult",
    "sampling/createMessage": "CreateMessageResult",
    "roots/list": "ListRootsResult",
}

# 2026-07-28 error definitions by code: (definition, validates the whole response?)
MODERN_ERROR_DEFS = {
    -32700: ("ParseError", False),
    -32600: ("InvalidRequestError", False),
    -32601: ("MethodNotFoundError", False),
    -32602: ("InvalidParamsError", False),
    -32603: ("InternalError", False),
    -32020: ("HeaderMismatchError", True),
    -32021: ("MissingRequiredClientCapabilityError", True),
    -32022: ("UnsupportedProtocolVersionError", True),
}
# "Implementations MUST NOT emit any code from this sub-range that is not
# defined by this specification" (2026-07-28 basic/index "Error Codes").
MODERN_RESERVED = range(-32099, -32019)


def check_modern_answer(spec: Spec, method: str, message: dict[str, Any]) -> None:
    """A final answer the gateway sent a 2026-07-28 client for a `method` request."""
    if "error" in message:
        check_modern_error(spec, message)
        return
    spec.validate(MODERN, "JSONRPCResultResponse", message)
    result_def = RESULT_DEFS[method]
    response_def = f"{result_def}Response"
    if response_def in spec.definitions(MODERN):
        spec.validate(MODERN, response_def, message)
    # The specific result, not the anyOf with InputRequiredResult the envelope allows.
    spec.validate(MODERN, result_def, message["result"])
    assert message["result"].get("resultType") == "complete", message["result"]


def check_modern_error(spec: Spec, message: dict[str, Any]) -> None:
    spec.validate(MODERN, "JSONRPCErrorResponse", message)
    code = message["error"]["code"]
    if code in MODERN_ERROR_DEFS:
        definition, whole = MODERN_ERROR_DEFS[code]
        spec.validate(MODERN, definition, message if whole else message["error"])
    else:
        assert code not in MODERN_RESERVED, f"undefined reserved code {code} reached the client"


def check_notification(spec: Spec, version: str, message: dict[str, Any]) -> None:
    """A notification in `version` (either direction)."""
    spec.validate(version, "JSONRPCNotification", message)
    definition = spec.method_definition(version, message["method"], "Notification")
    assert definition is not None, f"{message['method']} is not a {version} notification"
    spec.validate(version, definition, message)


def check_request(spec: Spec, version: str, message: dict[str, Any]) -> None:
    """A request in `version` (either direction)."""
    spec.validate(version, "JSONRPCRequest", message)
    definition = spec.method_definition(version, message["method"], "Request")
    assert definition is not None, f"{message['method']} is not a {version} request"
    spec.validate(version, definition, message)


def check_response(spec: Spec, version: str, message: dict[str, Any], method: str | None) -> None:
    """A response in `version`: its envelope and, when the method is known, its result."""
    defs = spec.definitions(version)
    if "error" in message:
        spec.validate(
            version,
            "JSONRPCErrorResponse" if "JSONRPCErrorResponse" in defs else "JSONRPCError",
            message,
        )
        return
    spec.validate(
        version,
        "JSONRPCResultResponse" if "JSONRPCResultResponse" in defs else "JSONRPCResponse",
        message,
    )
    if method is not None and method in RESULT_DEFS and RESULT_DEFS[method] in defs:
        spec.validate(version, RESULT_DEFS[method], message["result"])


def check_legacy_sent(spec: Spec, version: str, message: dict[str, Any]) -> None:
    """A message a client (the gateway) sent a legacy server speaking `version`."""
    if "method" in message and "id" in message:
        check_request(spec, version, message)
    elif "method" in message:
        check_notification(spec, version, message)
    else:
        check_response(spec, version, message, None)
