"""`app/routes/edge.py` `read_body`, the request body read from ASGI's messages:
whole, in pieces, over the limit, cut short by the client, or too slow."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request

from app.routes import edge
from app.routes.scope_headers import ScopeHeaders


def _request(messages: list[dict[str, Any]], wait: float = 0.0) -> Request:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        if not queue:
            await asyncio.sleep(3600)  # a client that sends nothing more
        if wait:
            await asyncio.sleep(wait)
        return queue.pop(0)

    return Request({"type": "http", "headers": []}, receive)


def _read(request: Request, limit: int = 100, timeout_s: float = 5.0, **headers: str) -> Any:
    raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return asyncio.run(edge.read_body(request, ScopeHeaders(raw), limit, timeout_s))


def _body(chunk: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.request", "body": chunk, "more_body": more}


def test_whole_and_in_pieces() -> None:
    assert _read(_request([_body(b'{"a":1}')])) == b'{"a":1}'
    pieces = [
        _body(b"", True),
        _body(b"ab", True),
        _body(b"", True),
        _body(b"cd", True),
        _body(b"e"),
    ]
    body = _read(_request(pieces))
    assert body == b"abcde" and type(body) is bytes
    assert _read(_request([{"type": "http.request"}])) == b""


def test_over_the_limit() -> None:
    with pytest.raises(edge.BodyTooLarge):
        _read(_request([_body(b"x" * 60, True), _body(b"x" * 60)]))
    with pytest.raises(edge.BodyTooLarge):  # said so before any byte came
        _read(_request([]), content_length="101")
    assert _read(_request([_body(b"x" * 100)])) == b"x" * 100


def test_client_gone_and_too_slow() -> None:
    with pytest.raises(edge.BodyAbandoned):
        _read(_request([_body(b"ab", True), {"type": "http.disconnect"}]))
    with pytest.raises(edge.BodyTimeout):
        _read(_request([_body(b"ab", True)]), timeout_s=0.05)
    with pytest.raises(edge.BodyTimeout):
        _read(_request([_body(b"ab")], wait=1.0), timeout_s=0.05)


def test_a_whole_body_is_read_without_a_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    # Said complete by the gateway's protocol (app/serving/http_protocol.py): nothing
    # is timed. Not said so: the read is timed, and a slow one fails.
    from app.connection.link import LINK, ConnectionLink

    def refused(_delay: float) -> Any:
        raise AssertionError("a whole body needs no timer")

    def linked(messages: list[dict[str, Any]], complete: bool) -> Request:
        request = _request(messages)
        link = ConnectionLink(flow=None)
        link.body_complete = complete
        request.scope["extensions"] = {LINK: link}
        return request

    with monkeypatch.context() as patch:
        patch.setattr(edge.asyncio, "timeout", refused)
        assert _read(linked([_body(b'{"a":1}')], complete=True)) == b'{"a":1}'
    with pytest.raises(edge.BodyTimeout):
        _read(linked([_body(b"ab", True)], complete=False), timeout_s=0.05)
