"""An upstream's cookie is its answer to one caller: the gateway shares one HTTP
client (and its connections) among every caller and upstream session, so a
client-wide cookie jar would send a `Set-Cookie` meant for one caller's
session with every other caller's requests. The brief: credentials are never
shared between callers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.recording_proxy import Record, RecordingProxy

pytestmark = pytest.mark.peers

CALLER_A = "Bearer caller-a"
CALLER_B = "Bearer caller-b"


COOKIES_SET: list[int] = []


def _cookie_for_a(record: Record) -> dict[str, str]:
    # Every answer to caller A's upstream session sets a cookie, as a server
    # (or a balancer's sticky sessions) would for that session.
    if record.headers.get("authorization") == CALLER_A:
        COOKIES_SET.append(record.serial)
        return {"set-cookie": "upstream_session=for-caller-a; Path=/"}
    return {}


@pytest.fixture(params=["h1", "aiohttp"])
def chain(
    request: pytest.FixtureRequest, legacy_url: str, logs_dir: Path
) -> Iterator[tuple[str, RecordingProxy]]:
    transport: str = request.param
    log = logs_dir / f"gateway-cookies-{transport}.log"
    with RecordingProxy(legacy_url, extra_response_headers=_cookie_for_a) as back:
        # A host name, not an address: aiohttp's own jar keeps no cookies of
        # IP-address hosts, so only a name shows whether it keeps them.
        upstream = back.url.replace("127.0.0.1", "localhost")
        env = {"MCP_SHIM_UPSTREAM_HTTP_TRANSPORT": transport}
        with procs.gateway(upstream, procs.free_port(), env=env, log_path=log) as base:
            yield base + "/mcp", back


def _call(url: str, authorization: str, rid: int) -> None:
    message = wire.body("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, rid=rid)
    headers = {**wire.headers_for(message), "authorization": authorization}
    with httpx.Client(timeout=30.0) as client:
        response = wire.post(client, url, message, headers)
    assert response.status_code == 200, response.text


def test_a_cookie_set_for_one_callers_session_never_reaches_another_caller(
    chain: tuple[str, RecordingProxy],
) -> None:
    url, back = chain
    COOKIES_SET.clear()
    _call(url, CALLER_A, 1)
    _call(url, CALLER_A, 2)
    mark = back.mark()
    _call(url, CALLER_B, 3)
    _call(url, CALLER_B, 4)
    assert COOKIES_SET, "the proxy set no cookie: the test would prove nothing"
    for_b = [r for r in back.since(mark) if r.headers.get("authorization") == CALLER_B]
    assert [r.method for r in for_b][:1] == ["initialize"]  # B has a session of its own
    assert any(r.method == "tools/call" for r in for_b)
    leaked = [r.method for r in for_b if "cookie" in r.headers]
    assert leaked == [], f"caller A's upstream cookie was sent with caller B's {leaked}"
