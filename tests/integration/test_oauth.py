"""Authorization passes through: an OAuth-protected legacy server behind the gateway.

The upstream is tests/fixtures/oauth_server.py, the official Python SDK mcp 1.x
as an OAuth resource server (FastMCP `token_verifier` + `AuthSettings`), run as
a real process. Two gateways sit in front of it: one directly (challenges and
metadata name the upstream's own origin), one through a recording proxy that
shows what reached the upstream (sessions, tokens, how many initializes).

Spec: 2025-06-18 basic/authorization "Error Handling" (401 for a missing or
invalid token, 403 for insufficient scope) and "Authorization Server Location"
(WWW-Authenticate with resource_metadata, RFC 9728 section 5.1); 2026-07-28
basic/authorization/authorization-server-discovery (clients use
resource_metadata from the header, else the well-known URIs at the path of the
MCP endpoint, then the root).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.recording_proxy import RecordingProxy
from tests.schema import SPEC, check_modern_answer, check_modern_error

FIXTURE = procs.ROOT / "tests" / "fixtures" / "oauth_server.py"
ISSUER = "https://auth.example.test/"


@dataclass
class Setup:
    upstream: str  # the fixture's MCP URL
    gateway: str  # base URL of the gateway in front of the fixture
    proxied_gateway: str  # base URL of the gateway in front of the proxy
    back: RecordingProxy  # proxied gateway -> fixture
    gateway_log: Path


@pytest.fixture(scope="module")
def setup(logs_dir: Path) -> Iterator[Setup]:
    port = procs.free_port()
    argv = [str(procs.require_peer(procs.LEGACY_PY)), str(FIXTURE), "--port", str(port)]
    upstream = f"http://127.0.0.1:{port}/mcp"
    gateway_log = logs_dir / "gateway-oauth.log"
    with (
        procs.running(argv, upstream, log_path=logs_dir / "oauth-server.log"),
        procs.gateway(upstream, procs.free_port(), log_path=gateway_log) as gateway,
        RecordingProxy(upstream) as back,
        procs.gateway(
            back.url, procs.free_port(), log_path=logs_dir / "gateway-oauth-proxied.log"
        ) as proxied,
    ):
        yield Setup(upstream, gateway, proxied, back, gateway_log)


def call(
    base: str, tool: str, authorization: str | None, rid: Any = 1
) -> tuple[httpx.Response, dict[str, Any]]:
    message = wire.body("tools/call", {"name": tool, "arguments": {}}, rid=rid)
    headers = wire.headers_for(message)
    if authorization is not None:
        headers["authorization"] = authorization
    with httpx.Client(timeout=30.0) as client:
        response = wire.post(client, base + "/mcp", message, headers)
    return response, wire.answer_messages(response)[-1]


def gateway_metadata_url(base: str) -> str:
    return base + "/.well-known/oauth-protected-resource/mcp"


def test_readyz_counts_a_protected_upstream_as_ready(setup: Setup) -> None:
    # First in this module: nothing has reached the upstream yet, so /readyz
    # probes, without credentials. The 401 is an answer: the upstream is up.
    response = httpx.get(setup.gateway + "/readyz", timeout=30.0)
    assert response.status_code == 200, response.text
    upstream = response.json()["upstream"]
    assert upstream["authorization_required"] == 401
    assert upstream["source"] == "probe"


def test_no_token_gets_the_upstreams_401_pointing_at_the_gateway(setup: Setup) -> None:
    response, answer = call(setup.gateway, "whoami", None, rid=11)
    # Before this gateway relayed it, the upstream's 401 became a 502.
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    # The upstream's challenge, its error kept, its metadata URL now the gateway's.
    assert challenge.startswith("Bearer ")
    assert 'error="invalid_token"' in challenge
    assert f'resource_metadata="{gateway_metadata_url(setup.gateway)}"' in challenge
    assert setup.upstream.rsplit("/", 1)[0] not in challenge
    check_modern_error(SPEC, answer)
    assert answer["id"] == 11
    assert answer["error"]["data"] == {"status": 401, "error": "invalid_token"}
    assert "WWW-Authenticate" in answer["error"]["message"]
    line = wire.wait_for_log(setup.gateway_log, response.request.headers["x-request-id"], "call")
    assert line["status"] == 401 and line["outcome"] == "upstream_401"


def test_401_to_a_client_that_accepts_only_sse_keeps_its_challenge(setup: Setup) -> None:
    # Nothing was sent before the refusal, so the SSE form carries the same
    # status and WWW-Authenticate as the JSON form.
    message = wire.body("tools/call", {"name": "whoami", "arguments": {}}, rid=12)
    headers = {**wire.headers_for(message), "accept": "text/event-stream"}
    with httpx.Client(timeout=30.0) as client:
        response = wire.post(client, setup.gateway + "/mcp", message, headers)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("text/event-stream")
    challenge = response.headers["www-authenticate"]
    assert f'resource_metadata="{gateway_metadata_url(setup.gateway)}"' in challenge
    answer = wire.answer_messages(response)[-1]
    check_modern_error(SPEC, answer)
    assert answer["id"] == 12


@pytest.mark.parametrize("suffix", ["/mcp", ""])
def test_gateway_serves_the_protected_resource_metadata(setup: Setup, suffix: str) -> None:
    with httpx.Client(timeout=30.0) as client:
        response = client.get(setup.gateway + "/.well-known/oauth-protected-resource" + suffix)
        upstream = client.get(
            setup.upstream.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
        ).json()
    assert response.status_code == 200
    document = response.json()
    # RFC 9728 section 3.3: `resource` MUST be the URL the client talks to.
    assert document["resource"] == setup.gateway + "/mcp"
    assert document["authorization_servers"] == upstream["authorization_servers"] == [ISSUER]
    assert document["scopes_supported"] == upstream["scopes_supported"] == ["mcp:tools"]


def test_metadata_refuses_a_host_that_is_not_allowed(setup: Setup) -> None:
    with httpx.Client(timeout=30.0) as client:
        response = client.get(gateway_metadata_url(setup.gateway), headers={"host": "evil.example"})
        unknown = client.get(setup.gateway + "/.well-known/oauth-protected-resource/other")
    assert response.status_code == 403
    assert "evil.example" not in response.headers.get("www-authenticate", "")
    assert unknown.status_code == 404


def test_right_token_end_to_end_with_the_modern_sdk_client(setup: Setup) -> None:
    document: Any = procs.run_modern_client(
        "whoami.py", setup.gateway + "/mcp", "Bearer alice-token"
    )
    assert document["protocolVersion"] == wire.MODERN
    for outcome in document["calls"]:
        assert outcome["result"]["content"][0]["text"] == "alice", outcome


def test_right_token_tools_call_answer_is_valid(setup: Setup) -> None:
    response, answer = call(setup.gateway, "whoami", "Bearer bob-token", rid="b")
    assert response.status_code == 200
    check_modern_answer(SPEC, "tools/call", answer)
    assert answer["result"]["content"][0]["text"] == "bob"


def test_wrong_token_gets_401(setup: Setup) -> None:
    response, answer = call(setup.gateway, "whoami", "Bearer not-a-token", rid=12)
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    check_modern_error(SPEC, answer)


def test_insufficient_scope_gets_403_with_its_challenge(setup: Setup) -> None:
    # 2026-07-28 basic/authorization "Runtime Insufficient Scope Errors": 403 with
    # error="insufficient_scope" in WWW-Authenticate.
    response, answer = call(setup.gateway, "whoami", "Bearer reader-token", rid=13)
    assert response.status_code == 403
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
    assert answer["error"]["data"] == {"status": 403, "error": "insufficient_scope"}


def test_401_on_a_later_request_of_an_open_session(setup: Setup) -> None:
    first, answer = call(setup.gateway, "revoke_my_token", "Bearer revocable-token")
    assert first.status_code == 200, answer
    # Same credentials, same pooled session; the upstream now refuses the token.
    response, answer = call(setup.gateway, "whoami", "Bearer revocable-token", rid=14)
    assert response.status_code == 401
    assert (
        f'resource_metadata="{gateway_metadata_url(setup.gateway)}"'
        in (response.headers["www-authenticate"])
    )
    check_modern_error(SPEC, answer)


def test_401_is_not_retried(setup: Setup) -> None:
    mark = setup.back.mark()
    response, _ = call(setup.proxied_gateway, "whoami", None)
    assert response.status_code == 401
    initializes = [r for r in setup.back.since(mark) if r.method == "initialize"]
    assert len(initializes) == 1 and initializes[0].status == 401
    assert [r.method for r in setup.back.since(mark)] == ["initialize"]


def test_two_tokens_never_share_a_session(setup: Setup) -> None:
    mark = setup.back.mark()
    for token, who in [("alice-token", "alice"), ("bob-token", "bob")] * 2:
        response, answer = call(setup.proxied_gateway, "whoami", f"Bearer {token}")
        assert response.status_code == 200
        assert answer["result"]["content"][0]["text"] == who
    sessions: dict[str, set[str]] = {}
    for record in setup.back.since(mark):
        session = record.session_id or record.response_headers.get("mcp-session-id")
        if session is not None:
            sessions.setdefault(record.headers.get("authorization", "-"), set()).add(session)
    assert set(sessions) == {"Bearer alice-token", "Bearer bob-token"}
    assert not sessions["Bearer alice-token"] & sessions["Bearer bob-token"]


def test_401_reaches_a_caller_served_by_the_mrtr_bridge(setup: Setup) -> None:
    # A caller that declares an input capability takes the bridge's lane path
    # (its own upstream session); the upstream's refusal still reaches it as 401.
    message = wire.body(
        "tools/call",
        {"name": "whoami", "arguments": {}},
        rid=15,
        meta={wire.META_CAPABILITIES: {"elicitation": {}}},
    )
    with httpx.Client(timeout=30.0) as client:
        response = wire.post(client, setup.gateway + "/mcp", message, wire.headers_for(message))
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    check_modern_error(SPEC, wire.answer_messages(response)[-1])


def test_public_url_names_the_resource_whatever_the_host(setup: Setup, logs_dir: Path) -> None:
    public = "https://mcp.example.com/tools/mcp"
    metadata = "https://mcp.example.com/.well-known/oauth-protected-resource/tools/mcp"
    env = {"MCP_SHIM_PUBLIC_URL": public}
    with procs.gateway(
        setup.upstream, procs.free_port(), env, log_path=logs_dir / "gateway-oauth-public.log"
    ) as base:
        response, _ = call(base, "whoami", None)
        assert response.status_code == 401
        assert f'resource_metadata="{metadata}"' in response.headers["www-authenticate"]
        with httpx.Client(timeout=30.0) as client:
            # The public URL's own path form (a reverse proxy maps it here), and ours.
            for suffix in ("/tools/mcp", "/mcp", ""):
                served = client.get(base + "/.well-known/oauth-protected-resource" + suffix)
                assert served.status_code == 200, suffix
                assert served.json()["resource"] == public
