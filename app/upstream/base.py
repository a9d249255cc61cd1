"""The seam between the gateway and an upstream MCP server.

Each upstream kind (a folder of this package: legacy Streamable HTTP, HTTP+SSE,
stdio; a modern upstream behind `era_transport`) provides a `Transport` that
opens sessions, and sessions that send messages and hand back
the messages the server answers with. Everything above this seam deals only
in parsed JSON-RPC dicts and the errors of `app.upstream.errors`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from app.call import Message


class Exchange(Protocol):
    """The server's answer stream to one request: notifications and server requests
    related to it, then (normally) the response."""

    last_event_id: str | None

    def __aiter__(self) -> AsyncIterator[Message]: ...

    async def aclose(self, drain: bool = False) -> None:
        """End the exchange; `drain` reads the rest of an answered stream first."""


class Stoppable(Protocol):
    """An exchange fed through a queue (a stdio process's or an HTTP+SSE channel's
    router), whose read a stop put by another task ends in place."""

    def stop(self) -> None: ...


def read_stopper(exchange: Exchange) -> Callable[[], None] | None:
    """What ends a read of `exchange` from another task without cancelling the
    reader, when the exchange has one; None: the reader must race its reads
    against its own stop (an HTTP answer has no queue to put a stop in)."""
    # Not isinstance(exchange, Stoppable): a runtime-checkable protocol's check
    # walks the protocol's members, a few microseconds on every legacy call.
    stop: Callable[[], None] | None = getattr(exchange, "stop", None)
    return stop


class Session(Protocol):
    session_id: str | None

    async def request(self, message: Message) -> Exchange: ...

    async def notify(self, message: Message) -> None: ...

    async def respond(self, message: Message) -> None:
        """Answer a request the server sent us (a JSON-RPC response)."""

    async def listen(self, last_event_id: str | None = None) -> Exchange:
        """The session's standalone stream of server messages (legacy GET stream)."""

    async def close(self) -> None: ...


@runtime_checkable
class RunsProcesses(Protocol):
    """A transport whose sessions are server processes on this host (stdio)."""

    def server_pids(self) -> list[int]:
        """The server processes running now."""


class SharedFlag(Protocol):
    """One flag every worker of the gateway sees (app/serving/load_board.py)."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...


@runtime_checkable
class WithholdsCancels(Protocol):
    """A transport that may stop sending cancellations (stdio: MCP_SHIM_STDIO_CANCEL)."""

    def share_cancel_stop(self, flag: SharedFlag) -> None:
        """Stop when `flag` is set, and set it on stopping: so every worker stops
        once one worker's server died of a cancellation."""


def share_cancel_stop(transport: object, flag: SharedFlag) -> None:
    """Let `transport`, when it may stop sending cancellations, stop with the
    other workers' (`WithholdsCancels`); nothing for one that always sends them."""
    if isinstance(transport, WithholdsCancels):
        transport.share_cancel_stop(flag)


def server_pids(transport: object) -> Callable[[], list[int]] | None:
    """What lists `transport`'s server processes, when its sessions are
    processes here; None: they live elsewhere (an HTTP upstream)."""
    return transport.server_pids if isinstance(transport, RunsProcesses) else None


# A legacy client's session, ended by its owner (app/fronts/legacy) because its
# transport needs the room: True once ended, False if the owner finds it busy.
OwnerEnd = Callable[[], Awaitable[bool]]


@runtime_checkable
class Reclaimable(Protocol):
    """A session its transport may stop on its own to make room (a stdio process)."""

    def mark_owned(self, end: OwnerEnd | None = None) -> None:
        """One client holds state on it (a legacy client's own session): stopped to
        make room only through `end`, which asks its owner to end the client's
        session with it."""


@runtime_checkable
class Shareable(Protocol):
    """A session another process can speak on too, given what `shared_state` says
    (a Streamable HTTP session: its id and version; nothing lives in memory)."""

    def shared_state(self) -> dict[str, Any] | None:
        """What `Rejoining.rejoin` needs, as JSON; None: this session lives here only."""


@runtime_checkable
class Rejoining(Protocol):
    """A transport that can speak on a session another process opened."""

    def rejoin(self, state: Mapping[str, Any], authorization: str | None) -> Session | None:
        """The session `state` (`Shareable.shared_state`) names; None: not one of ours."""


class Transport(Protocol):
    async def open_session(
        self, initialize: Message, headers: Mapping[str, str]
    ) -> tuple[Session, Message]:
        """Run the initialize handshake; return the session and the initialize result."""

    async def aclose(self) -> None: ...
