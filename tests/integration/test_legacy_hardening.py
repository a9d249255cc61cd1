"""Issue 7's protections on the legacy front: what the modern front refuses, a
legacy client (2024-11-05 .. 2025-11-25, Streamable HTTP or HTTP+SSE) gets
refused too, through the gateway process in front of the real legacy fixture
(mcp 1.x) or the OAuth fixture, every answer validated against the schema of
the client's revision.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog

from tests import procs
from tests.integration import wire
from tests.integration.test_hardening import nested
from tests.integration.test_legacy_clients import (
    check_legacy,
    events,
    headers,
    initialize,
    messages,
)

pytestmark = pytest.mark.peers

SECRET = "Bearer sk-live-TOPSECRET\xe9"
OAUTH_FIXTURE = procs.ROOT / "tests" / "fixtures" / "oauth_server.py"


def init_message(version: str, rid: Any = 0, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, **params},
    }


def refused(
    response: httpx.Response, status: int, code: int, rid: Any, version: str
) -> dict[str, Any]:
    """A JSON-RPC error, valid for the client's revision, with this status, code and id."""
    assert response.status_code == status, response.text[:300]
    assert response.headers["content-type"].startswith("application/json"), response.text[:300]
    body: dict[str, Any] = response.json()
    check_legacy(version, body, None)
    assert body["error"]["code"] == code, body
    assert body["id"] == rid, body
    return body


def raw(message: Any) -> bytes:
    # json, not orjson: orjson cannot write the deep bodies these tests send.
    return json.dumps(message).encode()


@contextmanager
def gateway(upstream: str, log: Path) -> Iterator[str]:
    with procs.gateway(upstream, procs.free_port(), log_path=log) as base:
        yield base


@contextmanager
def sse_channel(base: str, authorization: str = "Bearer sse") -> Iterator[tuple[str, Any]]:
    """A 2024-11-05 HTTP+SSE channel: its POST URL and an iterator of its events' text."""
    with (
        httpx.Client(timeout=15.0) as streamer,
        streamer.stream(
            "GET",
            base + "/sse",
            headers={"accept": "text/event-stream", "authorization": authorization},
        ) as stream,
    ):
        assert stream.status_code == 200, stream.read()
        chunks = stream.iter_text()
        buffer = ""
        for chunk in chunks:
            buffer += chunk
            if "\n\n" in buffer:
                break
        endpoint = buffer.split("\n\n", 1)[0].split("\n")[1].removeprefix("data: ")
        yield base + endpoint, chunks


def next_events(chunks: Any, count: int) -> list[dict[str, Any]]:
    buffer = ""
    # Keep-alive comments would reset the client's read timeout for ever.
    deadline = time.monotonic() + 20
    for chunk in chunks:
        buffer += chunk
        if buffer.endswith("\n\n") and len(events(buffer)) >= count:
            break
        assert time.monotonic() < deadline, f"{count} events did not come: {buffer[:300]!r}"
    return events(buffer)


# ---------------------------------------------------------------------------
# Depth (issue 7 defect 2): -32600 and 400 with the id, never a 500
# ---------------------------------------------------------------------------


