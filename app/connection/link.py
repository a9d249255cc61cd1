"""An answer's link to its client's connection, beyond ASGI: set in the scope
by the gateway's HTTP protocol (app/serving/http_protocol.py), read by every
answer written as it comes (app/connection/held.py, app/fronts/shared/answer.py),
so it sits below both.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)

# The scope extension under which an answer finds its ConnectionLink.
LINK = "mcp_shim.connection"
# Headers that frame the answer, which uvicorn's `send` interprets: an answer
# carrying one is not written whole (ConnectionLink.write_whole).
_FRAMING = frozenset({b"content-length", b"transfer-encoding", b"connection"})


class ConnectionLink:
    """What an answer may know of its connection beyond ASGI, without a task
    per call: a callback when the client goes away (ASGI's only way is a task
    awaiting `receive()` for the whole answer), and whether a write may wait
    (the transport is paused), so a write is timed only then. In the scope
    under `extensions[LINK]`; absent under another server, where the answer
    falls back to ASGI's ways."""

    __slots__ = (
        "_cycle",
        "_flow",
        "_on_lost",
        "answer_headers",
        "body_complete",
        "lost",
        "rewrite",
    )

    def __init__(self, flow: Any, cycle: RequestResponseCycle | None = None) -> None:
        self._flow = flow
        # The cycle weakly: it holds the scope that holds this link, and a strong
        # reference back would leave every request's cycle and scope to the
        # cyclic garbage collector (its passes were the p99, bench/profile.py --gc).
        self._cycle = None if cycle is None else weakref.ref(cycle)
        self._on_lost: Callable[[], None] | None = None
        # The client went away while this request was being answered.
        self.lost = False
        # The request's whole body has arrived: reading it cannot wait.
        self.body_complete = False
        # Set by the application that lets `write_whole` answer (app/serving/server.py):
        # the headers every answer of the request carries, which its `send`
        # wrapper would add. None: every answer goes through ASGI `send`.
        self.answer_headers: tuple[tuple[bytes, bytes], ...] | None = None
        # Set by an app that hands the request to another inside its own
        # answer and renames that one's answer (app/servers/aggregate/direct.py):
        # a body written whole is this function's of it.
        self.rewrite: Callable[[bytes], bytes] | None = None

    def write_whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        """The status line, the server's headers, `headers`, `answer_headers`,
        the content length and `body`, in one write: what uvicorn's `send`
        writes for an `http.response.start` and its one `http.response.body`,
        without the two ASGI sends, their wrappers, and their checks of a state
        known here (6% of a legacy call's instructions, bench/instructions.py).
        False, and nothing written, when the answer must go through `send`: not
        armed, already begun, the client gone, the transport paused, the
        connection to be closed after it, access logging on, or a header that
        `send` treats itself (framing) or refuses."""
        extra, ref = self.answer_headers, self._cycle
        if extra is None or ref is None:
            return False
        cycle = ref()
        if (
            cycle is None
            or cycle.response_started
            or cycle.disconnected
            or cycle.flow.write_paused
            or not cycle.keep_alive
            or cycle.access_log
            or cycle.scope["method"] == "HEAD"
        ):
            return False
        if self.rewrite is not None:
            body = self.rewrite(body)
        content = [STATUS_LINE[status]]
        for raw_name, value in (*cycle.default_headers, *headers, *extra):
            name = raw_name.lower()
            if name in _FRAMING or HEADER_RE.search(name) or HEADER_VALUE_RE.search(value):
                return False
            content += (name, b": ", value, b"\r\n")
        content += (b"content-length: %d\r\n\r\n" % len(body), body)
        cycle.response_started = True
        cycle.waiting_for_100_continue = False
        cycle.chunked_encoding = False
        cycle.response_complete = True
        cycle.transport.write(b"".join(content))
        cycle.message_event.set()  # what a `receive()` waiting for the end awaits
        # The protocol's turn: the next pipelined request, or the keep-alive timer.
        cycle.on_response()
        return True

    @property
    def write_paused(self) -> bool:
        # uvicorn's send awaits the drain only when it finds the flow paused.
        return bool(self._flow.write_paused)

    def on_lost(self, callback: Callable[[], None] | None) -> None:
        """Call `callback` once when the client disconnects (None: no longer)."""
        self._on_lost = callback

    @property
    def watched(self) -> bool:
        """An answer still waits to hear of the client going away: its request's
        task has not finished, even if its last byte is written."""
        return self._on_lost is not None

    def connection_lost(self) -> None:
        self.lost = True
        callback, self._on_lost = self._on_lost, None
        if callback is not None:
            callback()


def connection_link(scope: Mapping[str, Any]) -> ConnectionLink | None:
    """The gateway's HTTP protocol's link to this request's connection, if the
    server is that protocol (app/serving/http_protocol.py)."""
    extensions = scope.get("extensions")
    link = extensions.get(LINK) if extensions else None
    return link if isinstance(link, ConnectionLink) else None
