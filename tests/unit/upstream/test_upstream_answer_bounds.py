"""Issue 19, the upstream client's side (items 1, 2 and 11), against the
project's misbehaving upstream (tests/misbehaving/http_upstream.py):

- a byte after an answer's end (a second response in the same write, a 204
  with a body) closes the connection, and a connection carries the requests
  of one credential only, so a stray answer cannot reach another caller;
- answers far over the 256 KiB read buffer come through, JSON and SSE;
- one answer is capped at MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES, decoded (a
  gzip bomb is inflated no further), with the gateway's error and the
  connection closed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app import jsonio
from app.upstream.errors import UpstreamAnswerTooLarge
from app.upstream.httpclient import h1, h1_errors
from app.upstream.httpclient.client import UpstreamClient, build_client
from app.upstream.streamable_http.transport import StreamableHttpSession
from tests.misbehaving.http_upstream import MisbehavingUpstream
from translators.registry import get_version

VERSION = get_version("2025-06-18")
assert VERSION is not None


@pytest.fixture
async def upstream() -> AsyncIterator[MisbehavingUpstream]:
    async with MisbehavingUpstream() as peer:
        yield peer


@pytest.fixture(params=["h1", "aiohttp"])  # KEPT_STACKS
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _client(transport: str = "h1", max_answer_bytes: int = h1.DEFAULT_MAX_ANSWER_BYTES) -> Any:
    return build_client(
        connect_timeout_s=5.0,
        max_connections=8,
        transport=transport,
        max_answer_bytes=max_answer_bytes,
    )


def _session(client: UpstreamClient, url: str, credential: str | None) -> StreamableHttpSession:
    headers = {} if credential is None else {"authorization": credential}
    return StreamableHttpSession(client, url, headers, "misbehaving-1", VERSION, 10.0)


async def _call(session: StreamableHttpSession, tool: str, **args: Any) -> dict[str, Any]:
    """The response to a tools/call of `tool` (id 1, as a fresh session's first call)."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": args},
    }
    exchange = await session.request(message)
    try:
        async for answer in exchange:
            if answer.get("id") == 1:
                return answer
    finally:
        await exchange.aclose(drain=True)
    raise AssertionError("no response")


def _text(answer: dict[str, Any]) -> str:
    # As written to the client: a large answer's large strings are still in its
    # bytes (app/splice.py) until then.
    return str(jsonio.loads(jsonio.dumps(answer))["result"]["content"][0]["text"])


# -- item 1: one caller never receives bytes of another's answer -----------


# Every HTTP stack the settings can choose (MCP_SHIM_UPSTREAM_HTTP_TRANSPORT).
KEPT_STACKS = ["h1", "aiohttp"]


def test_every_kept_stack_is_tested_and_httpx_own_transport_is_refused() -> None:
    """httpx's own transport pooled by origin and read a stray byte after an
    answer as the next answer (issue 19, defect 1): the setting refuses it now
    (checked failing before: it was accepted and built)."""
    from typing import get_args

    from pydantic import ValidationError

    from app.config import Settings

    field = Settings.model_fields["upstream_http_transport"]
    assert sorted(get_args(field.annotation)) == sorted(KEPT_STACKS)
    with pytest.raises(ValidationError):
        Settings(upstream_url="http://127.0.0.1:9/mcp", upstream_http_transport="httpx")
    with pytest.raises(ValueError, match="h1 or aiohttp"):
        _client("httpx")


@pytest.mark.parametrize("pooled_by", KEPT_STACKS)
async def test_bytes_after_an_answer_close_its_connection(
    upstream: MisbehavingUpstream, pooled_by: str
) -> None:
    """The same credential even: what follows an answer in the same write
    is never read as the next request's answer (checked failing before the
    fix on h1: the next call got the stray response's bytes; aiohttp closed
    such a connection already). httpx's own transport (httpcore, h11) read
    them as the next answer: no longer an option (docs/architecture.md)."""
    client = _client(pooled_by)
    try:
        for round_ in range(6):
            first = _session(client, upstream.url, "Bearer a")
            assert _text(await _call(first, "stray", text=f"a{round_}")) == f"a{round_}"
            second = _session(client, upstream.url, "Bearer a")
            async with asyncio.timeout(10):
                assert _text(await _call(second, "echo", text=f"b{round_}")) == f"b{round_}"
    finally:
        await client.aclose()