def test_deep_legacy_messages_are_refused_at_the_front(gateway_url: str) -> None:
    url = gateway_url + "/mcp"
    plain = headers()
    with httpx.Client(timeout=15.0) as client:
        deep_init = init_message("2025-11-25", "deep-init", clientInfo=nested(300))
        response = client.post(url, content=raw(deep_init), headers=plain)
        body = refused(response, 400, -32600, "deep-init", "2025-11-25")
        assert "MCP_SHIM_MAX_JSON_DEPTH" in body["error"]["message"]

        session, _ = initialize(client, url, "2025-03-26")
        on_session = headers(session, "2025-03-26")
        deep_call = {
            "jsonrpc": "2.0",
            "id": "deep",
            "method": "tools/call",
            "params": {"name": "echo", "arguments": nested(300)},
        }
        response = client.post(url, content=raw(deep_call), headers=on_session)
        refused(response, 400, -32600, "deep", "2025-03-26")
        # A batch member (2025-03-26 batching): the batch has no id of its own.
        batch = [{"jsonrpc": "2.0", "id": 7, "method": "ping"}, deep_call]
        response = client.post(url, content=raw(batch), headers=on_session)
        refused(response, 400, -32600, "server-error", "2025-03-26")
        # Deeper than the parser reads: a parse error.
        deepest = b'{"jsonrpc": "2.0", "id": 3, "p": ' + b"[" * 2000 + b"]" * 2000 + b"}"
        response = client.post(url, content=deepest, headers=on_session)
        refused(response, 400, -32700, "server-error", "2025-03-26")
        # Within the limit the session serves on.
        fine = {**deep_call, "id": "fine", "params": {"name": "echo", "arguments": {"text": "ok"}}}
        fine["params"]["arguments"]["deep"] = nested(50)
        (answer,) = messages(client.post(url, json=fine, headers=on_session))
        assert answer["result"]["content"][0]["text"] == "ok"
        client.delete(url, headers=on_session)

    # The HTTP+SSE transport's POST /messages.
    with sse_channel(gateway_url) as (endpoint, chunks), httpx.Client(timeout=15.0) as poster:
        auth = {"authorization": "Bearer sse"}
        response = poster.post(endpoint, content=raw(deep_init), headers=auth)
        refused(response, 400, -32600, "deep-init", "2024-11-05")
        init = init_message("2024-11-05", 1)
        assert poster.post(endpoint, json=init, headers=auth).status_code == 202
        (answer,) = next_events(chunks, 1)
        check_legacy("2024-11-05", answer, "initialize")


# ---------------------------------------------------------------------------
# Header values (issue 7 defect 3): 400 -32600, the value never logged
# ---------------------------------------------------------------------------


def test_non_ascii_authorization_is_refused_on_every_legacy_route(
    legacy_url: str, logs_dir: Path
) -> None:
    log = logs_dir / "legacy-hardening-auth.log"
    bad = SECRET.encode("latin-1")
    with gateway(legacy_url, log) as base, httpx.Client(timeout=15.0) as client:
        url = base + "/mcp"
        response = client.post(
            url, json=init_message("2025-06-18"), headers={**headers(), "authorization": bad}
        )
        body = refused(response, 400, -32600, 0, "2025-06-18")
        assert "Authorization" in body["error"]["message"]

        session, _ = initialize(client, url, "2025-06-18", authorization="Bearer fine")
        on_session: dict[str, Any] = {**headers(session, "2025-06-18"), "authorization": bad}
        ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
        refused(client.post(url, json=ping, headers=on_session), 400, -32600, 5, "2025-06-18")
        for verb in ("GET", "DELETE"):
            response = client.request(verb, url, headers=on_session)
            refused(response, 400, -32600, "server-error", "2025-06-18")
        # Streamed: an accepted channel would never end.
        with client.stream("GET", base + "/sse", headers={"authorization": bad}) as response:
            assert response.status_code == 400
            response.read()
        refused(response, 400, -32600, "server-error", "2024-11-05")
        # The session is untouched, with its own credential.
        fine = headers(session, "2025-06-18", authorization="Bearer fine")
        assert client.post(url, json=ping, headers=fine).status_code == 200
        assert client.delete(url, headers=fine).status_code == 200
    assert "TOPSECRET" not in log.read_text(encoding="utf-8", errors="replace")


# ---------------------------------------------------------------------------
# Malformed capabilities (issue 7 defect 7): -32602, no upstream initialize
# ---------------------------------------------------------------------------


