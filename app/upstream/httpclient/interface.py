"""The one interface of an HTTP answer from the upstream, whichever library
read it, and of a POST that returns one. Each library is an adapter of it
(all in app/upstream/httpclient/): h1.py's `H1Answer` (the hot path,
h1_adapter.py), aiohttp_client.py's `AiohttpAnswer`, httpx_adapter.py's
`HttpxAnswer`; each adapter turns its library's exceptions into the gateway's
own errors (app/upstream/errors.py) in its `upstream_error`. The code that reads
answers (`HttpExchange`, the modern pass-through, HTTP+SSE) asks nothing else
of them, and never which library is underneath. Below every adapter: it
imports none of them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Protocol

from multidict import CIMultiDictProxy


class Answer(Protocol):
    """An upstream's answer: its status and headers at once, its body read
    whole (`aread`, decoded: at most MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES on
    aiohttp and httpx, and on h1 for the answer of a POST or one-off request,
    not of a GET) or chunk by chunk as it comes (`aiter_bytes`), and `aclose`,
    which leaves its connection to the pool only if the body was read to its
    end."""

    @property
    def status_code(self) -> int: ...

    # Case-insensitive, every field of a repeated header kept.
    @property
    def headers(self) -> CIMultiDictProxy[str]: ...

    @property
    def is_closed(self) -> bool: ...

    async def aread(self) -> bytes | bytearray: ...

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class Post(Protocol):
    """POSTs one message's bytes, with a call's own extra headers. `resend`: the
    message may be sent a second time (`streamable_http.resendable`) if a
    reused connection fails before any answer."""

    def __call__(
        self, content: bytes, extra: Mapping[str, str], resend: bool = False
    ) -> Awaitable[Answer]: ...
