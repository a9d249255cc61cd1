"""Every rejection of the modern front, over real HTTP to the gateway process.

Issue 2 "Modern front" and docs/notes/conformance-scenarios.md section 3.1:
each case breaks one rule of a request that is otherwise what a conforming
2026-07-28 client sends, and checks the HTTP status, the JSON-RPC code, the
id (echoed when the gateway could read it, omitted when not), that the
message tells a person what to change, that the body satisfies the 2026-07-28
schema, and that the gateway logged a line for it (found by X-Request-Id).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration import wire
from tests.schema import SPEC, check_modern_answer, check_modern_error

NO_ID = object()  # the response must not carry an id


@dataclass
class Case:
    name: str
    build: Callable[[], tuple[bytes, dict[str, str]]]
    status: int
    code: int
    rid: Any
    says: tuple[str, ...]  # substrings the error message must contain
    log_event: str = "request_rejected"
    data: Callable[[Any], None] | None = field(default=None)


def raw(message: Any, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return json.dumps(message).encode(), headers


def request(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    rid: Any = 7,
    meta: dict[str, Any] | None = None,
    **header_changes: str | None,
) -> Callable[[], tuple[bytes, dict[str, str]]]:
    def build() -> tuple[bytes, dict[str, str]]:
        message = wire.body(method, params, rid=rid, meta=meta)
        return raw(message, wire.headers_for(message, **header_changes))

    return build


def without_meta(rid: Any) -> Callable[[], tuple[bytes, dict[str, str]]]:
    def build() -> tuple[bytes, dict[str, str]]:
        message = {"jsonrpc": "2.0", "id": rid, "method": "tools/list", "params": {}}
        return raw(message, wire.headers_for(message))

    return build


def without_params(rid: Any) -> Callable[[], tuple[bytes, dict[str, str]]]:
    def build() -> tuple[bytes, dict[str, str]]:
        message = {"jsonrpc": "2.0", "id": rid, "method": "server/discover"}
        return raw(message, wire.headers_for(message))

    return build


def malformed() -> tuple[bytes, dict[str, str]]:
    message = wire.body("tools/list")
    return b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list",', wire.headers_for(message)


def batch() -> tuple[bytes, dict[str, str]]:
    first = wire.body("tools/list", rid=1)
    second = wire.body("prompts/list", rid=2)
    return raw([first, second], wire.headers_for(first))


def null_id() -> tuple[bytes, dict[str, str]]:
    message = wire.body("tools/list", rid=None)
    return raw(message, wire.headers_for(message))


def unsupported_data(data: Any) -> None:
    assert data["requested"] == "2099-01-01"
    assert "2026-07-28" in data["supported"]


ECHO_CALL = {"name": "echo", "arguments": {"text": "x"}}

CASES = [
    Case("malformed JSON", malformed, 400, -32700, NO_ID, ("not valid JSON",)),
    Case("batch", batch, 400, -32600, NO_ID, ("batch", "2025-06-18", "own POST")),
    Case("null id", null_id, 400, -32600, NO_ID, ("id must not be null",)),
    Case(
        "no _meta",
        without_meta("req-101"),
        400,
        -32602,
        "req-101",
        ("io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"),
    ),
    Case(
        "no params",
        without_params(102),
        400,
        -32602,
        102,
        ("io.modelcontextprotocol/protocolVersion",),
    ),
    Case(
        "no protocolVersion in _meta",
        request("tools/list", rid=103, meta={wire.META_VERSION: None}),
        400,
        -32602,
        103,
        ("params._meta['io.modelcontextprotocol/protocolVersion']",),
    ),
    Case(
        "no clientCapabilities in _meta",
        request("tools/list", rid="cap-104", meta={wire.META_CAPABILITIES: None}),
        400,
        -32602,
        "cap-104",
        ("params._meta['io.modelcontextprotocol/clientCapabilities']",),
    ),
    Case(
        "no MCP-Protocol-Version header",
        request("tools/list", rid=201, mcp_protocol_version=None),
        400,
        -32020,
        201,
        ("MCP-Protocol-Version header is missing",),
    ),
    Case(
        "MCP-Protocol-Version header differs from _meta",
        request("tools/list", rid=202, mcp_protocol_version="2025-11-25"),
        400,
        -32020,
        202,
        ("MCP-Protocol-Version", "'2025-11-25'", "'2026-07-28'"),
    ),
    Case(
        "unsupported version",
        request("tools/list", rid=301, meta={wire.META_VERSION: "2099-01-01"}),
        400,
        -32022,
        301,
        ("'2099-01-01'", "2026-07-28"),
        data=unsupported_data,
    ),
    Case(
        "no Mcp-Method header",
        request("tools/list", rid=401, mcp_method=None),
        400,
        -32020,
        401,
        ("Mcp-Method header is missing",),
    ),
    Case(
        "Mcp-Method differs from the body",
        request("tools/list", rid=402, mcp_method="prompts/list"),
        400,
        -32020,
        402,
        ("Mcp-Method", "'prompts/list'", "'tools/list'"),
    ),
    Case(
        "no Mcp-Name header",
        request("tools/call", ECHO_CALL, rid=403, mcp_name=None),
        400,
        -32020,
        403,
        ("Mcp-Name header is missing",),
    ),
    Case(
        "Mcp-Name differs from the body",
        request("tools/call", ECHO_CALL, rid=404, mcp_name="slow_echo"),
        400,
        -32020,
        404,
        ("Mcp-Name", "'slow_echo'", "'echo'"),
    ),
    Case(
        "Base64 Mcp-Name decodes to another name",
        request("tools/call", ECHO_CALL, rid=405, mcp_name=wire.sentinel("slow_echo")),
        400,
        -32020,
        405,
        ("Mcp-Name", "'slow_echo'", "'echo'"),
    ),
    Case(
        "Base64 Mcp-Name that is not Base64",
        request("tools/call", ECHO_CALL, rid=406, mcp_name="=?base64?not*base64?="),
        400,
        -32020,
        406,
        ("Mcp-Name", "Base64"),
    ),
    Case(
        "Mcp-Name for resources/read differs from the uri",
        request("resources/read", {"uri": "test://static-text"}, rid=407, mcp_name="test://other"),
        400,
        -32020,
        407,
        ("'test://other'", "'test://static-text'"),
    ),
    Case(
        "Mcp-Param-Region missing for an x-mcp-header argument",
        request(
            "tools/call",
            {"name": "test_header_param", "arguments": {"region": "eu-west-1"}},
            rid=408,
        ),
        400,
        -32020,
        408,
        ("Mcp-Param-Region",),
        log_event="call",
    ),
    Case(
        "Mcp-Param-Region differs from the argument",
        request(
            "tools/call",
            {"name": "test_header_param", "arguments": {"region": "eu-west-1"}},
            rid=409,
            mcp_param_region="us-east-1",
        ),
        400,
        -32020,
        409,
        ("Mcp-Param-Region",),
        log_event="call",
    ),
    *(
        Case(
            f"{method} is not a 2026-07-28 method",
            request(method, rid=500 + n),
            404,
            -32601,
            500 + n,
            (repr(method), "not a 2026-07-28 method"),
        )
        for n, method in enumerate(
            [
                "initialize",
                "ping",
                "logging/setLevel",
                "resources/subscribe",
                "resources/unsubscribe",
                "unknown/method",
            ]
        )
    ),
    Case(
        "Origin not allowed",
        request("server/discover", origin="http://evil.example.com"),
        403,
        -32600,
        NO_ID,
        ("'http://evil.example.com'", "MCP_SHIM_ALLOWED_ORIGINS"),
        log_event="request_refused",
    ),
    Case(
        "Host not allowed",
        request("server/discover", host="evil.example.com"),
        403,
        -32600,
        NO_ID,
        ("'evil.example.com'", "MCP_SHIM_ALLOWED_HOSTS"),
        log_event="request_refused",
    ),
    Case(
        "DNS rebinding: Host and Origin both foreign",
        request("server/discover", host="evil.example.com", origin="http://evil.example.com"),
        403,
        -32600,
        NO_ID,
        ("not allowed",),
        log_event="request_refused",
    ),
    Case(
        "not application/json",
        request("tools/list", content_type="text/plain"),
        415,
        -32600,
        NO_ID,
        ("application/json",),
        log_event="request_refused",
    ),
]


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30.0) as c:
        yield c


def check_rejection(
    response: httpx.Response, case: Case, gateway_log: Path, request_id: str
) -> dict[str, Any]:
    assert response.status_code == case.status, response.text
    assert response.headers["content-type"].startswith("application/json")
    message = response.json()
    check_modern_error(SPEC, message)
    error = message["error"]
    assert error["code"] == case.code, message
    if case.rid is NO_ID:
        assert "id" not in message, message
    else:
        assert message["id"] == case.rid and type(message["id"]) is type(case.rid), message
    for words in case.says:
        # Header names are case-insensitive, so is this check.
        assert words.lower() in error["message"].lower(), f"{words!r} not in {error['message']!r}"
    if case.data is not None:
        case.data(error.get("data"))
    line = wire.wait_for_log(gateway_log, request_id, case.log_event)
    assert line["status"] == case.status, line
    if case.log_event == "request_rejected":
        assert line["code"] == case.code, line
    return line


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rejection(case: Case, client: httpx.Client, gateway_url: str, gateway_log: Path) -> None:
    content, headers = case.build()
    response = client.post(gateway_url + "/mcp", content=content, headers=headers)
    line = check_rejection(response, case, gateway_log, headers["x-request-id"])
    if case.log_event == "call":
        assert line["outcome"] == "rejected" and line["method"] == "tools/call", line


@pytest.mark.parametrize(
    ("host", "origin"),
    [("evil.example.com", None), ("127.0.0.1", "http://evil.example.com")],
    ids=["host", "origin"],
)
def test_a_refused_host_or_origin_is_named_in_the_log(
    client: httpx.Client, gateway_url: str, gateway_log: Path, host: str, origin: str | None
) -> None:
    # The operator reads from the line which name to add to the allowed list.
    content, headers = request("server/discover", host=host, origin=origin)()
    response = client.post(gateway_url + "/mcp", content=content, headers=headers)
    assert response.status_code == 403, response.text
    line = wire.wait_for_log(gateway_log, headers["x-request-id"], "request_refused")
    assert line["reason"] == "host_or_origin", line
    assert line["host"] == host, line
    assert line.get("origin") == origin, line


# ---------------------------------------------------------------------------
# Body size: declared and streamed
# ---------------------------------------------------------------------------

TOO_LARGE = Case(
    "body too large",
    malformed,
    413,
    -32600,
    NO_ID,
    ("too large", "MCP_SHIM_MAX_BODY_BYTES"),
    log_event="request_refused",
)
LIMIT = 4 * 1024 * 1024  # the gateway's default MCP_SHIM_MAX_BODY_BYTES


def oversized() -> tuple[bytes, dict[str, str]]:
    message = wire.body("tools/call", {"name": "echo", "arguments": {"text": "x" * (LIMIT + 1)}})
    return json.dumps(message).encode(), wire.headers_for(message)


def test_oversized_body_with_content_length(
    client: httpx.Client, gateway_url: str, gateway_log: Path
) -> None:
    content, headers = oversized()
    response = client.post(gateway_url + "/mcp", content=content, headers=headers)
    line = check_rejection(response, TOO_LARGE, gateway_log, headers["x-request-id"])
    assert line["event"] == "request_refused" and line["reason"] == "body_too_large"


def test_oversized_body_streamed_without_content_length(
    client: httpx.Client, gateway_url: str, gateway_log: Path
) -> None:
    content, headers = oversized()

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(content), 64 * 1024):
            yield content[start : start + 64 * 1024]

    try:
        response = client.post(gateway_url + "/mcp", content=chunks(), headers=headers)
    except httpx.HTTPError:
        # The gateway may answer and close before the client finished sending;
        # then only the log can tell what it decided.
        line = wire.wait_for_log(gateway_log, headers["x-request-id"], "request_refused")
        assert line["reason"] == "body_too_large" and line["status"] == 413
        return
    assert "content-length" not in response.request.headers
    line = check_rejection(response, TOO_LARGE, gateway_log, headers["x-request-id"])
    assert line["reason"] == "body_too_large"


def test_body_just_under_the_limit_is_served(client: httpx.Client, gateway_url: str) -> None:
    message = wire.body("tools/call", {"name": "echo", "arguments": {"text": "y" * 100_000}})
    response = wire.post(client, gateway_url + "/mcp", message, wire.headers_for(message))
    assert response.status_code == 200, response.text
    (answer,) = wire.answer_messages(response)
    assert answer["result"]["content"] == [{"type": "text", "text": "y" * 100_000}]


# ---------------------------------------------------------------------------
# GET and DELETE: 405 while the endpoint serves only modern clients
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_get_and_delete_answer_405(
    method: str, client: httpx.Client, gateway_url: str, gateway_log: Path
) -> None:
    request_id = wire.new_request_id()
    response = client.request(
        method,
        gateway_url + "/mcp",
        headers={"accept": "text/event-stream", "x-request-id": request_id},
    )
    assert response.status_code == 405
    # RFC 9110 requires the Allow header on a 405: the endpoint's methods (GET
    # and DELETE serve a legacy client's session).
    assert response.headers["allow"] == "GET, POST, DELETE, OPTIONS"
    line = wire.wait_for_log(gateway_log, request_id, "request_refused")
    assert line["status"] == 405 and line["http_method"] == method


# ---------------------------------------------------------------------------
# What must NOT be rejected
# ---------------------------------------------------------------------------


def test_base64_sentinel_that_matches_is_accepted(client: httpx.Client, gateway_url: str) -> None:
    message = wire.body("tools/call", {"name": "echo", "arguments": {"text": "b64"}}, rid=601)
    headers = wire.headers_for(message, mcp_name=wire.sentinel("echo"))
    response = wire.post(client, gateway_url + "/mcp", message, headers)
    assert response.status_code == 200, response.text
    (answer,) = wire.answer_messages(response)
    check_modern_answer(SPEC, "tools/call", answer)
    assert answer["id"] == 601
    assert answer["result"]["content"] == [{"type": "text", "text": "b64"}]


def test_loopback_origin_and_host_are_accepted(client: httpx.Client, gateway_url: str) -> None:
    port = gateway_url.rsplit(":", 1)[1]
    message = wire.body("server/discover", rid=602)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
        headers = wire.headers_for(message, host=host, origin=f"http://{host}")
        response = wire.post(client, gateway_url + "/mcp", message, headers)
        assert response.status_code == 200, (host, response.text)
        check_modern_answer(SPEC, "server/discover", wire.answer_messages(response)[0])


def test_notification_is_accepted_with_202(client: httpx.Client, gateway_url: str) -> None:
    message = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    # streamable-http "Protocol Version Header": "Every POST request to the MCP
    # endpoint MUST include an MCP-Protocol-Version header", notifications too.
    headers = {
        "content-type": "application/json",
        "accept": wire.ACCEPT_BOTH,
        "mcp-protocol-version": wire.MODERN,
        "mcp-method": "notifications/cancelled",
    }
    response = wire.post(client, gateway_url + "/mcp", message, headers)
    assert response.status_code == 202
    assert response.content == b""
    # Without it, the notification is refused (an error without id, "Sending Messages" 5).
    del headers["mcp-protocol-version"]
    refused = wire.post(client, gateway_url + "/mcp", message, headers)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == -32020 and "id" not in refused.json()