async def test_a_204_with_a_body_closes_its_connection(
    upstream: MisbehavingUpstream, transport: str
) -> None:
    """Checked failing before the fix: the next call on the connection timed out."""
    stray = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "STRAY"}]}}
    ).encode()
    # The head and half the body of a response that would answer the next request.
    upstream.notify_204_body = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (len(stray), stray[: len(stray) // 2])
    )
    client = _client(transport)
    try:
        for round_ in range(3):
            session = _session(client, upstream.url, "Bearer a")
            await session.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
            async with asyncio.timeout(10):
                assert _text(await _call(session, "echo", text=f"r{round_}")) == f"r{round_}"
    finally:
        await client.aclose()


@pytest.mark.parametrize("pooled_by", KEPT_STACKS)
async def test_a_late_stray_answer_reaches_only_its_own_credential(
    upstream: MisbehavingUpstream, pooled_by: str
) -> None:
    """The stray response comes only once the connection carries the next
    request: no client can tell it from that request's answer, so another
    credential's request never rides on that connection (checked failing
    before the fix, on h1 and on aiohttp: B got "STRAY a" in every round).
    httpx's own transport pooled by origin only: no longer an option."""
    client = _client(pooled_by)
    try:
        for round_ in range(6):
            a = _session(client, upstream.url, f"Bearer a{round_}")
            assert _text(await _call(a, "stray_later", text=f"a{round_}")) == f"a{round_}"
            b = _session(client, upstream.url, f"Bearer b{round_}")
            async with asyncio.timeout(10):
                assert _text(await _call(b, "echo", text=f"b{round_}")) == f"b{round_}"
        for seen in upstream.connections:
            assert len(set(seen)) == 1, seen
    finally:
        await client.aclose()


def _post(path: bytes = b"/mcp") -> bytes:
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    return b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (
        path,
        len(body),
        body,
    )


async def test_one_credential_holds_at_most_half_the_connections(
    upstream: MisbehavingUpstream,
) -> None:
    pool = h1.H1Client(max_connections=4, keepalive_s=4.0, ssl_context=None)
    port = int(upstream.url.rsplit(":", 1)[1].split("/")[0])
    mine, theirs = (
        pool.origin("http", "127.0.0.1", port, "a"),
        pool.origin("http", "127.0.0.1", port, "b"),
    )
    timeouts: dict[str, Any] = {"connect_timeout": 5.0, "read_timeout": 5.0}
    held = [await pool.request(mine, _post(), pool_timeout=1.0, **timeouts) for _ in range(2)]
    try:
        with pytest.raises(h1_errors.PoolTimeout):
            await pool.request(mine, _post(), pool_timeout=0.2, **timeouts)
        other = await pool.request(theirs, _post(), pool_timeout=0.2, **timeouts)
        await other.aread()
        # One of its own back: the credential's next request is served.
        waiting = asyncio.ensure_future(pool.request(mine, _post(), pool_timeout=5.0, **timeouts))
        await held.pop().aread()
        async with asyncio.timeout(5):
            third = await waiting
        await third.aread()
    finally:
        for answer in held:
            await answer.aclose()
        await pool.aclose()
    assert pool.open_connections == 0


# -- item 2: large answers come through -------------------------------------


@pytest.mark.parametrize("size", [600 * 1024, 10 * 1024 * 1024])
@pytest.mark.parametrize("sse", [False, True])
async def test_a_large_answer_comes_through(
    upstream: MisbehavingUpstream, transport: str, size: int, sse: bool
) -> None:
    """Checked failing before the fix on h1: a JSON answer over 256 KiB never ended."""
    client = _client(transport)
    try:
        session = _session(client, upstream.url, None)
        async with asyncio.timeout(30):
            answer = await _call(session, "result", bytes=size, sse=sse)
        assert len(_text(answer)) == size
    finally:
        await client.aclose()


# -- item 11: one answer is bounded ------------------------------------------


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("sse", [False, True])
async def test_an_answer_over_the_cap_is_refused_and_its_connection_closed(
    upstream: MisbehavingUpstream, transport: str, sse: bool, compressed: bool
) -> None:
    limit = 1024 * 1024
    client = _client(transport, max_answer_bytes=limit)
    try:
        session = _session(client, upstream.url, None)
        # Compressed: 32 MiB of one letter, about 32 KiB of gzip.
        size = 32 * 1024 * 1024 if compressed else 3 * limit
        with pytest.raises(UpstreamAnswerTooLarge) as caught:
            async with asyncio.timeout(30):
                await _call(session, "result", bytes=size, sse=sse, gzip=compressed)
        assert "exceeded 1048576 bytes (MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES)" in caught.value.message
        # The next call is served, on a new connection.
        connections = len(upstream.connections)
        assert _text(await _call(session, "echo", text="next")) == "next"
        assert len(upstream.connections) == connections + 1
    finally:
        await client.aclose()


async def test_a_gzip_bomb_is_inflated_no_further_than_the_cap(
    upstream: MisbehavingUpstream,
) -> None:
    """128 MiB inflated from about 128 KiB: h1 stops at the cap, so the
    largest piece it held is about the cap, not the bomb."""
    import tracemalloc

    limit = 1024 * 1024
    client = _client("h1", max_answer_bytes=limit)
    tracemalloc.start()
    try:
        session = _session(client, upstream.url, None)
        with pytest.raises(UpstreamAnswerTooLarge):
            await _call(session, "result", bytes=128 * 1024 * 1024, sse=True, gzip=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await client.aclose()
    assert peak < 16 * limit, peak


def test_the_sse_decoder_bounds_an_event_and_joins_a_long_line_once() -> None:
    from app.upstream.httpclient.sse_decoder import EventTooLarge, SSEDecoder

    decoder = SSEDecoder(max_event_bytes=4096)
    assert decoder.feed(b"data: ") == []
    for _ in range(30):
        assert decoder.feed(b"y" * 100) == []  # held as pieces until the line ends
    (event,) = decoder.feed(b"\n\n")
    assert event.data == "y" * 3000
    with pytest.raises(EventTooLarge, match="exceeded 4096 bytes"):
        for _ in range(50):
            decoder.feed(b"data: " + b"z" * 100 + b"\n")  # many lines of one event
    with pytest.raises(EventTooLarge):
        SSEDecoder(max_event_bytes=4096).feed(b"data: " + b"z" * 5000)


async def _passed_through(
    upstream: MisbehavingUpstream, arguments: dict[str, Any], limit: int
) -> list[dict[str, Any]]:
    """What a modern client's pass-through (app/fronts/modern/passthrough.py) sends for a
    tools/call of `result` with `arguments`, the gateway's limit at `limit`."""
    from app.fronts.modern.passthrough import PassThrough
    from app.upstream.modern.passthrough import PassThroughUpstream
    from app.upstream.modern.upstream import ModernHttpUpstream

    client = _client("h1", max_answer_bytes=limit)
    sent: list[dict[str, Any]] = []
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def fallback() -> Any:
        raise AssertionError("no era change here")

    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "result", "arguments": arguments},
        }
    ).encode()
    answer = PassThrough(
        PassThroughUpstream(
            ModernHttpUpstream(client, upstream.url, request_timeout_s=10.0),
            Any,  # type: ignore[arg-type]  # not asked: the answer is 200
        ),
        body,
        {"content-type": "application/json", "accept": "application/json, text/event-stream"},
        call_id=7,
        method="tools/call",
        long_lived=False,
        fallback=fallback,
        on_done=lambda status, gone, outcome: None,
        gateway_url=None,
        write_timeout_s=5.0,
    )
    try:
        await answer({"type": "http"}, receive, send)  # type: ignore[arg-type]
    finally:
        await client.aclose()
    return sent


