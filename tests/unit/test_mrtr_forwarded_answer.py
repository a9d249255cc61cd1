"""The owner's answer to a forwarded multi round-trip retry (app/cluster/forwarding.py)
is read within MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES: a JSON body as it arrives
(announced or not), each SSE event; beyond it the forwarding replica raises
the error of an oversized upstream answer. The owner here is a loopback HTTP
server answering the way a replica can (tests/integration/
test_replicas_answer_bound.py has two real gateways)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from app.call import ModernCall
from app.cluster.forwarding import ReplicaForwarder
from app.cluster.replicas import ReplicaRelay
from app.fronts.modern import checks as modern
from app.mrtr.results import Frame
from app.upstream.errors import UpstreamAnswerTooLarge

LIMIT = 4096


def answer(size: int) -> bytes:
    result = {"content": [{"type": "text", "text": "x" * size}]}
    return orjson.dumps({"jsonrpc": "2.0", "id": 5, "result": result})


async def announced(_: web.Request) -> web.Response:
    return web.Response(body=answer(2 * LIMIT), content_type="application/json")


async def chunked(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    body = answer(4 * LIMIT)
    for start in range(0, len(body), 1000):
        await response.write(body[start : start + 1000])
    await response.write_eof()
    return response


async def small(_: web.Request) -> web.Response:
    return web.Response(body=answer(100), content_type="application/json")


async def events(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
    await response.write(b"event: message\ndata: " + orjson.dumps(progress) + b"\n\n")
    # Far over the bound, and over what one read returns: the decoder bounds what
    # it holds of an unfinished event, as for an upstream's stream.
    await response.write(b"event: message\ndata: " + answer(256 * LIMIT) + b"\n\n")
    await response.write_eof()
    return response


@pytest.fixture
async def owner() -> AsyncIterator[str]:
    app = web.Application()
    for name, handler in [
        ("announced", announced),
        ("chunked", chunked),
        ("small", small),
        ("events", events),
    ]:
        app.router.add_post(f"/{name}/mcp", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def retry() -> ModernCall:
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {},
            "requestState": "s",
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"}
    call = modern.parse(orjson.dumps(body), headers)
    assert isinstance(call, ModernCall)
    return call


async def forwarded(owner: str, path: str) -> tuple[list[Frame], BaseException | None]:
    relay = ReplicaRelay(connect_timeout_s=5.0, request_timeout_s=10.0)
    frames: list[Frame] = []
    try:
        async for frame in ReplicaForwarder(relay, LIMIT).forward(retry(), None, f"{owner}/{path}"):
            frames.append(frame)
    except UpstreamAnswerTooLarge as exc:
        return frames, exc
    finally:
        await relay.aclose()
    return frames, None


async def test_an_answer_within_the_bound_is_relayed(owner: str) -> None:
    frames, failed = await forwarded(owner, "small")
    assert failed is None
    assert [f.final for f in frames] == [True] and frames[0].message["id"] == 5


@pytest.mark.parametrize("path", ["announced", "chunked", "events"])
async def test_an_answer_over_the_bound_is_an_oversized_upstream_answer(
    owner: str, path: str
) -> None:
    frames, failed = await forwarded(owner, path)
    assert isinstance(failed, UpstreamAnswerTooLarge), frames
    assert failed.status == 502
    assert failed.message == (
        f"the upstream answer to 'tools/call' exceeded {LIMIT} bytes "
        "(MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES)"
    )
    # Nothing final was relayed (the progress before the event may have been).
    assert not any(f.final for f in frames), frames
