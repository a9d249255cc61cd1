"""The bare Python hop the gateway is measured against: Starlette + aiohttp.

    python bench/hop.py --port 9200 --upstream http://127.0.0.1:9100/mcp

POST /mcp is forwarded as it came (body and the MCP headers), and the
upstream's answer sent back whole (status, content type, Mcp-Session-Id,
body). No validation, no translation, no logging: the least a Python
process on the same stack (uvicorn with uvloop and httptools, aiohttp
toward the upstream) can do per call, so that the gateway's own cost is
the difference.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

_FORWARDED = ("content-type", "accept", "mcp-session-id", "mcp-protocol-version", "authorization")
_RETURNED = ("content-type", "mcp-session-id")


def build(upstream: str) -> Starlette:
    state: dict[str, aiohttp.ClientSession] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as http:
            state["http"] = http
            yield

    async def mcp(request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k in _FORWARDED if (v := request.headers.get(k)) is not None}
        async with state["http"].post(upstream, data=body, headers=headers) as answer:
            content = await answer.read()
            back = {k: v for k in _RETURNED if (v := answer.headers.get(k)) is not None}
            return Response(content, status_code=answer.status, headers=back)

    return Starlette(routes=[Route("/mcp", mcp, methods=["POST"])], lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description="bare Starlette + aiohttp hop (benchmark)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9200)
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:9100/mcp")
    args = parser.parse_args()
    uvicorn.run(
        build(args.upstream),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