def test_malformed_capabilities_are_refused_before_the_upstream(
    legacy_url: str, logs_dir: Path
) -> None:
    log = logs_dir / "legacy-hardening-caps.log"
    with gateway(legacy_url, log) as base, httpx.Client(timeout=15.0) as client:
        url = base + "/mcp"
        for rid, version, caps, field in (
            (1, "2025-11-25", {"roots": "x"}, ".roots"),
            (2, "2025-03-26", {"sampling": 1}, ".sampling"),
            (3, "2025-11-25", {"elicitation": {"form": True}}, ".elicitation.form"),
            (4, "2025-06-18", {"experimental": {"x": []}}, ".experimental['x']"),
        ):
            message = init_message(version, rid, capabilities=caps)
            body = refused(
                client.post(url, json=message, headers=headers()), 400, -32602, rid, version
            )
            assert f'"capabilities"{field} must be an object' in body["error"]["message"]
        # A revision that does not define a capability leaves it to the open set:
        # 2025-03-26 has no elicitation, the translators drop it.
        session, _ = initialize(client, url, "2025-03-26", capabilities={"elicitation": 1})
        client.delete(url, headers=headers(session, "2025-03-26"))
    opened = [line for line in wire.log_lines(log) if line["event"] == "upstream_session_opened"]
    assert len(opened) == 1, opened  # only the last one's


# ---------------------------------------------------------------------------
# Error ids for legacy clients
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25"])
def test_an_unreadable_id_still_gives_a_schema_valid_error(gateway_url: str, version: str) -> None:
    # 2025-03-26 and 2025-06-18 JSONRPCError require an id (string or integer, never
    # null); 2025-11-25 basic/index: "Error responses MUST include the same ID as the
    # request they correspond to (except in error cases where the ID could not be
    # read due a malformed request)". The official SDK's client requires one too.
    url = gateway_url + "/mcp"
    with httpx.Client(timeout=15.0) as client:
        session, _ = initialize(client, url, version)
        on_session = headers(session, version)
        null_id = {"jsonrpc": "2.0", "id": None, "method": "ping"}
        refused(
            client.post(url, json=null_id, headers=on_session), 400, -32600, "server-error", version
        )
        response = client.post(url, content=b"{not json", headers=on_session)
        refused(response, 400, -32700, "server-error", version)
        client.delete(url, headers=on_session)


def test_refusals_before_the_body_is_read_carry_an_id_for_a_legacy_client(
    gateway_url: str,
) -> None:
    # Found by the fuzz run (issue 19): a 2025-03-26 session's 4.3 MB POST got a
    # 413 whose error had no id, which no legacy JSONRPCError allows. A session
    # POST, and every POST /messages, is a legacy client's before its body is read.
    url = gateway_url + "/mcp"
    too_big = b'{"jsonrpc":"2.0","id":1,"method":"ping","p":"' + b"a" * 4_300_000 + b'"}'
    with httpx.Client(timeout=30.0) as client:
        session, _ = initialize(client, url, "2025-03-26")
        on_session = headers(session, "2025-03-26")
        response = client.post(url, content=too_big, headers=on_session)
        refused(response, 413, -32600, "server-error", "2025-03-26")
        as_text = {**on_session, "content-type": "text/plain"}
        response = client.post(url, content=b"{}", headers=as_text)
        refused(response, 415, -32600, "server-error", "2025-03-26")
        foreign = {**on_session, "origin": "https://evil.example"}
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        refused(
            client.post(url, json=ping, headers=foreign), 403, -32600, "server-error", "2025-03-26"
        )
        # The session serves on.
        assert client.post(url, json=ping, headers=on_session).status_code == 200
        client.delete(url, headers=on_session)
    with sse_channel(gateway_url) as (endpoint, _), httpx.Client(timeout=30.0) as poster:
        auth = {"authorization": "Bearer sse", "content-type": "application/json"}
        response = poster.post(endpoint, content=too_big, headers=auth)
        refused(response, 413, -32600, "server-error", "2024-11-05")
        response = poster.post(endpoint, json=ping, headers={**auth, "origin": "null"})
        refused(response, 403, -32600, "server-error", "2024-11-05")


# ---------------------------------------------------------------------------
# Upstream 401/403 (OAuth): relayed with the challenge naming the gateway
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def oauth_gateway(logs_dir: Path) -> Iterator[str]:
    port = procs.free_port()
    argv = [str(procs.require_peer(procs.LEGACY_PY)), str(OAUTH_FIXTURE), "--port", str(port)]
    upstream = f"http://127.0.0.1:{port}/mcp"
    with (
        procs.running(argv, upstream, log_path=logs_dir / "legacy-hardening-oauth-server.log"),
        gateway(upstream, logs_dir / "legacy-hardening-oauth-gateway.log") as base,
    ):
        yield base


