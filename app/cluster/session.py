"""One legacy session as the gateway holds it, its owner's or a guest copy:
`LegacySession`, the lease that counts it in use, the rule that keeps a
string id with an integer id's text ("1") apart from that integer, and a
session's binding to the credential that opened it (`held_by`). The legacy
front's sessions (app/fronts/legacy/sessions.py) and their guest copies in
other workers (app/cluster/guests.py) are both made of it, so it sits below
both.
"""

from __future__ import annotations

import asyncio
import hmac
import math
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from app.upstream.sessions.pool import PooledSession, credential_hash
from translators.registry import Version

# Requests waiting for an answer, per session and direction: beyond this the
# oldest is forgotten (its answer then passes untranslated).
MAX_PENDING = 256

# What str() of an integer id gives: a string id with this text goes upstream
# from the owner only (IdTurns keeps it and the integer one apart there).
_NUMBER_TEXT = re.compile(r"0|-?[1-9][0-9]*")


def shares_integer_text(request_id: Any) -> bool:
    """A string id whose text an integer id has too ("1" and 1)."""
    return isinstance(request_id, str) and _NUMBER_TEXT.fullmatch(request_id) is not None


def held_by(credentials: str, authorization: str | None) -> bool:
    """Whether `authorization` is the credential whose hash (`credential_hash`) the
    session was opened with; compared in constant time, so the answer's timing
    tells nothing of the hash. A client's session (a legacy session, an
    HTTP+SSE channel) is bound to the credential that opened it: a request
    carrying another `Authorization` does not find it, and is answered as for
    an unknown id (404)."""
    return hmac.compare_digest(credentials, credential_hash(authorization))


# A guest's way to tell the owner a server request (or a call left to resume
# on the GET stream) its client will answer there: kind, request id, method.
Remembered = Callable[["LegacySession", str, Any, str], Awaitable[None]]


@dataclass(eq=False)
class LegacySession:
    id: str
    credentials: str
    client_version: Version
    upstream: PooledSession
    last_used: float = field(default_factory=time.monotonic)
    in_flight: int = 0  # leases held: requests and GET streams
    streams: int = 0  # GET streams among them
    # The owner's: when a guest copy last said it was used (a touch), since a
    # request may run there unseen here.
    used_elsewhere: float = -math.inf
    ended: bool = False
    # Requests the upstream sent the client, by id: their method, so the
    # client's answer is translated as the result of that method.
    server_requests: dict[Any, str] = field(default_factory=dict)
    # The client's requests not answered yet, by id: their method, so a response
    # the upstream replays on the GET stream (Last-Event-ID) is translated too.
    open_requests: dict[Any, str] = field(default_factory=dict)
    # A guest copy: the replica owning the session (app/cluster/notes.py),
    # told what only it can serve; None: the session is this process's own.
    owner: str | None = None
    remembered: Remembered | None = None
    # The owner's: the replicas holding a guest copy, told when it ends.
    guests: set[str] = field(default_factory=set)
    # Id texts an integer id could share ("1") in flight at the owner, which the
    # guests must not send upstream meanwhile (IdTurns across workers): counted
    # at the owner, waited on (until released) in a guest copy.
    holds: Counter[str] = field(default_factory=Counter)
    held: dict[str, asyncio.Event] = field(default_factory=dict)

    @property
    def upstream_version(self) -> Version:
        return self.upstream.version

    def remember_server_request(self, request_id: Any, method: str) -> None:
        _bounded_put(self.server_requests, request_id, method)

    def remember_request(self, request_id: Any, method: str) -> None:
        _bounded_put(self.open_requests, request_id, method)

    async def tell_owner(self, kind: str, request_id: Any, method: str) -> None:
        """A guest copy's server request (`server`) or call to resume on the GET
        stream (`open`), told to the owner, which serves what answers them."""
        if self.remembered is not None:
            await self.remembered(self, kind, request_id, method)


class Lease:
    """A session counted as in use while held (`stream`: a GET stream): the idle
    reaper and the bound leave it alone. A class rather than a generator-based
    context manager, since every legacy call takes one (a generator costs more
    to enter and leave)."""

    __slots__ = ("_session", "_stream")

    def __init__(self, session: LegacySession, stream: bool = False) -> None:
        self._session = session
        self._stream = stream

    async def __aenter__(self) -> LegacySession:
        self._session.in_flight += 1
        self._session.streams += self._stream
        self._session.last_used = time.monotonic()
        return self._session

    async def __aexit__(self, *_exc: object) -> None:
        self._session.in_flight -= 1
        self._session.streams -= self._stream
        self._session.last_used = time.monotonic()


def _bounded_put(table: dict[Any, str], key: Any, method: str) -> None:
    if key not in table and len(table) >= MAX_PENDING:
        table.pop(next(iter(table)))
    table[key] = method
