"""Browsers on other origins (CORS, app/routes/cors.py) over real HTTP to a
gateway in front of the real legacy fixture (mcp 1.x): preflights of an
allowed Origin answered on every route a browser reaches, others refused as
their requests are; the CORS headers on answers (JSON, errors, 202s, event
streams); and the Allow of each route's 405. A real browser running the
official TypeScript client: tests/integration/test_browser.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.schema import SPEC, check_modern_error

pytestmark = pytest.mark.peers

ALLOWED = "https://app.example"  # in MCP_SHIM_ALLOWED_ORIGINS
FOREIGN = "https://evil.example"
EXPOSED = {"mcp-session-id", "mcp-protocol-version", "x-request-id", "www-authenticate"}
METADATA = "/.well-known/oauth-protected-resource/mcp"


@pytest.fixture(scope="module")
def gateway(
    legacy_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("cors") / "gateway.log"
    env = {"MCP_SHIM_ALLOWED_ORIGINS": f"{ALLOWED},https://other.example"}
    with procs.gateway(legacy_url, procs.free_port(), env, log) as base:
        yield base, log


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30.0) as c:
        yield c


def preflight(
    client: httpx.Client, url: str, origin: str, method: str = "POST", headers: str = ""
) -> httpx.Response:
    asked = {"origin": origin, "access-control-request-method": method}
    if headers:
        asked["access-control-request-headers"] = headers
    return client.options(url, headers=asked)


def check_cors(response: httpx.Response, origin: str) -> None:
    """The headers an answer to an allowed origin carries."""
    assert response.headers["access-control-allow-origin"] == origin
    assert "origin" in response.headers["vary"].lower()
    exposed = {
        h.strip().lower() for h in response.headers["access-control-expose-headers"].split(",")
    }
    assert EXPOSED | {"retry-after"} <= exposed
    # No credentials mode: the gateway authenticates nothing by cookie.
    assert "access-control-allow-credentials" not in response.headers


def check_no_cors(response: httpx.Response) -> None:
    assert not [name for name in response.headers if name.startswith("access-control-")]


# ---------------------------------------------------------------------------
# Preflights
# ---------------------------------------------------------------------------

ROUTES = [
    ("/mcp", "GET, POST, DELETE, OPTIONS"),
    ("/sse", "GET, OPTIONS"),
    ("/messages", "POST, OPTIONS"),
    (METADATA, "GET, HEAD, OPTIONS"),
]


@pytest.mark.parametrize(("path", "methods"), ROUTES)
@pytest.mark.parametrize("origin", [ALLOWED, "http://localhost:5173"])
def test_preflight_of_an_allowed_origin_is_answered(
    path: str, methods: str, origin: str, client: httpx.Client, gateway: tuple[str, Path]
) -> None:
    base, _ = gateway
    # What the official TypeScript client's fetch asks (lower case, sorted),
    # a tool's parameter header, and one the gateway does not take.
    asked = "accept,authorization,content-type,mcp-method,mcp-name,mcp-param-region,"
    asked += "mcp-protocol-version,mcp-session-id,x-custom"
    response = preflight(client, base + path, origin, headers=asked)
    assert response.status_code == 204, response.text
    check_cors(response, origin)
    assert response.headers["access-control-allow-methods"] == methods
    allowed = response.headers["access-control-allow-headers"].split(", ")
    assert allowed == asked.split(",")[:-1]  # x-custom left out: the browser refuses it
    assert response.headers["access-control-max-age"] == "600"
    assert response.content == b""


def test_preflight_of_another_origin_is_refused_as_its_post(
    client: httpx.Client, gateway: tuple[str, Path]
) -> None:
    base, log = gateway
    request_id = wire.new_request_id()
    refused = client.options(
        base + "/mcp",
        headers={
            "origin": FOREIGN,
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type",
            "x-request-id": request_id,
        },
    )
    message = wire.body("server/discover")
    post = wire.post(client, base + "/mcp", message, wire.headers_for(message, origin=FOREIGN))
    for response in (refused, post):
        assert response.status_code == 403
        check_no_cors(response)
        check_modern_error(SPEC, response.json())
        assert FOREIGN in response.json()["error"]["message"]
    assert refused.json() == post.json()
    line = wire.wait_for_log(log, request_id, "request_refused")
    assert line["reason"] == "host_or_origin" and line["status"] == 403


def test_preflight_asking_private_network_access(
    client: httpx.Client, gateway: tuple[str, Path]
) -> None:
    base, _ = gateway
    asked = {
        "origin": ALLOWED,
        "access-control-request-method": "POST",
        "access-control-request-private-network": "true",
    }
    response = client.options(base + "/mcp", headers=asked)
    assert response.status_code == 204
    assert response.headers["access-control-allow-private-network"] == "true"


def test_plain_options_lists_the_methods(client: httpx.Client, gateway: tuple[str, Path]) -> None:
    base, _ = gateway
    for path, methods in ROUTES:
        response = client.options(base + path)
        assert response.status_code == 204, path
        assert response.headers["allow"] == methods
        check_no_cors(response)


# ---------------------------------------------------------------------------
# Answers
# ---------------------------------------------------------------------------


def test_answers_to_an_allowed_origin_carry_cors_headers(
    client: httpx.Client, gateway: tuple[str, Path]
) -> None:
    base, _ = gateway
    call = wire.body("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    answered = wire.post(client, base + "/mcp", call, wire.headers_for(call, origin=ALLOWED))
    assert answered.status_code == 200, answered.text
    check_cors(answered, ALLOWED)
    assert wire.answer_messages(answered)[0]["result"]["content"][0]["text"] == "hi"
    # An error, and a notification's 202.
    bad = wire.body("tools/list", meta={wire.META_VERSION: "2099-01-01"})
    error = wire.post(client, base + "/mcp", bad, wire.headers_for(bad, origin=ALLOWED))
    assert error.status_code == 400
    check_cors(error, ALLOWED)
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    accepted = wire.post(
        client, base + "/mcp", note, wire.headers_for(note, origin="http://127.0.0.1:8080")
    )
    assert accepted.status_code == 202
    check_cors(accepted, "http://127.0.0.1:8080")


def test_a_legacy_session_answers_carry_cors_headers(
    client: httpx.Client, gateway: tuple[str, Path]
) -> None:
    """The session a browser's legacy client holds: its id readable (exposed),
    its event stream and its end answered with the CORS headers too."""
    base, _ = gateway
    origin = {"origin": ALLOWED}
    init = wire.legacy_initialize()
    headers = {"content-type": "application/json", "accept": wire.ACCEPT_BOTH, **origin}
    opened = wire.post(client, base + "/mcp", init, headers)
    assert opened.status_code == 200, opened.text
    check_cors(opened, ALLOWED)
    session = {"mcp-session-id": opened.headers["mcp-session-id"], **origin}
    with client.stream(
        "GET", base + "/mcp", headers={**session, "accept": "text/event-stream"}
    ) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        check_cors(stream, ALLOWED)
    ended = client.delete(base + "/mcp", headers=session)
    assert ended.status_code in (200, 204), ended.text
    check_cors(ended, ALLOWED)


def test_http_sse_stream_and_messages_carry_cors_headers(
    client: httpx.Client, gateway: tuple[str, Path]
) -> None:
    base, _ = gateway
    with client.stream(
        "GET", base + "/sse", headers={"origin": ALLOWED, "accept": "text/event-stream"}
    ) as stream:
        assert stream.status_code == 200
        check_cors(stream, ALLOWED)
        lines = stream.iter_lines()
        assert next(lines) == "event: endpoint"
        data = next(line for line in lines if line.startswith("data: "))
        endpoint = base + data.removeprefix("data: ")
        init = wire.legacy_initialize("2024-11-05")
        posted = client.post(endpoint, json=init, headers={"origin": ALLOWED})
        assert posted.status_code == 202, posted.text
        check_cors(posted, ALLOWED)


def test_answers_without_origin_carry_no_cors_headers(
    client: httpx.Client, gateway: tuple[str, Path]
) -> None:
    base, _ = gateway
    message = wire.body("server/discover")
    response = wire.post(client, base + "/mcp", message, wire.headers_for(message))
    assert response.status_code == 200
    check_no_cors(response)
    assert "vary" not in response.headers


def test_metadata_answer_to_an_allowed_origin_carries_cors_headers(
    client: httpx.Client, gateway: tuple[str, Path]
) -> None:
    base, _ = gateway
    response = client.get(base + METADATA, headers={"origin": ALLOWED})
    assert response.status_code in (200, 404), response.text
    check_cors(response, ALLOWED)


# ---------------------------------------------------------------------------
# 405: each route's own Allow
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/mcp", "GET, POST, DELETE, OPTIONS"),  # no legacy session
        ("DELETE", "/mcp", "GET, POST, DELETE, OPTIONS"),
        ("PUT", "/mcp", "GET, POST, DELETE, OPTIONS"),
        ("PATCH", "/mcp", "GET, POST, DELETE, OPTIONS"),
        ("HEAD", "/mcp", "GET, POST, DELETE, OPTIONS"),
        ("POST", "/sse", "GET, OPTIONS"),
        ("GET", "/messages", "POST, OPTIONS"),
        ("DELETE", METADATA, "GET, HEAD, OPTIONS"),
    ],
)
def test_405_names_the_methods_of_its_route(
    method: str, path: str, allow: str, client: httpx.Client, gateway: tuple[str, Path]
) -> None:
    base, log = gateway
    request_id = wire.new_request_id()
    response = client.request(method, base + path, headers={"x-request-id": request_id})
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    line = wire.wait_for_log(log, request_id, "request_refused")
    assert line["reason"] == "method_not_allowed" and line["http_method"] == method