def assert_challenge(response: httpx.Response, base: str, status: int, rid: Any) -> None:
    body = refused(response, status, -32600, rid, "2025-06-18")
    assert body["error"]["data"]["status"] == status
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    metadata = base + "/.well-known/oauth-protected-resource/mcp"
    assert f'resource_metadata="{metadata}"' in challenge, challenge


def test_upstream_401_and_403_reach_a_legacy_client_with_the_gateways_challenge(
    oauth_gateway: str,
) -> None:
    url = oauth_gateway + "/mcp"
    with httpx.Client(timeout=30.0) as client:
        # 2025-06-18 basic/authorization "Error Handling": 401 when authorization
        # is required or the token invalid, 403 for insufficient scope; the
        # WWW-Authenticate header names the resource metadata (RFC 9728 5.1).
        response = client.post(url, json=init_message("2025-06-18", 21), headers=headers())
        assert_challenge(response, oauth_gateway, 401, 21)
        reader = headers(authorization="Bearer reader-token")
        response = client.post(url, json=init_message("2025-06-18", 22), headers=reader)
        assert_challenge(response, oauth_gateway, 403, 22)
        # A later request: the token is revoked under an open session.
        session, _ = initialize(client, url, "2025-06-18", authorization="Bearer revocable-token")
        on_session = headers(session, "2025-06-18", authorization="Bearer revocable-token")
        revoke = {
            "jsonrpc": "2.0",
            "id": 23,
            "method": "tools/call",
            "params": {"name": "revoke_my_token", "arguments": {}},
        }
        assert client.post(url, json=revoke, headers=on_session).status_code == 200
        ping = {"jsonrpc": "2.0", "id": 24, "method": "ping"}
        assert_challenge(client.post(url, json=ping, headers=on_session), oauth_gateway, 401, 24)


# ---------------------------------------------------------------------------
# Defects of our own: JSON-RPC -32603, one call_failed line, nothing kept.
# The gateway runs in this process (a real uvicorn server on loopback, in
# front of the real fixture) so a defect can be planted.
# ---------------------------------------------------------------------------


class Planted(Exception):
    """A defect of the gateway's own, planted by the test."""


def planted(*_args: Any, **_kwargs: Any) -> Any:
    raise Planted("planted")


@contextmanager
def gateway_in_process(legacy_url: str, **settings_: Any) -> Iterator[tuple[str, Any]]:
    import uvicorn

    from app.config import Settings
    from app.serving.server import create_app

    port = procs.free_port()
    settings = Settings(upstream_url=legacy_url, port=port, **settings_)  # type: ignore[arg-type]
    app = create_app(settings)
    # log_config=None: uvicorn's own logging setup would outlive this test
    # (it stops "uvicorn.error" from propagating, which later tests read).
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", log_config=None
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "gateway did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(15)


def internal_error(message: dict[str, Any], rid: Any, version: str) -> None:
    check_legacy(version, message, None)
    assert message["error"]["code"] == -32603, message
    assert message["id"] == rid, message


