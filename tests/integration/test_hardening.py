"""Hostile and greedy clients (issue 7 "Hardening"), over real HTTP: the gateway
process in front of the legacy fixture (mcp 1.x) on loopback.

Each test reproduces one defect of the issue as a client would, and checks
that other callers are unaffected and that the gateway keeps serving.
Gateways that need small limits are started per test with them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.schema import SPEC, check_modern_error

pytestmark = pytest.mark.peers

ELICITATION = {"elicitation": {}}


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def tool_call(
    name: str,
    arguments: Any,
    *,
    rid: Any = 1,
    caps: dict[str, Any] | None = None,
    authorization: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    meta = {wire.META_CAPABILITIES: caps} if caps is not None else None
    message = wire.body("tools/call", {"name": name, "arguments": arguments}, rid=rid, meta=meta)
    headers = wire.headers_for(message, authorization=authorization)
    # json, not orjson: orjson cannot write the deep bodies these tests send.
    return json.dumps(message).encode(), headers


def assert_json_error(response: httpx.Response, status: int, code: int, rid: Any) -> str:
    """A JSON-RPC error (never a plain-text page) with this status, code and id."""
    assert response.status_code == status, response.text[:300]
    assert response.headers["content-type"].startswith("application/json"), response.text[:300]
    body = response.json()
    check_modern_error(SPEC, body)
    assert body["error"]["code"] == code, body
    if rid is None:
        assert "id" not in body, body
    else:
        assert body["id"] == rid, body
    message: str = body["error"]["message"]
    return message


def echo_works(url: str, *, caps: dict[str, Any] | None = None, rid: Any = 500) -> None:
    content, headers = tool_call("echo", {"text": "still here"}, rid=rid, caps=caps)
    response = httpx.post(url, content=content, headers=headers, timeout=15)
    assert response.status_code == 200, response.text[:300]
    messages = wire.answer_messages(response)
    assert messages[-1]["result"]["content"] == [{"type": "text", "text": "still here"}]


@contextmanager
def gateway(legacy_url: str, log: Path, **env: str) -> Iterator[str]:
    settings = {f"MCP_SHIM_{k.upper()}": v for k, v in env.items()}
    with procs.gateway(legacy_url, procs.free_port(), env=settings, log_path=log) as base:
        yield base + "/mcp"


# ---------------------------------------------------------------------------
# Defects 1 and 2: deep nesting; nothing taken for a call is ever kept
# ---------------------------------------------------------------------------


def test_deep_calls_never_exhaust_lanes_or_connections(legacy_url: str, logs_dir: Path) -> None:
    # Defect 1: with an input capability the call took a lane (an upstream session
    # and its GET stream connection), then failed computing the params digest of
    # arguments nested 300 deep: a plain-text 500, and the lane was never
    # released. With 66 upstream connections, 80 such calls used to leave every
    # later call hanging.
    log = logs_dir / "hardening-lanes.log"
    with gateway(
        legacy_url, log, max_upstream_connections="66", max_parked="1", max_sessions="200"
    ) as url:
        statuses = []
        with httpx.Client(timeout=15) as client:
            for i in range(80):
                content, headers = tool_call("echo", nested(300), rid=i, caps=ELICITATION)
                response = client.post(url, content=content, headers=headers)
                statuses.append(response.status_code)
            # Other callers, through the bridge (a lane) and the plain path.
            echo_works(url, caps=ELICITATION, rid=1001)
            echo_works(url, rid=1002)
            assert set(statuses) == {400}, statuses
            assert_json_error(response, 400, -32600, 79)


def test_deep_nesting_is_refused_at_the_front(gateway_url: str) -> None:
    # Defect 2: parsed at depth 300 (orjson reads 1,024), not serialisable (~254).
    url = gateway_url + "/mcp"
    content, headers = tool_call("echo", nested(300), rid="deep")
    message = assert_json_error(
        httpx.post(url, content=content, headers=headers), 400, -32600, "deep"
    )
    assert "MCP_SHIM_MAX_JSON_DEPTH" in message
    # Deeper than orjson reads at all: valid JSON all the same, so the same
    # refusal, its id read from the top level (found by the fuzzer).
    deepest = b'{"jsonrpc": "2.0", "id": 3, "p": ' + b"[" * 2000 + b"]" * 2000 + b"}"
    assert_json_error(httpx.post(url, content=deepest, headers=headers), 400, -32600, 3)
    # Not JSON at all: a parse error, no id to echo.
    broken = b'{"jsonrpc": "2.0", "id": 3, "p": [1,}'
    assert_json_error(httpx.post(url, content=broken, headers=headers), 400, -32700, None)
    # At the limit, a call goes through.
    content, headers = tool_call("echo", {"text": "ok", "deep": nested(60)}, rid=4)
    assert httpx.post(url, content=content, headers=headers).status_code == 200


# ---------------------------------------------------------------------------
# Defect 3: header values that cannot be forwarded
# ---------------------------------------------------------------------------


def test_non_ascii_authorization_is_refused_and_never_logged(
    legacy_url: str, logs_dir: Path
) -> None:
    log = logs_dir / "hardening-auth.log"
    with gateway(legacy_url, log) as url:
        content, headers = tool_call("echo", {"text": "x"}, rid=31)
        raw_headers: dict[str, Any] = dict(headers)
        raw_headers["authorization"] = "Bearer sk-live-TOPSECRET\xe9".encode("latin-1")
        response = httpx.post(url, content=content, headers=raw_headers)
        message = assert_json_error(response, 400, -32600, 31)
        assert "Authorization" in message
        # An Mcp-Param-* value is forwarded to replicas: the same rule.
        raw_headers["authorization"] = "Bearer fine"
        raw_headers["mcp-param-region"] = "sk-live-TOPSECRET\xe9".encode("latin-1")
        assert_json_error(httpx.post(url, content=content, headers=raw_headers), 400, -32020, 31)
        echo_works(url)
    assert "TOPSECRET" not in log.read_text(encoding="utf-8", errors="replace")


# ---------------------------------------------------------------------------
# Defect 6: one client cannot fill the session pool
# ---------------------------------------------------------------------------


async def _concurrent(url: str, calls: list[tuple[bytes, dict[str, str]]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30) as client:
        return list(
            await asyncio.gather(
                *(client.post(url, content=content, headers=headers) for content, headers in calls)
            )
        )


def test_made_up_capabilities_share_one_session(legacy_url: str, logs_dir: Path) -> None:
    # Sessions were keyed by whatever capabilities a client declared: 20 slow calls
    # with made-up capabilities opened 20 sessions, the pool (8) was full of busy
    # ones, and every other caller got 503.
    log = logs_dir / "hardening-pool.log"
    with gateway(legacy_url, log, max_sessions="8", max_parked="4") as url:
        flood = [
            tool_call(
                "slow_echo",
                {"ms": 3000, "steps": 1, "text": f"slow-{i}"},
                rid=i,
                # No input capability: the plain path, on the pool's shared sessions.
                caps={"experimental": {f"made-up-{i}": {}}, f"vendor.example/x{i}": {"n": i}},
            )
            for i in range(20)
        ]

        async def scenario() -> tuple[list[httpx.Response], httpx.Response]:
            flooding = asyncio.ensure_future(_concurrent(url, flood))
            await asyncio.sleep(0.7)  # the flood's calls are in flight
            other = tool_call("echo", {"text": "other"}, rid=99, authorization="Bearer other")
            others = await _concurrent(url, [other])
            return await flooding, others[0]

        flooded, other = asyncio.run(scenario())
        assert other.status_code == 200, other.text[:300]
        assert [r.status_code for r in flooded] == [200] * 20, [r.text[:200] for r in flooded]
    opened = [line for line in wire.log_lines(log) if line["event"] == "upstream_session_opened"]
    assert len(opened) == 2, opened  # the anonymous flood's one key, and the other caller's


def test_one_credential_cannot_take_every_session(legacy_url: str, logs_dir: Path) -> None:
    # Calls with an input capability each hold a lane (a session of their own)
    # while they run. One credential gets at most its share of the pool; beyond
    # it a clear 429 naming the setting, and other credentials are still served.
    log = logs_dir / "hardening-share.log"
    with gateway(
        legacy_url, log, max_sessions="8", max_parked="4", max_sessions_per_credential="3"
    ) as url:
        greedy = [
            tool_call(
                "slow_echo",
                {"ms": 3000, "steps": 1},
                rid=i,
                caps=ELICITATION,
                authorization="Bearer greedy",
            )
            for i in range(6)
        ]

        async def scenario() -> tuple[list[httpx.Response], list[httpx.Response]]:
            flooding = asyncio.ensure_future(_concurrent(url, greedy))
            await asyncio.sleep(0.7)
            others = await _concurrent(
                url,
                [
                    tool_call(
                        "echo",
                        {"text": "still here"},
                        rid=100 + i,
                        caps=ELICITATION,
                        authorization=f"Bearer other-{i}",
                    )
                    for i in range(2)
                ],
            )
            return await flooding, others

        flooded, others = asyncio.run(scenario())
        assert [r.status_code for r in others] == [200, 200], [r.text[:200] for r in others]
        statuses = sorted(r.status_code for r in flooded)
        # The pooled session (held by each call while it runs) and two lanes.
        assert statuses == [200, 200, 429, 429, 429, 429], [r.text[:200] for r in flooded]
        refused = next(r for r in flooded if r.status_code == 429)
        message = assert_json_error(refused, 429, -32603, refused.json()["id"])
        assert "MCP_SHIM_MAX_SESSIONS_PER_CREDENTIAL" in message
        assert refused.headers["retry-after"] == "1"  # RFC 6585: when to try again
        echo_works(url, caps=ELICITATION)


# ---------------------------------------------------------------------------
# Defect 7: malformed capabilities are the client's error
# ---------------------------------------------------------------------------


def test_malformed_capabilities_are_refused_before_the_upstream(
    legacy_url: str, logs_dir: Path
) -> None:
    log = logs_dir / "hardening-caps.log"
    with gateway(legacy_url, log) as url:
        for rid, caps, field in (
            (71, {"roots": "x"}, "roots"),
            (72, {"sampling": {"tools": 1}}, "sampling.tools"),
        ):
            content, headers = tool_call("echo", {"text": "x"}, rid=rid, caps=caps)
            message = assert_json_error(
                httpx.post(url, content=content, headers=headers), 400, -32602, rid
            )
            assert f"{field} must be an object" in message
        opened = [
            line for line in wire.log_lines(log) if line["event"] == "upstream_session_opened"
        ]
        assert opened == []  # no initialize was spent on them


# ---------------------------------------------------------------------------
# Defect 8: after an upstream restart every call still succeeds
# ---------------------------------------------------------------------------


def test_after_a_restart_each_forgotten_session_is_renewed_once(logs_dir: Path) -> None:
    port = procs.free_port()
    fixture = f"http://127.0.0.1:{port}/mcp"
    argv = [str(procs.require_peer(procs.LEGACY_PY)), str(procs.FIXTURE), "--port", str(port)]
    log = logs_dir / "hardening-restart.log"
    with gateway(fixture, log) as url:
        with procs.running(argv, fixture, log_path=logs_dir / "restart-legacy-1.log"):
            # Four concurrent calls with an input capability: four lanes, idle after.
            calls = [
                tool_call("slow_echo", {"ms": 300, "steps": 1}, rid=i, caps=ELICITATION)
                for i in range(4)
            ]
            assert [r.status_code for r in asyncio.run(_concurrent(url, calls))] == [200] * 4
            echo_works(url, rid=40)  # and the pooled session
        with procs.running(argv, fixture, log_path=logs_dir / "restart-legacy-2.log"):
            # Every call succeeds: each session of the old process (the pooled one,
            # each idle lane) meets a 404 of its own and is renewed once, the
            # request sent once more (the upstream's handler never ran on a 404).
            # A 404 retires only the session that got it: it says nothing of others.
            for i in range(5):
                echo_works(url, caps=ELICITATION, rid=50 + i)
            echo_works(url, rid=60)
    events = [line["event"] for line in wire.log_lines(log)]
    assert "upstream_sessions_retired" not in events
    assert "upstream_session_expired" in events


# ---------------------------------------------------------------------------
# Defect 9: notifications are checked like requests; log fields are bounded
# ---------------------------------------------------------------------------


def test_notifications_are_validated_and_logs_bounded(legacy_url: str, logs_dir: Path) -> None:
    log = logs_dir / "hardening-notify.log"
    with gateway(legacy_url, log) as url:
        huge = json.dumps({"jsonrpc": "2.0", "method": "x" * 3_000_000}).encode()
        bare = {"content-type": "application/json"}
        # No MCP headers (every POST MUST carry MCP-Protocol-Version).
        assert_json_error(httpx.post(url, content=huge, headers=bare), 400, -32020, None)
        # With the header, a method 2026-07-28 does not define.
        versioned = {**bare, "mcp-protocol-version": wire.MODERN}
        refused = httpx.post(url, content=huge, headers=versioned)
        assert len(assert_json_error(refused, 404, -32601, None)) < 300
        # What 2026-07-28 does define is still accepted.
        cancelled = json.dumps(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        ).encode()
        accepted = httpx.post(
            url, content=cancelled, headers={**versioned, "mcp-method": "notifications/cancelled"}
        )
        assert (accepted.status_code, accepted.content) == (202, b"")
        echo_works(url)
    lines = log.read_bytes().splitlines()
    assert lines and max(len(line) for line in lines) < 4000


# ---------------------------------------------------------------------------
# Defect 1, at its cause: whatever fails inside a call, what it took is given
# back and the client gets a JSON-RPC error. The gateway runs in this process
# (a real uvicorn server on loopback, in front of the real fixture) so a
# defect can be planted where no input can reach any more.
# ---------------------------------------------------------------------------


@contextmanager
def gateway_in_process(legacy_url: str, loop: str = "auto") -> Iterator[tuple[str, Any]]:
    import threading

    import uvicorn

    from app.config import Settings
    from app.serving.server import create_app

    port = procs.free_port()
    settings = Settings(upstream_url=legacy_url, port=port)  # type: ignore[arg-type]
    app = create_app(settings)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", loop=loop
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "gateway did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", app.state.wiring.gateway
    finally:
        server.should_exit = True
        thread.join(15)


class Planted(Exception):
    """A defect of the gateway's own, planted by the test."""


def test_a_failure_after_the_lane_is_taken_releases_it(
    legacy_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.mrtr import bridge as bridge_module

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise Planted("planted")

    with gateway_in_process(legacy_url) as (url, gw):
        lanes = gw._bridge._lanes
        pool = gw._pool
        echo_works(url, caps=ELICITATION, rid=1)  # a lane exists, idle
        idle_lanes = lanes.idle
        # The params digest (where defect 1 failed, once the lane was taken), then
        # the construction of the exchange: each raises.
        responses: list[httpx.Response] = []
        for target in ("params_digest", "LiveExchange"):
            with monkeypatch.context() as patch:
                patch.setattr(bridge_module, target, broken)
                for i in range(20):
                    content, headers = tool_call("echo", {"text": "x"}, rid=i, caps=ELICITATION)
                    responses.append(httpx.post(url, content=content, headers=headers, timeout=15))
        deadline = time.monotonic() + 5
        while lanes.busy and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lanes.busy == 0
        assert lanes.idle <= idle_lanes
        for i, response in enumerate(responses):
            assert_json_error(response, 500, -32603, i % 20)
        assert pool.open_sessions == len(pool) + lanes.idle
        echo_works(url, caps=ELICITATION, rid=2)
        echo_works(url, rid=3)
