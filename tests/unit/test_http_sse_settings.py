"""HTTP+SSE upstreams: MCP_SHIM_UPSTREAM_TRANSPORT and the `endpoint` event check.
Pure code: no server here (the real one is in tests/integration/test_http_sse.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from app.config import SettingsError
from app.settings.load import load_settings
from app.upstream.choice import build_transport, transport_name
from app.upstream.errors import UpstreamProtocolError, UpstreamTimeout
from app.upstream.http_sse.transport import DetectingTransport, _endpoint
from app.upstream.httpclient.sse_decoder import Event
from app.upstream.streamable_http.transport import StreamableHttpTransport

STREAM = httpx.URL("http://127.0.0.1:3001/sse")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "MCP_SHIM_UPSTREAM_URL",
        "MCP_SHIM_UPSTREAM_COMMAND",
        "MCP_SHIM_UPSTREAM_TRANSPORT",
    ):
        monkeypatch.delenv(name, raising=False)


async def _events(*events: Event) -> AsyncIterator[Event]:
    for event in events:
        yield event


def endpoint_of(*events: Event, timeout_s: float = 1.0) -> httpx.URL:
    return asyncio.run(_endpoint(_events(*events), STREAM, timeout_s))


def test_a_relative_endpoint_is_resolved_against_the_stream() -> None:
    # The TypeScript and Python SDKs announce "/message?sessionId=...".
    url = endpoint_of(Event(event="endpoint", data="/message?sessionId=abc"))
    assert str(url) == "http://127.0.0.1:3001/message?sessionId=abc"


def test_an_endpoint_on_another_origin_is_refused() -> None:
    """The gateway's POSTs carry the caller's Authorization: never to another origin."""
    for data in ("http://evil.example/message", "https://127.0.0.1:3001/m", "//127.0.0.1:9/m"):
        with pytest.raises(UpstreamProtocolError, match="another origin"):
            endpoint_of(Event(event="endpoint", data=data))


def test_the_first_event_must_be_the_endpoint() -> None:
    with pytest.raises(UpstreamProtocolError, match="not an endpoint event"):
        endpoint_of(Event(event="message", data="{}"))
    with pytest.raises(UpstreamProtocolError, match="before its endpoint"):
        endpoint_of()


def test_no_endpoint_in_time() -> None:
    async def silent() -> AsyncIterator[Event]:
        await asyncio.sleep(10)
        yield Event(event="endpoint", data="/m")

    with pytest.raises(UpstreamTimeout, match=r"no endpoint event within 0\.1s"):
        asyncio.run(_endpoint(silent(), STREAM, 0.1))


@pytest.mark.parametrize(
    ("mode", "kind", "named"),
    [
        ("auto", DetectingTransport, "auto"),
        ("sse", DetectingTransport, "sse"),
        ("streamable-http", StreamableHttpTransport, "streamable-http"),
    ],
)
def test_the_transport_setting_picks_the_transport(
    monkeypatch: pytest.MonkeyPatch, mode: str, kind: type, named: str
) -> None:
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_URL", "http://127.0.0.1:3001/mcp")
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_TRANSPORT", mode)
    settings = load_settings()
    transport, _ = build_transport(settings)
    try:
        assert type(transport) is kind
        assert transport_name(settings, transport) == named
    finally:
        asyncio.run(transport.aclose())


def test_the_transport_setting_is_for_urls_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_COMMAND", "python3 -m server")
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_TRANSPORT", "sse")
    with pytest.raises(SettingsError, match="applies to MCP_SHIM_UPSTREAM_URL only"):
        load_settings()


def test_an_unknown_transport_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_URL", "http://127.0.0.1:3001/mcp")
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_TRANSPORT", "websocket")
    with pytest.raises(SettingsError, match="MCP_SHIM_UPSTREAM_TRANSPORT"):
        load_settings()
