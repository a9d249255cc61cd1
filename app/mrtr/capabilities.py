"""Which client capability a legacy server's request needs, and whether the caller has it.

2026-07-28 basic/index: a server MUST NOT rely on capabilities the client has
not declared; if processing a request requires one, it MUST answer -32021
MissingRequiredClientCapability with `data.requiredCapabilities`.
basic/patterns/mrtr: `inputRequests` MUST NOT carry a request the client has
not declared support for. client/elicitation: an empty `elicitation` object
means form mode only; URL mode needs `elicitation.url`. client/sampling:
tool use needs `sampling.tools`.

Pure: capabilities are the caller's, in 2026-07-28 form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

INPUT_CAPABILITIES: Final = ("elicitation", "sampling", "roots")
URL_ELICITATION_REQUIRED: Final = -32042  # 2025-11-25 client/elicitation "Error Handling"

Capabilities = dict[str, Any]


def declares_input(declared: Mapping[str, Any]) -> bool:
    """Whether the caller can receive any kind of input request at all."""
    return any(isinstance(declared.get(name), dict) for name in INPUT_CAPABILITIES)


def _elicitation_modes(declared: Mapping[str, Any]) -> set[str] | None:
    elicitation = declared.get("elicitation")
    if not isinstance(elicitation, dict):
        return None
    modes = {m for m in ("form", "url") if isinstance(elicitation.get(m), dict)}
    return modes or {"form"}  # "an empty capabilities object is equivalent to form"


def missing_for(method: Any, params: Any, declared: Mapping[str, Any]) -> Capabilities | None:
    """What the caller lacks to receive this request (requiredCapabilities form), or None."""
    params = params if isinstance(params, Mapping) else {}
    if method == "elicitation/create":
        mode = "url" if params.get("mode") == "url" else "form"
        modes = _elicitation_modes(declared)
        if modes is None:
            return {"elicitation": {"url": {}}} if mode == "url" else {"elicitation": {}}
        return None if mode in modes else {"elicitation": {mode: {}}}
    if method == "sampling/createMessage":
        sampling = declared.get("sampling")
        if not isinstance(sampling, dict):
            return {"sampling": {"tools": {}}} if _uses_tools(params) else {"sampling": {}}
        if _uses_tools(params) and not isinstance(sampling.get("tools"), dict):
            return {"sampling": {"tools": {}}}
        return None
    if method == "roots/list":
        return None if isinstance(declared.get("roots"), dict) else {"roots": {}}
    return None


def _uses_tools(params: Mapping[str, Any]) -> bool:
    return bool(params.get("tools")) or params.get("toolChoice") is not None


def url_elicitations(error: Any) -> list[dict[str, Any]] | None:
    """The URL-mode elicitations of a -32042 URLElicitationRequired error, or None."""
    if not isinstance(error, Mapping) or error.get("code") != URL_ELICITATION_REQUIRED:
        return None
    data = error.get("data")
    items = data.get("elicitations") if isinstance(data, Mapping) else None
    if not isinstance(items, list) or not items:
        return None
    found: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            return None
        found.append({**item, "mode": "url"})
    return found


# Every input capability `missing_for` can tell apart, in 2026-07-28 form.
# Not `sampling.context`: nothing checks it per caller, so it is not promised.
EVERY_INPUT: Final[Capabilities] = {
    "elicitation": {"form": {}, "url": {}},
    "sampling": {"tools": {}},
    "roots": {},
}


def with_every_input(declared: Mapping[str, Any]) -> Capabilities:
    """The caller's capabilities with every input capability declared
    (MCP_SHIM_UPSTREAM_CLIENT_CAPABILITIES=all): for legacy servers that check
    what the client declared before asking, and refuse with a generic error
    instead. What the caller itself lacks is still refused with -32021 when
    the server asks (`missing_for` reads the caller's own set)."""
    return {**declared, **EVERY_INPUT}
