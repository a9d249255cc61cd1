"""Raw 2026-07-28 requests for the integration tests that talk HTTP themselves.

What a conforming modern client puts on the wire (streamable-http "Standard
Request Headers" and basic/index "_meta"), built by hand so a test can break
exactly one rule; plus reading SSE answers and the gateway's JSON log.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.waiting import until_sync

MODERN = "2026-07-28"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
NAME_FIELD = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
ACCEPT_BOTH = "application/json, text/event-stream"


def sentinel(value: str) -> str:
    """The Base64 sentinel form of a mirrored header value."""
    return "=?base64?" + base64.b64encode(value.encode()).decode() + "?="


def new_request_id() -> str:
    """A value for X-Request-Id: the gateway logs it, so a test can find its line."""
    return "t-" + uuid.uuid4().hex[:20]


def body(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    rid: Any = 1,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A 2026-07-28 request; `meta` entries are added to (None values removed from) _meta."""
    full_meta: dict[str, Any] = {
        META_VERSION: MODERN,
        META_CAPABILITIES: {},
        META_CLIENT_INFO: {"name": "mcp-shim-tests", "version": "0"},
    }
    for key, value in (meta or {}).items():
        if value is None:
            full_meta.pop(key, None)
        else:
            full_meta[key] = value
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": method,
        "params": {**(params or {}), "_meta": full_meta},
    }


def legacy_initialize(
    version: str = "2025-11-25", capabilities: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A legacy client's `initialize` (id 0), as a hand-written client sends it."""
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }


def headers_for(message: dict[str, Any], **extra: str | None) -> dict[str, str]:
    """The headers a conforming client sends with `message`; `extra` overrides (None: drop).

    Keyword names use underscores for dashes: ``mcp_name="x"`` sets ``mcp-name``.
    """
    params = message.get("params") or {}
    meta = params.get("_meta") or {}
    headers: dict[str, str] = {
        "content-type": "application/json",
        "accept": ACCEPT_BOTH,
        "mcp-protocol-version": str(meta.get(META_VERSION, MODERN)),
        "mcp-method": message["method"],
        "x-request-id": new_request_id(),
    }
    field = NAME_FIELD.get(message["method"])
    if field is not None and isinstance(params.get(field), str):
        headers["mcp-name"] = params[field]
    for key, value in extra.items():
        name = key.replace("_", "-").lower()
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    return headers


def post(client: httpx.Client, url: str, message: Any, headers: dict[str, str]) -> httpx.Response:
    return client.post(url, content=json.dumps(message).encode(), headers=headers)


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body, in order (one per `data:` event)."""
    messages: list[dict[str, Any]] = []
    for event in text.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip() for line in event.split("\n") if line.startswith("data:")]
        if data:
            messages.append(json.loads("\n".join(data)))
    return messages


def answer_messages(response: httpx.Response) -> list[dict[str, Any]]:
    """Every message of a POST's answer: one JSON body, or the SSE events."""
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "text/event-stream":
        return sse_messages(response.text)
    assert kind == "application/json", f"unexpected content type {kind!r}"
    return [response.json()]


# ---------------------------------------------------------------------------
# The gateway's log
# ---------------------------------------------------------------------------


def log_lines(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        raw = raw.strip()
        if raw.startswith("{"):
            try:
                yield json.loads(raw)
            except json.JSONDecodeError:
                continue


def wait_for_log(
    path: Path, request_id: str, event: str | None = None, timeout: float = 5.0
) -> dict[str, Any]:
    """The gateway's JSON log line for one request (by X-Request-Id), waiting for it."""

    def found() -> dict[str, Any] | None:
        for line in log_lines(path):
            if line.get("request_id") == request_id and (event is None or line["event"] == event):
                return line
        return None

    return until_sync(
        found, timeout_s=timeout, what=f"a log line for request {request_id} ({event}) in {path}"
    )
