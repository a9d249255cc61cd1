"""The upstream POST alone: what each way of sending it costs the gateway's process.

    .venv/bin/python bench/upstream_post.py [--calls 4000] [--concurrency 8] [--rounds 3]
        [--answers json,sse]

Starts bench/fast_upstream.py (about 10 us of CPU per call, in its own
process; JSON answers, then with `--sse` SSE answers) and, in this process,
sends `tools/call echo` on one legacy session through several ways of making
the same POST and reading its answer, rounds interleaved; prints this
process's CPU time per call (`time.process_time`, so the upstream's is not
counted), best and median of the rounds, and calls/s:

- `httpx client.send`: `client.build_request` + `client.send(stream=True)` on
  the gateway's aiohttp transport, with httpx's client-wide cookie jar (the
  gateway two changes ago);
- `httpx.Request to transport`: an `httpx.Request` built with the session's
  headers merged once, handed to the transport's `handle_async_request`
  (skips the client's layers, keeps the request and transport conversions);
- `poster, httpx.Response (before)`: the aiohttp session's own `request`,
  headers and timeouts prepared once per session, the answer read through an
  `httpx.Response` around aiohttp's (httpx-aiohttp's stream, exceptions
  mapped by it), SSE through httpx_sse (the gateway before this change);
- `UpstreamClient.poster, aiohttp`: what `StreamableHttpSession._post` and
  `HttpExchange` did with MCP_SHIM_UPSTREAM_HTTP_TRANSPORT=aiohttp (the
  default before app/upstream/httpclient/h1.py): aiohttp's response read directly, one
  `read()` for JSON, its chunks through app/upstream/httpclient/sse_decoder.py for SSE;
- `UpstreamClient.poster, h1 (now)`: the same on the default transport, h1:
  app/upstream/httpclient/h1.py (an asyncio Protocol per connection, httptools' parser,
  the pool, timeouts, resend bookkeeping and error mapping of the gateway);
- `aiohttp session.post`: the aiohttp session itself, as bench/hop.py posts,
  the body read whole and parsed with the least code (no SSE decoder);
- `httptools Protocol (not wired)`: a minimal keep-alive HTTP/1.1 client, an
  asyncio Protocol per connection with httptools' response parser, a list of
  idle connections, the request's bytes joined once; the answer through the
  same SSE decoder and orjson. A measurement for the team's decision only:
  the sketch app/upstream/httpclient/h1.py grew from (no timeouts, no errors mapped,
  no TLS, no bounds).

The first three read the answer's messages as `HttpExchange` did before the
change that read aiohttp's response directly (`_OldExchange`: `aread` or
httpx_sse's `EventSource`), the two `UpstreamClient.poster` rows through
`HttpExchange` itself; each closes the response.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httptools
import httpx
import orjson
from httpx_aiohttp.transport import AiohttpResponseStream, map_aiohttp_exceptions
from httpx_sse import EventSource

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.upstream.httpclient.client import build_client, library_errors
from app.upstream.httpclient.httpx_adapter import _unbind
from app.upstream.httpclient.sse_decoder import SSEDecoder
from app.upstream.streamable_http.transport import HttpExchange, _content_type, _messages_of
from bench import common

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-11-25",
}


def _call(i: int) -> bytes:
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        }
    )


Post = Callable[[int], Awaitable[None]]


class _OldExchange:
    """`HttpExchange` before this change, reading an `httpx.Response`: `aread`
    for JSON, httpx_sse's `EventSource` (over httpx's text and line decoders)
    for SSE; closed with `_unbind`. Kept here to measure against."""

    def __init__(self, response: httpx.Response, what: str) -> None:
        self._response = response
        self._what = what
        self._messages = self._read()
        self.last_event_id: str | None = None

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._messages

    async def _read(self) -> AsyncIterator[Any]:
        response = self._response
        if _content_type(response) == "text/event-stream":
            with library_errors(self._what):
                async for event in EventSource(response).aiter_sse():
                    if event.id:
                        self.last_event_id = event.id
                    if not event.data or event.event not in ("message", ""):
                        continue
                    for message in _messages_of(orjson.loads(event.data)):
                        yield message
            return
        with library_errors(self._what):
            body = await response.aread()
            parsed = orjson.loads(body) if body else None
        for message in _messages_of(parsed):
            yield message

    async def aclose(self) -> None:
        if not self._response.is_closed:
            async with asyncio.timeout(0.25):
                async for _ in self._messages:
                    pass
        await self._messages.aclose()  # type: ignore[attr-defined]
        await self._response.aclose()
        _unbind(self._response)


class _H1(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: requests written whole, answers
    parsed by httptools; one request at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[tuple[int, bytes, bytes]] | None = None
        self.body: list[bytes] = []
        self.content_type = b""
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.keep_alive = False
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or ConnectionError("upstream closed"))

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self.content_type = value

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        body = b"".join(self.body)
        self.body = []
        self.keep_alive = self.parser.should_keep_alive()
        if waiter is not None and not waiter.done():
            waiter.set_result((self.parser.get_status_code(), body, self.content_type))


class _H1Pool:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parsed = httpx.URL(url)
        self.host, self.port = parsed.host, parsed.port or 80
        lines = [f"POST {parsed.raw_path.decode()} HTTP/1.1", f"host: {self.host}:{self.port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.head = ("\r\n".join(lines) + "\r\ncontent-length: ").encode()
        self.idle: list[_H1] = []
        self.open: list[_H1] = []

    async def post(self, body: bytes) -> tuple[int, bytes, bytes]:
        if self.idle:
            conn = self.idle.pop()
        else:
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(_H1, self.host, self.port)
            self.open.append(conn)
        assert conn.transport is not None
        conn.waiter = asyncio.get_running_loop().create_future()
        conn.transport.write(b"%s%d\r\n\r\n%s" % (self.head, len(body), body))
        answer = await conn.waiter
        if conn.keep_alive:
            self.idle.append(conn)
        else:
            conn.transport.close()
        return answer

    def close(self) -> None:
        for conn in self.open:
            if conn.transport is not None:
                conn.transport.close()


async def _messages(exchange: _OldExchange | HttpExchange, i: int) -> None:
    """Read up to the answer, then close draining, as `Gateway._forward` does."""
    async for message in exchange:
        if message.get("id") == i:
            break
    else:
        raise RuntimeError(f"no answer to call {i}")
    if isinstance(exchange, HttpExchange):
        await exchange.aclose(drain=True)
    else:
        await exchange.aclose()


async def _measure(post: Post, calls: int, concurrency: int) -> tuple[float, float]:
    """(CPU us per call in this process, calls/s)."""
    counter = iter(range(calls))

    async def worker() -> None:
        for i in counter:
            await post(i)

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, elapsed = time.process_time() - cpu0, time.perf_counter() - t0
    return cpu * 1e6 / calls, calls / elapsed


async def _ways(url: str, stack: list[Any]) -> dict[str, Post]:
    jar_client = httpx.AsyncClient(
        transport=build_client(connect_timeout_s=5, max_connections=64)._transport,
        timeout=httpx.Timeout(5, read=None),
        trust_env=False,
    )
    ours = build_client(connect_timeout_s=5, max_connections=64)
    on_aiohttp = build_client(connect_timeout_s=5, max_connections=64, transport="aiohttp")
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=64),
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )
    stack += [jar_client, ours, on_aiohttp, session]
    init = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
        }
    )
    async with session.post(url, data=init, headers=HEADERS) as answer:
        await answer.read()
        headers = {**HEADERS, "mcp-session-id": answer.headers["mcp-session-id"]}
    parsed = httpx.URL(url)
    timeout = httpx.Timeout(30, connect=5)
    merged = {**ours.headers, **headers}
    extensions = {"timeout": timeout.as_dict()}
    what = "tools/call"

    async def via_send(i: int) -> None:
        request = jar_client.build_request(
            "POST", parsed, content=_call(i), headers=headers, timeout=timeout
        )
        response = await jar_client.send(request, stream=True)
        await _messages(_OldExchange(response, what), i)

    async def via_transport(i: int) -> None:
        request = httpx.Request(
            "POST", parsed, content=_call(i), headers=merged, extensions=extensions
        )
        response = await ours._transport.handle_async_request(request)
        response.request = request
        await _messages(_OldExchange(response, what), i)

    aiohttp_session = ours._aiohttp_session
    assert aiohttp_session is not None
    client_timeout = aiohttp.ClientTimeout(
        sock_connect=timeout.connect, sock_read=timeout.read, connect=timeout.pool
    )

    async def via_poster_before(i: int) -> None:
        with library_errors(what), map_aiohttp_exceptions():
            answer = await aiohttp_session().request(
                "POST",
                url,
                data=_call(i),
                headers=merged,
                timeout=client_timeout,
                allow_redirects=False,
                auto_decompress=False,
            )
        response = httpx.Response(
            answer.status, headers=answer.raw_headers, stream=AiohttpResponseStream(answer)
        )
        await _messages(_OldExchange(response, what), i)

    poster = ours.poster(parsed, headers, timeout)
    aiohttp_poster = on_aiohttp.poster(parsed, headers, timeout)

    async def via_poster(i: int) -> None:
        with library_errors(what):
            answer = await poster(_call(i), {})
        await _messages(HttpExchange(answer, what), i)

    async def via_aiohttp_poster(i: int) -> None:
        with library_errors(what):
            answer = await aiohttp_poster(_call(i), {})
        await _messages(HttpExchange(answer, what), i)

    async def via_aiohttp(i: int) -> None:
        async with session.post(url, data=_call(i), headers=headers) as answer:
            body = await answer.read()
            common.answer(body, answer.headers.get("content-type", ""))

    h1 = _H1Pool(url, {**merged, **headers})
    stack.append(h1)

    async def via_httptools(i: int) -> None:
        status, body, content_type = await h1.post(_call(i))
        if content_type.startswith(b"text/event-stream"):
            for event in SSEDecoder().feed(body):
                if event.data:
                    orjson.loads(event.data)
        elif status == 200:
            orjson.loads(body)

    return {
        "httpx client.send": via_send,
        "httpx.Request to transport": via_transport,
        "poster, httpx.Response (before)": via_poster_before,
        "UpstreamClient.poster, aiohttp": via_aiohttp_poster,
        "UpstreamClient.poster, h1 (now)": via_poster,
        "aiohttp session.post": via_aiohttp,
        "httptools Protocol (not wired)": via_httptools,
    }


async def _bench(urls: dict[str, str], calls: int, concurrency: int, rounds: int) -> None:
    stack: list[Any] = []
    ways = {
        f"{kind}: {name}": post
        for kind, url in urls.items()
        for name, post in (await _ways(url, stack)).items()
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    try:
        for _ in range(rounds):
            for name, post in ways.items():
                await _measure(post, min(500, calls), concurrency)  # warm-up
                results[name].append(await _measure(post, calls, concurrency))
    finally:
        for closing in stack:
            if isinstance(closing, aiohttp.ClientSession):
                await closing.close()
            elif isinstance(closing, _H1Pool):
                closing.close()
            else:
                await closing.aclose()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"upstream POST, {calls} calls x {rounds} rounds, concurrency {concurrency}, "
        f"load average {load}"
    )
    print(f"{'way':<42} {'CPU us/call best':>17} {'median':>7} {'calls/s best':>13}")
    for name, runs in results.items():
        cpu = sorted(r[0] for r in runs)
        best_rate = max(r[1] for r in runs)
        print(f"{name:<42} {cpu[0]:>17.1f} {cpu[len(cpu) // 2]:>7.1f} {best_rate:>13,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--answers", default="json,sse", help="json, sse or both: the upstream's answer form"
    )
    args = parser.parse_args()
    kinds = [k.strip() for k in args.answers.split(",") if k.strip()]
    with contextlib.ExitStack() as upstreams:
        urls = {
            kind: upstreams.enter_context(
                common.upstream("fast", *(["--sse"] if kind == "sse" else []))
            )[0]
            for kind in kinds
        }
        asyncio.run(_bench(urls, args.calls, args.concurrency, args.rounds))


if __name__ == "__main__":
    main()