def test_a_defect_in_the_legacy_path_answers_json_and_releases_the_session(
    legacy_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.fronts.http_sse.front import HttpSseFront
    from app.fronts.legacy import stream

    with (
        gateway_in_process(legacy_url) as (base, app),
        httpx.Client(timeout=15.0) as client,
        structlog.testing.capture_logs() as logs,
    ):
        url = base + "/mcp"
        version = "2025-03-26"
        session, _ = initialize(client, url, version)
        on_session = headers(session, version)
        legacy_session = app.state.wiring.legacy._sessions._sessions[session]
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        with monkeypatch.context() as patch:
            patch.setattr("app.fronts.legacy.messages.response", planted)
            # One call, JSON: the answer is the error.
            response = client.post(url, json=ping, headers=on_session)
            assert response.status_code == 500, response.text
            internal_error(response.json(), 1, version)
            # A batch, SSE: the stream has started; each member still answers.
            batch = [{**ping, "id": 2}, {**ping, "id": 3}]
            response = client.post(url, json=batch, headers=on_session)
            answers = messages(response)
            assert sorted(a["id"] for a in answers) == [2, 3]
            for answer in answers:
                internal_error(answer, answer["id"], version)
            # A batch, JSON only.
            response = client.post(
                url, json=batch, headers=headers(session, version, accept="application/json")
            )
            assert response.status_code == 200
            for answer in response.json():
                internal_error(answer, answer["id"], version)
        with monkeypatch.context() as patch:
            # The GET stream fails after it started: its last event says so.
            async def broken_stream(*_args: Any, **_kwargs: Any) -> Any:
                from app.call import Outgoing

                yield Outgoing({}, keepalive=True)
                raise Planted("planted")

            patch.setattr(stream, "server_stream", broken_stream)
            response = client.get(url, headers={**on_session, "accept": "text/event-stream"})
            (last,) = messages(response)
            internal_error(last, "server-error", version)
        assert legacy_session.in_flight == 0 and not legacy_session.ended
        assert client.post(url, json={**ping, "id": 9}, headers=on_session).status_code == 200
        client.delete(url, headers=on_session)

        # HTTP+SSE: a POST /messages that fails, and a channel stream that fails.
        with (
            sse_channel(base) as (endpoint, chunks),
            httpx.Client(timeout=15.0) as poster,
        ):
            auth = {"authorization": "Bearer sse"}
            assert (
                poster.post(endpoint, json=init_message("2024-11-05"), headers=auth).status_code
                == 202
            )
            next_events(chunks, 1)
            with monkeypatch.context() as patch:
                patch.setattr(HttpSseFront, "_one", planted)
                response = poster.post(endpoint, json={**ping, "id": 11}, headers=auth)
                assert response.status_code == 500, response.text
                internal_error(response.json(), 11, "2024-11-05")
            with monkeypatch.context() as patch:
                patch.setattr("app.fronts.legacy.messages.response", planted)
                assert (
                    poster.post(endpoint, json={**ping, "id": 12}, headers=auth).status_code == 202
                )
                (answer,) = next_events(chunks, 1)
                internal_error(answer, 12, "2024-11-05")
            with monkeypatch.context() as patch:
                patch.setattr("app.fronts.http_sse.front.sse_event", planted)
                assert (
                    poster.post(endpoint, json={**ping, "id": 13}, headers=auth).status_code == 202
                )
                text = "".join(chunks)  # the stream ends, with an event
            (last,) = events(text)
            internal_error(last, "server-error", "2024-11-05")
        deadline = time.monotonic() + 5
        while len(app.state.wiring.legacy._sessions) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(app.state.wiring.legacy._sessions) == 0  # the channel's session ended with it
    failures = [entry for entry in logs if entry["event"] == "call_failed"]
    # POST, two batches of two, GET, /messages, its relayed call, the /sse stream.
    assert len(failures) == 9, failures
    assert all(entry.get("exc_info") for entry in failures)


def test_a_channel_closed_during_initialize_leaves_no_session(
    legacy_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session was registered and held (in_flight) after the channel had
    # closed: nothing would ever end it, on either side.
    import asyncio
    import concurrent.futures

    from app.fronts.legacy.sessions import LegacySessions

    real_open = LegacySessions.open

    async def slow_open(self: LegacySessions, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(1.0)
        return await real_open(self, *args, **kwargs)

    monkeypatch.setattr(LegacySessions, "open", slow_open)
    with gateway_in_process(legacy_url) as (base, app):
        with (
            concurrent.futures.ThreadPoolExecutor(1) as pool,
            httpx.Client(timeout=15.0) as poster,
        ):
            with sse_channel(base) as (endpoint, _chunks):
                init = init_message("2024-11-05")
                pending = pool.submit(
                    poster.post, endpoint, json=init, headers={"authorization": "Bearer sse"}
                )
                time.sleep(0.3)  # the initialize is under way; the client leaves
            assert pending.result(timeout=15).status_code == 202
        sessions = app.state.wiring.legacy._sessions
        assert len(sessions) == 0
        assert sessions._pool.open_sessions == 0 and sessions.held == 0
