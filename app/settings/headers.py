"""Fixed upstream headers: `MCP_SHIM_UPSTREAM_HEADERS`, and each server's
`headers` in the servers file, parsed and their secret files read.

A JSON object (or a TOML table) of header names to values; a value may be
`{"file": "/path"}`, the file's text with its trailing newline stripped, read
once at start (a secret mounted by Docker or Kubernetes stays out of the
environment, where `/proc/<pid>/environ` and `docker inspect` show it). The
values are secrets: an error names the header and the file, never quotes a
value; `mcp-shim config` shows the names only.

Refused: names the gateway writes itself on every request (the protocol's
`Mcp-*` headers, the body's framing, `Host`, `Accept`), whose fixed value
would break the exchange, and values an HTTP header cannot carry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from app.config import SettingsError

# Bounds: a header value longer than 8 KiB is refused by common servers
# (nginx's large_client_header_buffers, Node's 16 KiB for all headers).
MAX_HEADERS = 32
MAX_VALUE_CHARS = 8192
_EXAMPLE = '{"Authorization": "Bearer <token>", "X-Api-Key": {"file": "/run/secrets/api_key"}}'
# RFC 9110 token.
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Visible ASCII, space and tab: what every HTTP library sends as it is.
_VALUE = re.compile(r"^[\x20-\x7e\t]*$")
# Written by the gateway or its HTTP client on every request.
_GATEWAY_OWN = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
        "expect",
        "accept",
        "accept-encoding",
        "last-event-id",
        "traceparent",
        "tracestate",
    }
)


def fixed_headers(raw: object, where: str) -> dict[str, str]:
    """The headers in `raw` (JSON text, or a mapping already parsed from JSON
    or TOML), each `{"file": ...}` value read; `where` names the setting or
    the server in each error (`MCP_SHIM_UPSTREAM_HEADERS`, `servers file
    x.json, server "github": headers`). SettingsError, one line, otherwise."""
    if isinstance(raw, str):
        text = raw
        if not text.strip():
            return {}
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise SettingsError(f"{where} is not JSON ({_position(exc)}); {_fix(text)}") from None
    if not isinstance(raw, Mapping):
        raise SettingsError(
            f"{where} is a JSON {_kind(raw)}, not an object of header names and values; "
            f"e.g. {_EXAMPLE}"
        )
    if len(raw) > MAX_HEADERS:
        raise SettingsError(f"{where} names {len(raw)} headers; at most {MAX_HEADERS}")
    headers: dict[str, str] = {}
    seen: dict[str, str] = {}
    for name, value in raw.items():
        _check_name(str(name), where, seen)
        seen[str(name).lower()] = str(name)
        headers[str(name)] = _value(str(name), value, where)
    return headers


def has_authorization(headers: Mapping[str, str]) -> bool:
    return any(name.lower() == "authorization" for name in headers)


def _check_name(name: str, where: str, seen: Mapping[str, str]) -> None:
    if not _TOKEN.match(name):
        raise SettingsError(
            f"{where}: {name!r} is not a header name (letters, digits and -, no spaces or "
            f"colon); e.g. {_EXAMPLE}"
        )
    lower = name.lower()
    if lower in seen:
        raise SettingsError(f"{where}: {name!r} and {seen[lower]!r} are the same header")
    if lower in _GATEWAY_OWN or lower.startswith("mcp-"):
        raise SettingsError(
            f"{where}: {name!r} is written by the gateway on each request (the protocol's "
            "Mcp-* headers, the body's framing, Host, Accept); it cannot be fixed"
        )


def _value(name: str, value: object, where: str) -> str:
    if isinstance(value, Mapping):
        path = value.get("file")
        if set(value) != {"file"} or not isinstance(path, str) or not path:
            raise SettingsError(
                f'{where}: the value of {name!r} is an object other than {{"file": "/path"}}; '
                f'write {{"{name}": {{"file": "/run/secrets/token"}}}} or a string'
            )
        text = _read_secret(name, path, where)
        what = f"the file {path!r} of {name!r}"
    elif isinstance(value, str):
        text, what = value, f"the value of {name!r}"
    else:
        raise SettingsError(
            f"{where}: the value of {name!r} is a {_kind(value)}; write a string, "
            f'{{"{name}": "..."}}, or a file, {{"{name}": {{"file": "/path"}}}}'
        )
    if not text:
        raise SettingsError(f"{where}: {what} is empty; remove the header or give it a value")
    if len(text) > MAX_VALUE_CHARS:
        raise SettingsError(f"{where}: {what} is longer than {MAX_VALUE_CHARS} characters")
    if not _VALUE.match(text):
        raise SettingsError(
            f"{where}: {what} holds a line break, a control character or a character "
            "beyond ASCII, which a header value cannot carry"
        )
    return text


def _read_secret(name: str, path: str, where: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_VALUE_CHARS + 2)
    except OSError as exc:
        raise SettingsError(
            f"{where}: the file {path!r} of {name!r} cannot be read: {exc.strerror}"
        ) from None
    except UnicodeDecodeError:
        raise SettingsError(f"{where}: the file {path!r} of {name!r} is not UTF-8 text") from None
    # The newline an editor or `echo` leaves at the end is no part of the secret.
    return text.removesuffix("\n").removesuffix("\r")


def _fix(text: str) -> str:
    """The corrected example for text that is no JSON: a header line
    (`Authorization: Bearer x`) becomes an object of that name; its value,
    a secret, is never quoted."""
    line = re.match(r"^\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)\s*[:=]", text)
    if line is None:
        return f"write a JSON object of names and values, e.g. {_EXAMPLE}"
    name = line.group(1)
    return (
        f"it reads like a header line {name + ':'!r} (value not shown); write it as a JSON "
        f'object, {{"{name}": "<value>"}}, or with the value in a file, '
        f'{{"{name}": {{"file": "/run/secrets/{name.lower()}"}}}}'
    )


def _position(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
    return "cannot be parsed"


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "null" if value is None else type(value).__name__