async def test_a_passed_through_answer_announced_over_the_cap_is_refused_before_relaying(
    upstream: MisbehavingUpstream,
) -> None:
    sent = await _passed_through(upstream, {"bytes": 3 * 1024 * 1024}, 1024 * 1024)
    assert sent[0]["status"] == 502
    error = json.loads(sent[1]["body"])["error"]
    assert error["code"] == -32603
    assert "exceeded 1048576 bytes (MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES)" in error["message"]


async def test_a_passed_through_stream_found_over_the_cap_ends_with_the_error(
    upstream: MisbehavingUpstream,
) -> None:
    # gzip: chunked, no length announced; 8 MiB inflated from about 8 KiB.
    arguments = {"bytes": 8 * 1024 * 1024, "sse": True, "gzip": True}
    sent = await _passed_through(upstream, arguments, 1024 * 1024)
    assert sent[0]["status"] == 200
    relayed = sum(len(m.get("body", b"")) for m in sent[1:-2])
    assert relayed <= 1024 * 1024
    last_event = sent[-2]["body"].decode().strip().split("data: ")[-1]
    error = json.loads(last_event)
    assert error["id"] == 7 and error["error"]["code"] == -32603
    assert "MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES" in error["error"]["message"]
    assert sent[-1] == {"type": "http.response.body", "body": b""}


async def test_a_passed_through_json_found_over_the_cap_is_cut(
    upstream: MisbehavingUpstream,
) -> None:
    from app.fronts.modern.passthrough import AnswerCutShort

    arguments = {"bytes": 8 * 1024 * 1024, "gzip": True}
    with pytest.raises(AnswerCutShort, match="MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES"):
        await _passed_through(upstream, arguments, 1024 * 1024)


@pytest.mark.parametrize("pooled_by", KEPT_STACKS)
async def test_httpx_requests_never_carry_two_credentials_on_one_connection(
    upstream: MisbehavingUpstream, pooled_by: str
) -> None:
    """The httpx path that remains (`open_stream`: the modern pass-through,
    long-lived modern requests, HTTP+SSE streams) runs over aiohttp's
    transport, whose pool is per credential: a late stray answer after one
    credential's answer never reaches another's request."""
    import httpx

    client = _client(pooled_by)
    url = httpx.URL(upstream.url)
    timeouts = httpx.Timeout(10.0)

    async def call(credential: str, tool: str, text: str) -> str:
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": {"text": text}},
        }
        headers = {
            "authorization": credential,
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-session-id": "misbehaving-1",
        }
        answer = await client.open_stream(
            "POST", url, headers, json.dumps(message).encode(), timeouts
        )
        try:
            return _text(json.loads(bytes(await answer.aread())))
        finally:
            await answer.aclose()

    try:
        for round_ in range(4):
            assert await call(f"Bearer a{round_}", "stray_later", f"a{round_}") == f"a{round_}"
            async with asyncio.timeout(10):
                assert await call(f"Bearer b{round_}", "echo", f"b{round_}") == f"b{round_}"
        assert upstream.connections
        for seen in upstream.connections:
            assert len(set(seen)) == 1, seen
    finally:
        await client.aclose()
