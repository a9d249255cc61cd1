"""Issue 7, the pure parts: strict Host parsing, the call deadline and internal
failures in Gateway.run, the status a failed answer reports, library
exceptions logged with their stack, the new settings' validation."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import orjson
import pytest
import structlog

from app import logs
from app.call import ModernCall
from app.config import Settings
from app.fronts.modern import checks as modern
from app.fronts.modern.gateway import CallState, Gateway, Outgoing
from app.fronts.shared.answer import CallAnswer
from app.fronts.shared.security import check_host, parse_host
from app.settings import rules
from translators.registry import get_version

# ---------------------------------------------------------------------------
# Host (RFC 9110 7.2: uri-host [":" port]; RFC 9112 3.2: an invalid one gets 400)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("localhost", ("localhost", None)),
        ("LocalHost:8080", ("localhost", 8080)),
        ("127.0.0.1:80", ("127.0.0.1", 80)),
        ("[::1]", ("[::1]", None)),
        ("[::1]:8080", ("[::1]", 8080)),
        ("[2001:db8::1]:443", ("[2001:db8::1]", 443)),
        ("mcp.example.com", ("mcp.example.com", None)),
        ("xn--bcher-kva.example:65535", ("xn--bcher-kva.example", 65535)),
        # The reported bypass: a loopback literal followed by a name.
        ("[::1]evil.example", None),
        ("[::1].evil.example", None),
        ("[::1]:80evil", None),
        ("[::1]:", None),
        ("[::1", None),
        ("[not-an-address]", None),
        ("[fe80::1%25eth0]", None),
        ("localhost:", None),
        ("localhost:80:80", None),
        ("localhost:+80", None),
        ("localhost:65536", None),
        ("localhost:123456", None),
        ("evil..example", None),
        ("-evil.example", None),
        ("evil_example.com", None),
        ("evil.example/path", None),
        ("user@localhost", None),
        (" localhost", None),
        ("", None),
        ("a" * 64 + ".example", None),
        (".".join(["a" * 60] * 5), None),  # longer than 253
    ],
)
def test_parse_host(value: str, parsed: tuple[str, int | None] | None) -> None:
    assert parse_host(value) == parsed


@pytest.mark.parametrize(
    ("value", "allowed", "status"),
    [
        ("localhost:8080", [], None),
        ("[::1]:8080", [], None),
        ("[::1]evil.example", [], 400),
        ("localhost:80x", [], 400),
        ("evil.example", [], 403),
        ("mcp.example.com:443", ["mcp.example.com"], None),
        ("mcp.example.com:443", ["mcp.example.com:443"], None),
        ("mcp.example.com:8443", ["mcp.example.com:443"], 403),
        ("evil.example", ["*"], None),
        (None, [], 403),
    ],
)
def test_check_host(value: str | None, allowed: list[str], status: int | None) -> None:
    refused = check_host(value, allowed)
    assert (refused.http_status if refused is not None else None) == status
    if refused is not None:
        assert refused.code == -32600


# ---------------------------------------------------------------------------
# Gateway.run: the call deadline, internal failures
# ---------------------------------------------------------------------------

MODERN = get_version("2026-07-28")
LEGACY = get_version("2025-11-25")


def _call() -> ModernCall:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    raw = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/list",
            "params": {"_meta": meta},
        }
    )
    parsed = modern.parse(raw, {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"})
    assert isinstance(parsed, ModernCall)
    return parsed


class _Pool:
    """Only what Gateway.run touches before the upstream: acquiring fails or hangs."""

    def __init__(self, acquire: Any) -> None:
        self.acquire = acquire
        self.released = 0

    def key_for(self, *args: Any) -> str:
        return "key"


def _gateway(pool: _Pool, deadline_s: float = 120.0) -> Gateway:
    assert LEGACY is not None
    return Gateway(
        pool,  # type: ignore[arg-type]
        offered_version=LEGACY,
        ttl_ms=0,
        cache_scope="private",
        call_deadline_s=deadline_s,
    )


async def _all(gen: AsyncGenerator[Outgoing, None]) -> list[Outgoing]:
    return [out async for out in gen]


async def test_call_deadline_answers_504_and_cancels_the_wait() -> None:
    cancelled = asyncio.Event()

    async def hang(*args: Any) -> Any:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    state = CallState()
    outs = await asyncio.wait_for(_all(_gateway(_Pool(hang), 0.2).run(_call(), None, state)), 5)
    assert cancelled.is_set()
    (out,) = outs
    assert out.final and out.status == 504
    assert out.message["id"] == 9
    assert out.message["error"]["code"] == -32603
    assert "MCP_SHIM_CALL_DEADLINE_S" in out.message["error"]["message"]
    assert state.outcome == "deadline_exceeded"


@pytest.mark.parametrize("error", [RuntimeError("boom"), TimeoutError()])
async def test_internal_failure_is_a_json_rpc_500_with_its_outcome(error: Exception) -> None:
    # A TimeoutError of our own is a failure, not the deadline.
    async def fail(*args: Any) -> Any:
        raise error

    state = CallState()
    (out,) = await _all(_gateway(_Pool(fail)).run(_call(), None, state))
    assert out.final and out.status == 500
    assert out.message["error"]["code"] == -32603
    assert "boom" not in out.message["error"]["message"]  # no exception text to clients
    assert state.outcome == "internal_error"


# ---------------------------------------------------------------------------
# CallAnswer: the status and ending it reports
# ---------------------------------------------------------------------------


async def _never_disconnects() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_answer_that_fails_before_sending_reports_500() -> None:
    async def events() -> AsyncGenerator[Outgoing, None]:
        yield Outgoing({"jsonrpc": "2.0", "id": 1, "result": {"bad": {1, 2}}}, final=True)

    async def send(message: dict[str, Any]) -> None:
        pass

    done: list[tuple[int, str | None]] = []
    answer = CallAnswer(
        events(), accepts_sse=True, accepts_json=True, on_done=lambda s, e: done.append((s, e))
    )
    with pytest.raises(TypeError):  # a set is not JSON: uvicorn answers 500
        await answer({}, _never_disconnects, send)
    assert done == [(500, "internal_error")]


async def test_large_json_answer_is_written_in_pieces() -> None:
    big = "x" * (1 << 20)

    async def events() -> AsyncGenerator[Outgoing, None]:
        yield Outgoing({"jsonrpc": "2.0", "id": 1, "result": {"text": big}}, final=True)

    bodies: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            bodies.append(message)

    answer = CallAnswer(events(), accepts_sse=True, accepts_json=True, on_done=lambda s, e: None)
    await answer({}, _never_disconnects, send)
    # Each send waits for the transport to drain what the previous one wrote.
    assert len(bodies) > 10
    assert max(len(m["body"]) for m in bodies) <= 64 * 1024
    assert [m["more_body"] for m in bodies] == [True] * (len(bodies) - 1) + [False]
    assert json.loads(b"".join(m["body"] for m in bodies))["result"]["text"] == big


# ---------------------------------------------------------------------------
# Logs: a library's exception keeps its stack
# ---------------------------------------------------------------------------


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.reset_defaults()


def test_stdlib_exception_is_logged_with_its_stack(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("info")
    try:
        raise ValueError("inner failure")
    except ValueError as exc:
        logging.getLogger("uvicorn.error").error("Exception in ASGI application", exc_info=exc)
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["level"] == "error"
    assert "Traceback (most recent call last)" in line["exception"]
    assert "test_stdlib_exception_is_logged_with_its_stack" in line["exception"]
    assert "ValueError: inner failure" in line["exception"]


# ---------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------


def _settings(**env: str) -> Settings:
    return Settings(upstream_url="http://127.0.0.1:1/mcp", **env)  # type: ignore[arg-type]


def test_new_settings_defaults() -> None:
    settings = _settings()
    assert settings.read_timeout_s == 30
    assert settings.max_connections == 1024
    assert settings.call_deadline_s == 120
    assert settings.call_deadline_s <= settings.request_timeout_s


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"call_deadline_s": "301"}, "MCP_SHIM_REQUEST_TIMEOUT_S"),
        ({"request_timeout_s": "60", "mrtr_ttl_s": "30"}, "MCP_SHIM_REQUEST_TIMEOUT_S"),
        ({"call_deadline_s": "0.4"}, "MCP_SHIM_MRTR_GATHER_MAX_MS"),
        ({"call_deadline_s": "0"}, "greater than 0"),
        ({"read_timeout_s": "0"}, "greater than 0"),
        ({"max_connections": "0"}, "greater than or equal to 1"),
    ],
)
def test_new_settings_are_validated(fields: dict[str, str], says: str) -> None:
    # The type and range on building the model, the rules across settings on
    # the built one (as load_settings checks them).
    with pytest.raises(ValueError, match=says):
        broken = rules.problems(_settings(**fields))
        raise ValueError("\n".join(broken))


@pytest.mark.parametrize(
    ("nofile", "configured", "effective"),
    [
        ((1 << 20, 1 << 20), {}, 1024),
        # Room 960: upstream gets min(2048, 480), clients the remaining 480.
        ((1024, 1024), {}, 480),
        ((256, 256), {"max_connections": "64", "max_upstream_connections": "84"}, 64),
        # Room 192: two pools of 84 (h1, the default, and aiohttp) get min(168, 96).
        ((256, 256), {"max_connections": "200", "max_upstream_connections": "84"}, 96),
        # One pool of 84 on the aiohttp transport: clients get the other 108.
        (
            (256, 256),
            {
                "max_connections": "200",
                "max_upstream_connections": "84",
                "upstream_http_transport": "aiohttp",
            },
            108,
        ),
    ],
)
def test_connection_bound_fits_the_descriptor_limit(
    monkeypatch: pytest.MonkeyPatch,
    nofile: tuple[int, int],
    configured: dict[str, str],
    effective: int,
) -> None:
    from app.serving import cli

    monkeypatch.setattr(cli.resource, "getrlimit", lambda _: nofile)
    monkeypatch.setattr(cli.resource, "setrlimit", lambda *_: None)
    fields = {"max_parked": "10", **configured}
    limits = cli.connection_limits(_settings(**fields))
    assert limits.max_connections == effective
