"""subscriptions/listen through the gateway, from an unmodified legacy server (issue 4).

Real processes, real HTTP on loopback, a chain of its own so that changing
the fixture's lists or cutting its streams cannot disturb other modules::

    test client ── gateway (own process) ── recording proxy ── legacy fixture (own process)

The tests read listen streams as raw SSE (every frame is checked against the
2026-07-28 schema) and with the mcp 2.x client's own subscription support
(tests/modern_client/subscriptions.py, listen_until_closed.py). What reached
the upstream is read from the proxy's records (GET streams, their
Last-Event-ID) and from the fixture's ledger (resources/subscribe and
unsubscribe per URI, live sessions and their credentials).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import procs
from tests.integration import wire
from tests.integration.recording_proxy import RecordingProxy
from tests.schema import MODERN, SPEC, check_modern_answer, check_modern_error

SUB_ID = "io.modelcontextprotocol/subscriptionId"
ACK = "notifications/subscriptions/acknowledged"
TOOLS = "notifications/tools/list_changed"
PROMPTS = "notifications/prompts/list_changed"
RESOURCES = "notifications/resources/list_changed"
UPDATED = "notifications/resources/updated"
WATCHED = "test://watched-resource"
QUEUE = 8
KEEPALIVE_S = 0.3
FRAME_DEFS = {
    ACK: "SubscriptionsAcknowledgedNotification",
    TOOLS: "ToolListChangedNotification",
    PROMPTS: "PromptListChangedNotification",
    RESOURCES: "ResourceListChangedNotification",
    UPDATED: "ResourceUpdatedNotification",
}
GATEWAY_ENV = {
    "MCP_SHIM_LISTEN_KEEPALIVE_S": str(KEEPALIVE_S),
    "MCP_SHIM_LISTEN_QUEUE_SIZE": str(QUEUE),
}


@dataclass
class Chain:
    gateway: str  # MCP endpoint
    back: RecordingProxy  # gateway -> fixture
    fixture: str  # fixture base URL
    legacy: str  # fixture MCP endpoint
    log: Path

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = httpx.get(self.fixture + "/debug/stats", timeout=10).json()
        return stats

    def subscriptions(self, uri: str) -> dict[str, int]:
        view: dict[str, int] = self.stats()["subscriptions"].get(
            uri, {"subscribe": 0, "unsubscribe": 0, "activeSessions": 0}
        )
        return view

    def open_get_streams(self) -> int:
        return sum(1 for r in self.back.snapshot() if r.http_method == "GET" and not r.done)


@pytest.fixture(scope="module")
def chain(logs_dir: Path) -> Iterator[Chain]:
    with (
        procs.legacy_server(procs.free_port(), log_path=logs_dir / "sub-legacy.log") as legacy,
        RecordingProxy(legacy) as back,
        procs.gateway(
            back.url, procs.free_port(), env=GATEWAY_ENV, log_path=logs_dir / "sub-gateway.log"
        ) as gateway,
    ):
        yield Chain(
            gateway=gateway + "/mcp",
            back=back,
            fixture=legacy.rsplit("/mcp", 1)[0],
            legacy=legacy,
            log=logs_dir / "sub-gateway.log",
        )


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def listen_body(rid: Any, **notifications: Any) -> dict[str, Any]:
    return wire.body("subscriptions/listen", {"notifications": notifications}, rid=rid)


def check_frame(message: dict[str, Any], listen_id: Any) -> None:
    """A frame of a listen stream: valid 2026-07-28, tagged with its subscription id."""
    if "method" in message:
        SPEC.validate(MODERN, "JSONRPCNotification", message)
        SPEC.validate(MODERN, FRAME_DEFS[message["method"]], message)
        assert message["params"]["_meta"][SUB_ID] == listen_id, message
    elif "error" in message:
        check_modern_error(SPEC, message)
        assert message["id"] == listen_id
    else:
        check_modern_answer(SPEC, "subscriptions/listen", message)
        assert message["id"] == listen_id
        assert message["result"]["_meta"][SUB_ID] == listen_id


@dataclass
class Stream:
    """One listen stream read as raw SSE: messages in order, comment frames counted.

    The read loop only parses: each frame is checked against the schema when
    the client closes (`Client.check_frames`), not here, or a burst would be
    read at the pace of the validator and the gateway would rightly close
    this stream as one that fell behind."""

    listen_id: Any
    response: httpx.Response
    messages: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)
    seen: list[dict[str, Any]] = field(default_factory=list)
    comments: int = 0
    ended: bool = False
    task: asyncio.Task[None] | None = None

    async def pump(self) -> None:
        buffer = b""
        try:
            async for chunk in self.response.aiter_raw():
                buffer += chunk
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    lines = event.decode().split("\n")
                    if all(line.startswith(":") for line in lines):
                        self.comments += 1
                        continue
                    data = [line[5:].lstrip() for line in lines if line.startswith("data:")]
                    if data:
                        message = json.loads("\n".join(data))
                        self.seen.append(message)
                        await self.messages.put(message)
        except httpx.HTTPError:
            pass
        finally:
            self.ended = True
            await self.messages.put(None)

    async def next(self, wait_s: float = 5.0) -> dict[str, Any]:
        message = await asyncio.wait_for(self.messages.get(), wait_s)
        assert message is not None, f"stream {self.listen_id!r} ended; saw {self.seen}"
        return message

    async def quiet(self, period: float = 0.5) -> list[dict[str, Any]]:
        """Everything that arrives until nothing has for `period` seconds."""
        out: list[dict[str, Any]] = []
        while True:
            try:
                message = await asyncio.wait_for(self.messages.get(), period)
            except TimeoutError:
                return out
            if message is None:
                return out
            out.append(message)

    async def until_end(self, wait_s: float = 10.0) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            message = await asyncio.wait_for(self.messages.get(), wait_s)
            if message is None:
                return out
            out.append(message)


class Client:
    """An httpx.AsyncClient speaking 2026-07-28 to the gateway, with open listen streams."""

    def __init__(self, url: str, http: httpx.AsyncClient) -> None:
        self.url = url
        self.http = http
        self._stack = contextlib.AsyncExitStack()
        self._streams: list[Stream] = []

    async def listen(
        self, rid: Any, *, authorization: str | None = None, ack: bool = True, **notifications: Any
    ) -> Stream:
        message = listen_body(rid, **notifications)
        headers = wire.headers_for(message, authorization=authorization)
        request = self.http.build_request(
            "POST", self.url, content=json.dumps(message).encode(), headers=headers
        )
        response = await self.http.send(request, stream=True)
        self._stack.push_async_callback(response.aclose)
        assert response.status_code == 200, (response.status_code, await response.aread())
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = Stream(rid, response)
        self._streams.append(stream)
        stream.task = asyncio.get_running_loop().create_task(stream.pump())
        if ack:
            first = await stream.next()
            assert first["method"] == ACK, first
        return stream

    async def close(self, stream: Stream) -> None:
        await stream.response.aclose()
        if stream.task is not None:
            stream.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stream.task

    async def call(
        self, name: str, arguments: dict[str, Any], authorization: str | None = None
    ) -> dict[str, Any]:
        message = wire.body("tools/call", {"name": name, "arguments": arguments}, rid=4242)
        headers = wire.headers_for(message, authorization=authorization)
        response = await self.http.post(
            self.url, content=json.dumps(message).encode(), headers=headers
        )
        answer = wire.answer_messages(response)[-1]
        assert "result" in answer, answer
        assert not answer["result"].get("isError"), answer
        result: dict[str, Any] = answer["result"]
        return result

    def check_frames(self) -> None:
        """Every frame every stream received: valid 2026-07-28, tagged with its id."""
        for stream in self._streams:
            for message in stream.seen:
                check_frame(message, stream.listen_id)

    async def aclose(self) -> None:
        await self._stack.aclose()


@contextlib.asynccontextmanager
async def client_for(chain: Chain, *, receive_buffer: int | None = None) -> AsyncIterator[Client]:
    """`receive_buffer`: SO_RCVBUF of the client's sockets (the kernel's default otherwise)."""
    limits = httpx.Limits(max_connections=50, max_keepalive_connections=10)
    options = (
        [] if receive_buffer is None else [(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)]
    )
    transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=options)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0), transport=transport) as http:
        client = Client(chain.gateway, http)
        try:
            yield client
            client.check_frames()
        finally:
            await client.aclose()


def methods(messages: list[dict[str, Any]]) -> list[str]:
    return [m.get("method", "<response>") for m in messages]


async def wait_until(predicate: Any, wait_s: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + wait_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------------------
# discover, rejections
# ---------------------------------------------------------------------------


def test_discover_advertises_what_listen_serves(chain: Chain) -> None:
    message = wire.body("server/discover", {}, rid=1)
    response = httpx.post(
        chain.gateway, content=json.dumps(message).encode(), headers=wire.headers_for(message)
    )
    caps = response.json()["result"]["capabilities"]
    # The fixture declares all four; each is served by subscriptions/listen.
    assert caps["tools"] == {"listChanged": True}
    assert caps["prompts"] == {"listChanged": True}
    assert caps["resources"] == {"listChanged": True, "subscribe": True}


@pytest.mark.parametrize(
    "notifications",
    [None, {"toolsListChanged": "yes"}, {"resourceSubscriptions": "test://x"}],
)
def test_a_malformed_filter_is_invalid_params(chain: Chain, notifications: Any) -> None:
    params = {} if notifications is None else {"notifications": notifications}
    message = wire.body("subscriptions/listen", params, rid="bad-1")
    response = httpx.post(
        chain.gateway, content=json.dumps(message).encode(), headers=wire.headers_for(message)
    )
    assert response.status_code == 400
    error = response.json()
    check_modern_error(SPEC, error)
    assert error["id"] == "bad-1"
    assert error["error"]["code"] == -32602


def test_listen_needs_an_event_stream(chain: Chain) -> None:
    message = listen_body(5, toolsListChanged=True)
    headers = wire.headers_for(message, accept="application/json")
    response = httpx.post(chain.gateway, content=json.dumps(message).encode(), headers=headers)
    assert response.status_code == 406
    assert response.json()["error"]["code"] == -32600
    assert response.json()["id"] == 5


# ---------------------------------------------------------------------------
# the stream itself
# ---------------------------------------------------------------------------


async def test_ack_first_then_only_the_opted_in_types(chain: Chain) -> None:
    async with client_for(chain) as client:
        stream = await client.listen(101, toolsListChanged=True)
        assert stream.seen[0] == {
            "jsonrpc": "2.0",
            "method": ACK,
            "params": {"_meta": {SUB_ID: 101}, "notifications": {"toolsListChanged": True}},
        }
        assert stream.response.headers["x-accel-buffering"] == "no"
        name = unique("p")
        await client.call("add_prompt", {"name": name})
        await client.call("add_resource", {"name": name})
        await client.call("update_resource", {"uri": WATCHED})
        await client.call("add_tool", {"name": name})
        arrived = await stream.next()
        assert arrived == {"jsonrpc": "2.0", "method": TOOLS, "params": {"_meta": {SUB_ID: 101}}}
        assert await stream.quiet() == []
        await client.call("remove_tool", {"name": name})
        await client.call("remove_prompt", {"name": name})
        await client.call("remove_resource", {"name": name})
        assert methods(await stream.quiet()) == [TOOLS]


async def test_several_concurrent_subscriptions_each_carry_their_own_id(chain: Chain) -> None:
    async with client_for(chain) as client:
        res_name = unique("r")
        uri = (await client.call("add_resource", {"name": res_name}))["structuredContent"]["uri"]
        streams = {
            7: await client.listen(7, toolsListChanged=True),
            "alpha": await client.listen("alpha", promptsListChanged=True),
            8: await client.listen(8, resourceSubscriptions=[uri], toolsListChanged=True),
            "beta-2": await client.listen(
                "beta-2", resourcesListChanged=True, resourceSubscriptions=[uri, WATCHED]
            ),
            9: await client.listen(9),  # subscribed to nothing: only keep-alives
        }
        assert streams[8].seen[0]["params"]["notifications"] == {
            "toolsListChanged": True,
            "resourceSubscriptions": [uri],
        }
        name = unique("c")
        await client.call("add_tool", {"name": name})
        await client.call("add_prompt", {"name": name})
        await client.call("update_resource", {"uri": uri})
        await client.call("update_resource", {"uri": WATCHED})
        await client.call("remove_resource", {"name": res_name})
        expected = {
            7: [TOOLS],
            "alpha": [PROMPTS],
            8: [TOOLS, UPDATED],
            "beta-2": sorted([UPDATED, UPDATED, RESOURCES]),
            9: [],
        }
        for rid, stream in streams.items():
            got = await stream.quiet(0.8)
            assert sorted(methods(got)) == sorted(expected[rid]), (rid, got)
            for message in got:  # check_frame also verified each id while reading
                assert message["params"]["_meta"][SUB_ID] == rid
        updated_uris = sorted(
            m["params"]["uri"] for m in streams["beta-2"].seen if m["method"] == UPDATED
        )
        assert updated_uris == sorted([uri, WATCHED])
        assert streams[9].comments >= 1  # quiet streams get keep-alive comments
        await client.call("remove_tool", {"name": name})
        await client.call("remove_prompt", {"name": name})


async def test_keepalive_comments_on_a_quiet_stream(chain: Chain) -> None:
    async with client_for(chain) as client:
        stream = await client.listen("quiet", promptsListChanged=True)
        await asyncio.sleep(KEEPALIVE_S * 5)
        assert stream.comments >= 3
        assert not stream.ended
        assert stream.seen == [stream.seen[0]]  # the ack, nothing else


async def test_subscribe_and_unsubscribe_are_reference_counted_upstream(chain: Chain) -> None:
    async with client_for(chain) as client:
        name = unique("rc")
        uri = (await client.call("add_resource", {"name": name}))["structuredContent"]["uri"]
        other = (await client.call("add_resource", {"name": name + "o"}))["structuredContent"][
            "uri"
        ]
        first = await client.listen("rc-1", resourceSubscriptions=[uri])
        second = await client.listen("rc-2", resourceSubscriptions=[uri, other])
        third = await client.listen("rc-3", resourceSubscriptions=[uri])
        assert chain.subscriptions(uri) == {"subscribe": 1, "unsubscribe": 0, "activeSessions": 1}
        assert chain.subscriptions(other)["subscribe"] == 1

        await client.call("update_resource", {"uri": uri})
        for stream in (first, second, third):
            assert (await stream.next())["params"]["uri"] == uri

        await client.close(first)
        await client.close(third)
        await asyncio.sleep(0.5)
        assert chain.subscriptions(uri) == {"subscribe": 1, "unsubscribe": 0, "activeSessions": 1}
        await client.call("update_resource", {"uri": uri})
        assert (await second.next())["params"]["uri"] == uri

        await client.close(second)
        await wait_until(
            lambda: chain.subscriptions(uri)["unsubscribe"] == 1, what="the last unsubscribe"
        )
        assert chain.subscriptions(uri) == {"subscribe": 1, "unsubscribe": 1, "activeSessions": 0}
        assert chain.subscriptions(other) == {
            "subscribe": 1,
            "unsubscribe": 1,
            "activeSessions": 0,
        }
        await client.call("remove_resource", {"name": name})
        await client.call("remove_resource", {"name": name + "o"})


async def test_one_upstream_get_stream_per_session_however_many_listeners(chain: Chain) -> None:
    async with client_for(chain) as client:
        await wait_until(lambda: chain.open_get_streams() == 0, what="no GET stream open")
        streams = [await client.listen(f"g-{n}", toolsListChanged=True) for n in range(6)]
        await asyncio.sleep(0.3)
        assert chain.open_get_streams() == 1
        # Another credential is another session, so another GET stream.
        other = await client.listen("g-other", authorization="Bearer other", toolsListChanged=True)
        await asyncio.sleep(0.3)
        assert chain.open_get_streams() == 2
        for stream in [*streams, other]:
            await client.close(stream)
        await wait_until(lambda: chain.open_get_streams() == 0, what="GET streams released")


async def test_nothing_is_subscribed_on_a_session_of_other_credentials(chain: Chain) -> None:
    async with client_for(chain) as client:
        name = unique("cred")
        uri = (await client.call("add_resource", {"name": name}))["structuredContent"]["uri"]
        alice = await client.listen("a", authorization="Bearer alice", resourceSubscriptions=[uri])
        bob = await client.listen("b", authorization="Bearer bob", resourceSubscriptions=[uri])
        subscribed = [s for s in chain.stats()["sessions"] if uri in s["subscriptions"]]
        digests = sorted(d for s in subscribed for d in s["credentials"])
        assert digests == sorted(
            hashlib.sha256(f"Bearer {who}".encode()).hexdigest()[:16] for who in ("alice", "bob")
        )
        assert all(len(s["credentials"]) == 1 for s in subscribed)
        await client.call("update_resource", {"uri": uri})
        assert (await alice.next())["params"]["uri"] == uri
        assert (await bob.next())["params"]["uri"] == uri
        await client.close(alice)
        await client.close(bob)
        await client.call("remove_resource", {"name": name})


async def test_server_requests_on_the_get_stream_never_reach_a_listener(chain: Chain) -> None:
    async with client_for(chain) as client:
        stream = await client.listen(
            "all",
            toolsListChanged=True,
            promptsListChanged=True,
            resourcesListChanged=True,
            resourceSubscriptions=[WATCHED],
        )
        # The fixture pings its client on the session's GET stream; the gateway answers.
        assert (await client.call("ping_client", {}))["structuredContent"] == {"pinged": True}
        name = unique("req")
        await client.call("add_tool", {"name": name})
        got = await stream.quiet()
        assert methods(got) == [TOOLS]
        assert all("id" not in m for m in got)
        await client.call("remove_tool", {"name": name})


async def test_upstream_get_stream_dropped_and_restored_loses_nothing(chain: Chain) -> None:
    async with client_for(chain) as client:
        stream = await client.listen("drop", toolsListChanged=True)
        names = [unique("d") for _ in range(4)]
        await client.call("add_tool", {"name": names[0]})  # gives the GET stream an event id
        assert (await stream.next())["method"] == TOOLS
        mark = chain.back.mark()

        dropped = (await client.http.post(chain.fixture + "/debug/drop-get-streams")).json()
        assert dropped["dropped"] >= 1
        # At once, before the gateway can have reconnected: resumption must cover it.
        await client.call("add_tool", {"name": names[1]})
        assert (await stream.next())["method"] == TOOLS
        for name in names[2:]:
            await client.call("add_tool", {"name": name})
        assert methods(await stream.quiet(0.8)) == [TOOLS, TOOLS]  # each once, no replay twice

        resumed = [r for r in chain.back.since(mark) if r.http_method == "GET"]
        assert resumed, "the gateway did not open the GET stream again"
        assert "last-event-id" in resumed[0].headers
        for name in names:
            await client.call("remove_tool", {"name": name})


async def test_an_expired_session_is_reopened_and_resubscribed(chain: Chain) -> None:
    async with client_for(chain) as client:
        name = unique("exp")
        uri = (await client.call("add_resource", {"name": name}))["structuredContent"]["uri"]
        stream = await client.listen("exp", resourceSubscriptions=[uri])
        assert chain.subscriptions(uri)["subscribe"] == 1
        expired = (await client.http.post(chain.fixture + "/debug/expire-sessions")).json()
        assert expired["expired"] >= 1
        # The gateway re-opens on a fresh session and subscribes the URI again there.
        await wait_until(
            lambda: (
                chain.subscriptions(uri)
                == {
                    "subscribe": 2,
                    "unsubscribe": 0,
                    "activeSessions": 1,
                }
            ),
            wait_s=10,
            what="the URI subscribed again on a fresh session",
        )
        await client.call("update_resource", {"uri": uri})
        arrived = await stream.next()
        assert arrived["method"] == UPDATED and arrived["params"]["uri"] == uri
        await client.close(stream)
        await wait_until(lambda: chain.subscriptions(uri)["unsubscribe"] == 1, what="unsubscribe")
        await client.call("remove_resource", {"name": name})


# ---------------------------------------------------------------------------
# a slow listener
# ---------------------------------------------------------------------------


def raw_listen(port: int, rid: Any, uri: str) -> socket.socket:
    """A listen stream on a socket that reads nothing and has a tiny receive buffer."""
    message = listen_body(rid, resourceSubscriptions=[uri])
    payload = json.dumps(message).encode()
    headers = wire.headers_for(message)
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(payload)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(head.encode() + payload)
    return sock


def read_all(sock: socket.socket, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    data = bytearray()
    with contextlib.suppress(TimeoutError):
        while chunk := sock.recv(1 << 16):
            data += chunk
            if data.endswith(b"\r\n0\r\n\r\n"):  # the chunked body ended
                break
    sock.close()
    return bytes(data)


async def test_a_slow_listener_is_closed_alone_with_a_clear_error(chain: Chain) -> None:
    # 4 kB URIs make each frame big, so the slow socket's buffers fill quickly.
    uri = "test://big/" + "x" * 4000
    port = int(chain.gateway.split(":")[2].split("/")[0])
    count = 1500
    # The fast listener is a client that keeps up whatever the machine's load:
    # its receive buffer holds a good part of the burst, so a test process
    # starved of CPU for a moment does not make it fall behind QUEUE frames
    # (the gateway would then rightly close it too: that was this test's
    # flakiness under load). The gateway's own pace still matters: a fan-out
    # that did not yield between messages would fill its mailbox regardless.
    async with client_for(chain, receive_buffer=4 << 20) as client:
        fast = await client.listen("fast", resourceSubscriptions=[uri])
        slow = raw_listen(port, "slow", uri)
        await asyncio.sleep(0.3)
        result = await client.call("burst_list_changed", {"count": count, "uri": uri})
        assert result["structuredContent"]["count"] == count
        got = 0
        while got < count:
            message = await fast.next(wait_s=20)
            assert message.get("method") == UPDATED, message
            got += 1
        raw = await asyncio.to_thread(read_all, slow)
        frames = [json.loads(m) for m in re.findall(rb"^data: (.+)$", raw, re.MULTILINE)]
        assert frames[0]["method"] == ACK
        last = frames[-1]
        check_modern_error(SPEC, last)
        assert last["id"] == "slow"
        assert last["error"]["code"] == -32603
        assert last["error"]["data"]["reason"] == "listener_queue_overflow"
        assert last["error"]["data"]["queueBound"] == QUEUE
        assert "behind" in last["error"]["message"]
        delivered = sum(1 for f in frames if f.get("method") == UPDATED)
        assert 0 < delivered < count, delivered
        # The fast listener is still open and served.
        await client.call("burst_list_changed", {"count": 1, "uri": uri})
        assert (await fast.next())["params"]["uri"] == uri
        line = next(
            (x for x in wire.log_lines(chain.log) if x.get("event") == "listen_overflow"), None
        )
        assert line is not None and line["listen_id"] == "slow"


# ---------------------------------------------------------------------------
# the mcp 2.x client's own subscription support
# ---------------------------------------------------------------------------


def test_the_modern_client_subscribes_through_the_gateway(chain: Chain) -> None:
    document = procs.run_modern_client("subscriptions.py", chain.gateway, uuid.uuid4().hex[:8])
    assert isinstance(document, dict)
    assert document["protocolVersion"] == MODERN and document["adoptedVia"] == "discover"
    ids = document["ids"]
    assert len(set(ids.values())) == 3
    assert document["honoured"] == {
        "tools": {"toolsListChanged": True},
        "mixed": {"promptsListChanged": True, "resourceSubscriptions": [WATCHED]},
        "resources": {"resourcesListChanged": True},
    }
    events = document["events"]
    assert events["tools"] == [{"type": "ToolsListChanged"}]
    assert sorted(e["type"] for e in events["mixed"]) == ["PromptsListChanged", "ResourceUpdated"]
    assert {"type": "ResourceUpdated", "uri": WATCHED} in events["mixed"]
    assert events["resources"] == [{"type": "ResourcesListChanged"}]
    assert document["again"] == [{"type": "ToolsListChanged"}]


# ---------------------------------------------------------------------------
# shutdown
# ---------------------------------------------------------------------------


def start_modern_listener(url: str, ready: Path) -> subprocess.Popen[bytes]:
    """The mcp 2.x client holding one listen stream open (it writes `ready` once acked)."""
    script = procs.ROOT / "tests" / "modern_client" / "listen_until_closed.py"
    return subprocess.Popen(
        [str(procs.require_peer(procs.MODERN_PY)), str(script), url, str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=procs.ROOT,
    )


async def test_sigterm_closes_every_listen_stream_gracefully(
    chain: Chain, logs_dir: Path, tmp_path: Path
) -> None:
    port = procs.free_port()
    log_path = logs_dir / "sub-shutdown-gateway.log"
    env = {
        "MCP_SHIM_UPSTREAM_URL": chain.legacy,
        "MCP_SHIM_PORT": str(port),
        "MCP_SHIM_HOST": "127.0.0.1",
        "MCP_SHIM_LOG_LEVEL": "info",
    }
    argv = [sys.executable, "-m", "app.serving.cli"]
    with procs.running(argv, f"http://127.0.0.1:{port}/healthz", env=env, log_path=log_path) as gw:
        url = f"http://127.0.0.1:{port}/mcp"
        ready = tmp_path / "ready"
        modern = start_modern_listener(url, ready)
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                client = Client(url, http)
                try:
                    one = await client.listen(1, toolsListChanged=True)
                    two = await client.listen("two", promptsListChanged=True)
                    await wait_until(ready.exists, wait_s=30, what="the modern client's ack")
                    started = time.monotonic()
                    gw.send_signal(signal.SIGTERM)
                    for stream in (one, two):
                        rest = await stream.until_end()
                        assert rest == [
                            {
                                "jsonrpc": "2.0",
                                "id": stream.listen_id,
                                "result": {
                                    "resultType": "complete",
                                    "_meta": {SUB_ID: stream.listen_id},
                                },
                            }
                        ]
                    gw.wait(15)
                    # Well before uvicorn's own 10 s graceful timeout would cancel them.
                    assert time.monotonic() - started < 5
                finally:
                    await client.aclose()
            out, err = modern.communicate(timeout=30)
        finally:
            if modern.poll() is None:
                modern.kill()
        assert modern.returncode == 0, err.decode()[-3000:]
        document = json.loads(out.decode().strip().splitlines()[-1])
        assert document["ended"] == "graceful", document
    text = log_path.read_text()
    assert "listen_streams_closing" in text
    assert "timeout graceful shutdown exceeded" not in text
