"""Validation of what a client sends back: `inputResponses` and `requestState`.

2026-07-28 basic/patterns/mrtr "Error Handling": servers SHOULD validate that
`inputResponses` is a valid InputResponses object and that each answer can be
parsed; unexpected keys are ignored. Two levels:

- ``check_params``: the shape of the retry's parameters, before anything else
  (an `inputResponses` that is not an object of objects, a `requestState`
  that is not a non-empty string): -32602, nothing reaches the upstream.
- ``check_answer``: one answer against the request it answers (an ElicitResult
  whose `content` must match `requestedSchema`, a CreateMessageResult, a
  ListRootsResult). Returns the reason as text, or None when it fits.

Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, Final, TypeGuard
from urllib.parse import urlsplit

from app.cluster.sealing import MAX_TOKEN_CHARS
from app.quoting import quoted
from app.rejections import INVALID_PARAMS, Rejection, RequestId

ELICIT_ACTIONS: Final = ("accept", "decline", "cancel")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def check_params(call_id: RequestId, params: Mapping[str, Any]) -> Rejection | None:
    if "inputResponses" in params:
        responses = params["inputResponses"]
        if not isinstance(responses, dict):
            return Rejection(
                INVALID_PARAMS,
                "Invalid params: inputResponses must be an object mapping each inputRequests "
                "key to the client's result",
                call_id,
            )
        for key, value in responses.items():
            if not isinstance(value, dict):
                return Rejection(
                    INVALID_PARAMS,
                    f"Invalid params: inputResponses[{quoted(key)}] must be an object "
                    "(an ElicitResult, CreateMessageResult or ListRootsResult)",
                    call_id,
                    data={"inputKey": key},
                )
    if "requestState" in params:
        state = params["requestState"]
        if not isinstance(state, str) or not state or len(state) > MAX_TOKEN_CHARS:
            return Rejection(
                INVALID_PARAMS,
                "Invalid params: requestState must be the non-empty string the server sent",
                call_id,
            )
    return None


def sole_fit(input_request: Mapping[str, Any], supplied: Mapping[str, Any]) -> str | None:
    """The key of the only supplied answer that fits `input_request`, if exactly one
    does. Elicitation answers count only when accepted: a bare decline or cancel
    fits every question and says nothing about which one it meant."""
    fitting = [
        key
        for key, answer in supplied.items()
        if isinstance(answer, Mapping)
        and (
            input_request.get("method") != "elicitation/create" or answer.get("action") == "accept"
        )
        and check_answer(input_request, answer) is None
    ]
    return fitting[0] if len(fitting) == 1 else None


def check_answer(input_request: Mapping[str, Any], answer: Mapping[str, Any]) -> str | None:
    """Why `answer` does not fit `input_request` ({method, params} as the client saw it)."""
    method = input_request.get("method")
    params = input_request.get("params")
    params = params if isinstance(params, Mapping) else {}
    if method == "elicitation/create":
        return _check_elicit(params, answer)
    if method == "sampling/createMessage":
        return _check_sampling(answer)
    if method == "roots/list":
        return _check_roots(answer)
    return None


def _check_elicit(params: Mapping[str, Any], answer: Mapping[str, Any]) -> str | None:
    action = answer.get("action")
    if action not in ELICIT_ACTIONS:
        return 'action must be "accept", "decline" or "cancel"'
    if action != "accept" or params.get("mode") == "url":
        return None  # content is only meaningful for an accepted form
    content = answer.get("content", {})
    if not isinstance(content, dict):
        return "content must be an object"
    schema = params.get("requestedSchema")
    if not isinstance(schema, Mapping):
        return None
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = schema.get("required")
    for name in required if isinstance(required, list) else []:
        if name not in content:
            return f"content.{name} is required by requestedSchema"
    for name, value in content.items():
        prop = props.get(name)
        if isinstance(prop, Mapping):
            reason = _check_value(prop, value)
            if reason is not None:
                return f"content.{name} {reason}"
    return None


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_value(prop: Mapping[str, Any], value: Any) -> str | None:
    """One value against a PrimitiveSchemaDefinition (client/elicitation "Requested Schema")."""
    kind = prop.get("type")
    if kind == "string":
        if not isinstance(value, str):
            return "must be a string"
        return _check_string(prop, value)
    if kind in ("number", "integer"):
        if not (_is_int(value) if kind == "integer" else _is_number(value)):
            return f"must be {'an integer' if kind == 'integer' else 'a number'}"
        low, high = prop.get("minimum"), prop.get("maximum")
        if _is_number(low) and value < low:
            return f"must be at least {low}"
        if _is_number(high) and value > high:
            return f"must be at most {high}"
        return None
    if kind == "boolean":
        return None if isinstance(value, bool) else "must be a boolean"
    if kind == "array":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "must be an array of strings"
        low, high = prop.get("minItems"), prop.get("maxItems")
        if _is_int(low) and len(value) < low:
            return f"must have at least {low} items"
        if _is_int(high) and len(value) > high:
            return f"must have at most {high} items"
        allowed = _allowed(prop.get("items"))
        if allowed is not None and any(v not in allowed for v in value):
            return "has an item outside the allowed values"
        return None
    return None


def _check_string(prop: Mapping[str, Any], value: str) -> str | None:
    low, high = prop.get("minLength"), prop.get("maxLength")
    if _is_int(low) and len(value) < low:
        return f"must be at least {low} characters"
    if _is_int(high) and len(value) > high:
        return f"must be at most {high} characters"
    allowed = _allowed(prop)
    if allowed is not None and value not in allowed:
        return "is not one of the allowed values"
    fmt = prop.get("format")
    if fmt == "email" and not _EMAIL.match(value):
        return "must be an email address"
    if fmt == "uri" and not (urlsplit(value).scheme and ":" in value):
        return "must be a URI"
    if fmt == "date" and not _parses(date.fromisoformat, value):
        return "must be a date (YYYY-MM-DD)"
    if fmt == "date-time" and not _parses(datetime.fromisoformat, value.replace("Z", "+00:00")):
        return "must be a date-time (RFC 3339)"
    return None


def _allowed(schema: Any) -> set[Any] | None:
    """The enum / oneOf-const / anyOf-const values a schema allows, if it restricts them."""
    if not isinstance(schema, Mapping):
        return None
    enum = schema.get("enum")
    if isinstance(enum, list):
        return set(enum)
    for choice in ("oneOf", "anyOf"):
        options = schema.get(choice)
        if isinstance(options, list):
            return {o.get("const") for o in options if isinstance(o, Mapping)}
    return None


def _parses(parse: Any, value: str) -> bool:
    try:
        parse(value)
    except ValueError:
        return False
    return True


def _check_sampling(answer: Mapping[str, Any]) -> str | None:
    if answer.get("role") not in ("user", "assistant"):
        return 'role must be "assistant" (or "user")'
    if not isinstance(answer.get("model"), str):
        return "model must be a string"
    content = answer.get("content")
    blocks = content if isinstance(content, list) else [content]
    if not blocks or not all(
        isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in blocks
    ):
        return "content must be a content block (or a non-empty list of them)"
    return None


def _check_roots(answer: Mapping[str, Any]) -> str | None:
    roots = answer.get("roots")
    if not isinstance(roots, list):
        return "roots must be an array"
    for n, root in enumerate(roots):
        if not isinstance(root, Mapping) or not isinstance(root.get("uri"), str):
            return f"roots[{n}] must be an object with a uri"
        if not root["uri"].startswith("file://"):
            return f"roots[{n}].uri must be a file:// URI"
        if "name" in root and not isinstance(root["name"], str):
            return f"roots[{n}].name must be a string"
    return None
