"""The same checks on every upstream kind: one contract, four transports.

Each check of tests/integration/everything.py runs against a gateway in front
of each kind of upstream the seam (app/upstream/base.py) has, with a real
server behind it:

- ``streamable_http``: `@modelcontextprotocol/server-everything` in its
  `streamableHttp` mode (a legacy Streamable HTTP server, sessions and all);
- ``stdio``: the same server as the gateway's child process;
- ``http_sse``: the same server in its `sse` mode (2024-11-05 HTTP+SSE);
- ``modern_http``: a 2026-07-28 server (the mcp 2.x fixture,
  tests/fixtures/modern_server.py): server-everything has no modern build.

A check that cannot hold for a kind is marked there, strict, with the reason;
each kind's own behaviour (detection, process handling, its server's stderr)
stays in its own file (test_stdio.py, test_http_sse.py, test_modern_upstream.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests import procs
from tests.integration import everything as ev
from tests.integration.test_stdio import stdio_gateway

pytestmark = pytest.mark.peers

STATE_KEY = "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s="  # 32 bytes, base64
KINDS = ["streamable_http", "stdio", "http_sse", "modern_http"]
# What each kind's server offers the checks: server-everything behind the legacy
# kinds, the project's mcp 2.x fixture behind the modern one.
PROFILES = {
    "streamable_http": ev.EVERYTHING_PROFILE,
    "stdio": ev.EVERYTHING_PROFILE,
    "http_sse": ev.EVERYTHING_PROFILE,
    "modern_http": ev.MODERN_PROFILE,
}


@contextlib.contextmanager
def everything_streamable_http(port: int, log_path: Path) -> Iterator[str]:
    """server-everything over Streamable HTTP on `port`; yields its MCP URL."""
    argv = [
        str(procs.require_peer(procs.NODE)),
        str(procs.require_peer(ev.EVERYTHING)),
        "streamableHttp",
    ]
    url = f"http://127.0.0.1:{port}/mcp"
    # GET /mcp without a session is a quick 400 once the server listens.
    with procs.running(argv, url, env={"PORT": str(port)}, log_path=log_path):
        yield url


@contextlib.contextmanager
def gateway_for(kind: str, logs: Path) -> Iterator[str]:
    """A gateway in front of a real server of `kind`; yields its base URL."""
    # A keepalive each second on listen streams: a check waiting for a message
    # there looks at its bound that often (everything.Frames).
    env = {"MCP_SHIM_STATE_KEY": STATE_KEY, "MCP_SHIM_LISTEN_KEEPALIVE_S": "1"}
    with contextlib.ExitStack() as stack:
        if kind == "stdio":
            base, _pid = stack.enter_context(
                stdio_gateway(
                    ev.node_command(ev.EVERYTHING),
                    logs / "gateway.log",
                    state_key=STATE_KEY,
                    listen_keepalive_s="1",
                )
            )
            yield base
            return
        if kind == "streamable_http":
            url = stack.enter_context(
                everything_streamable_http(procs.free_port(), logs / "server.log")
            )
        elif kind == "http_sse":
            url = stack.enter_context(ev.everything_sse(procs.free_port(), logs / "server.log"))
        else:
            url = stack.enter_context(
                procs.modern_server(procs.free_port(), log_path=logs / "server.log")
            )
        yield stack.enter_context(
            procs.gateway(url, procs.free_port(), env, log_path=logs / "gateway.log")
        )


@pytest.fixture(scope="module", params=KINDS)
def upstream(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(kind, the gateway's base URL)."""
    kind: str = request.param
    with gateway_for(kind, tmp_path_factory.mktemp(f"contract-{kind}")) as base:
        yield kind, base


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60.0) as client:
        yield client


# Kinds for which a check cannot hold, and why (strict: once it holds, say so here).
CANNOT_HOLD: dict[str, dict[str, str]] = {
    "streamable_http": {
        "logs_of_a_call_reach_its_caller": (
            "server-everything sends the log line without a related request, so over "
            "Streamable HTTP it travels on the session's GET stream, which carries no call: "
            "the gateway relays to a call only what comes on that call's own stream (over "
            "stdio and HTTP+SSE one stream carries everything, and the one call in flight "
            "takes it)"
        ),
    },
}


def _xfail_where_it_cannot_hold(request: pytest.FixtureRequest, kind: str, check: str) -> None:
    reason = CANNOT_HOLD.get(kind, {}).get(check)
    if reason is not None:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))


def test_discover_list_and_calls(
    upstream: tuple[str, str], http: httpx.Client, request: pytest.FixtureRequest
) -> None:
    kind, base = upstream
    _xfail_where_it_cannot_hold(request, kind, "discover_list_and_calls")
    ev.check_discover_list_and_calls(http, base, kind, PROFILES[kind])


def test_the_official_modern_client(
    upstream: tuple[str, str], request: pytest.FixtureRequest
) -> None:
    """The mcp 2.x client: discover, tools, a sampling and an elicitation round trip."""
    kind, base = upstream
    _xfail_where_it_cannot_hold(request, kind, "the_official_modern_client")
    ev.check_the_official_modern_client(base, PROFILES[kind])


@pytest.mark.parametrize("check", ev.CHECKS, ids=ev.check_id)
def test_the_same_checks_on_every_upstream_kind(
    check: Callable[[httpx.Client, str, ev.Profile], None],
    upstream: tuple[str, str],
    http: httpx.Client,
    request: pytest.FixtureRequest,
) -> None:
    """A parked call while others complete; two parked calls answered in reverse
    order; progress, routed by the token the gateway put on the request; logs of
    a call to its caller; subscriptions/listen; a legacy client; a legacy
    client's cancelled call."""
    kind, base = upstream
    _xfail_where_it_cannot_hold(request, kind, ev.check_id(check))
    check(http, base, PROFILES[kind])
