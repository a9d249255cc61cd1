"""What running tasks may hold of the upstream, so calls that are not tasks
always find room.

A task outlives the request that created it: a 2025-11-25 task pins the
upstream session that created it (its id is valid only there, app/tasks/live.py)
and, while its questions are open, a `tasks/result` stream; a task the
gateway runs itself (app/tasks/own.py) holds a lane (a session of its own),
its call's stream and the lane's GET stream. The pool reclaims only idle
sessions, so without a bound of their own tasks created by credentials each
within their own share could take every session and connection, and every
other caller would be refused for the tasks' lifetime.

`TaskBounds` counts what tasks hold against their own bounds, below the
gateway's (docs/operations.md, "Limits", Tasks): the sessions pinned by at
least one task (several tasks of one pool key share a session and count it
once), in all and per credential, and the upstream connections tasks hold
open, in all and per credential. Taking is synchronous (no await between
the check and the count), so concurrent creations never pass a bound
together; every take is given back exactly once by its holder.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import structlog

from app.call import CallState, Outgoing
from app.config import TaskLimits
from app.rejections import INTERNAL_ERROR, Rejection

log = structlog.get_logger("mcp_shim.tasks")

SESSIONS_SETTING = "MCP_SHIM_TASK_MAX_SESSIONS"
SESSION_SHARE_SETTING = "MCP_SHIM_TASK_MAX_SESSIONS_PER_CREDENTIAL"
CONNECTIONS_SETTING = "MCP_SHIM_TASK_MAX_CONNECTIONS"
CONNECTION_SHARE_SETTING = "MCP_SHIM_TASK_MAX_CONNECTIONS_PER_CREDENTIAL"


# No bound (a bridge built without settings for them: unit tests).
UNBOUNDED = TaskLimits(2**62, 2**62, 2**62, 2**62)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A task the bounds have no room for: the limit and the setting that set it."""

    limit: int
    setting: str
    what: str  # "upstream sessions" or "upstream connections"
    per_credential: bool

    @property
    def message(self) -> str:
        whose = "this caller's credentials' tasks" if self.per_credential else "tasks"
        return (
            f"Internal error: {whose} already hold {self.limit} {self.what}, the most tasks "
            f"may hold ({self.setting}); retry when a task has finished, or call the tool "
            "without the tasks extension"
        )

    @property
    def http_status(self) -> int:
        return 429 if self.per_credential else 503


class TaskBounds:
    def __init__(self, limits: TaskLimits) -> None:
        self.limits = limits
        # Tasks pinning each session (keyed by the session object itself), and
        # the credential each pinned session counts for.
        self._pins: Counter[object] = Counter()
        self._session_owner: dict[object, str] = {}
        self._sessions_of: Counter[str] = Counter()
        self._connections = 0
        self._connections_of: Counter[str] = Counter()

    @property
    def sessions(self) -> int:
        """Upstream sessions pinned by at least one task."""
        return len(self._pins)

    @property
    def connections(self) -> int:
        """Upstream connections held open by tasks."""
        return self._connections

    def pin(self, session: object, credentials: str) -> Refusal | None:
        """One more task on `session`; refused when it would make one session
        more than the bounds allow. Given back with `unpin`."""
        if session not in self._pins:
            limits = self.limits
            if self._sessions_of[credentials] >= limits.sessions_per_credential:
                return self._refused(
                    limits.sessions_per_credential, SESSION_SHARE_SETTING, "sessions", True
                )
            if len(self._pins) >= limits.sessions:
                return self._refused(limits.sessions, SESSIONS_SETTING, "sessions", False)
            self._session_owner[session] = credentials
            self._sessions_of[credentials] += 1
        self._pins[session] += 1
        return None

    def move(self, stale: object, fresh: object) -> None:
        """A task's session replaced by a fresh one of the same key (the upstream
        forgot the stale one): its pin goes along, whatever the bounds (the
        count of sessions does not grow)."""
        credentials = self._session_owner.get(stale)
        if credentials is None:
            return
        self.unpin(stale)
        if fresh not in self._pins:
            self._session_owner[fresh] = credentials
            self._sessions_of[credentials] += 1
        self._pins[fresh] += 1

    def unpin(self, session: object) -> None:
        if session not in self._pins:
            return
        self._pins[session] -= 1
        if self._pins[session] > 0:
            return
        del self._pins[session]
        credentials = self._session_owner.pop(session)
        self._sessions_of[credentials] -= 1
        if self._sessions_of[credentials] <= 0:
            del self._sessions_of[credentials]

    def take_connections(self, credentials: str, count: int = 1) -> Refusal | None:
        """`count` more connections held open by a task of `credentials`; given
        back with `give_connections`."""
        limits = self.limits
        if self._connections_of[credentials] + count > limits.connections_per_credential:
            return self._refused(
                limits.connections_per_credential, CONNECTION_SHARE_SETTING, "connections", True
            )
        if self._connections + count > limits.connections:
            return self._refused(limits.connections, CONNECTIONS_SETTING, "connections", False)
        self._connections += count
        self._connections_of[credentials] += count
        return None

    def give_connections(self, credentials: str, count: int = 1) -> None:
        self._connections -= count
        self._connections_of[credentials] -= count
        if self._connections_of[credentials] <= 0:
            del self._connections_of[credentials]

    def hold(self, session: object, credentials: str, connections: int = 0) -> Hold | Refusal:
        """A new task's pin on `session` and the `connections` it keeps open for its
        whole life, taken together or not at all."""
        refused = self.pin(session, credentials)
        if refused is not None:
            return refused
        if connections:
            refused = self.take_connections(credentials, connections)
            if refused is not None:
                self.unpin(session)
                return refused
        return Hold(self, credentials, session, connections)

    @staticmethod
    def _refused(limit: int, setting: str, what: str, per_credential: bool) -> Refusal:
        return Refusal(limit, setting, f"upstream {what}", per_credential)


@dataclass(eq=False)
class Hold:
    """What one task holds against the bounds; `release` gives it back, once."""

    bounds: TaskBounds
    credentials: str
    session: object
    connections: int
    released: bool = False

    def move(self, fresh: object) -> None:
        if not self.released:
            self.bounds.move(self.session, fresh)
            self.session = fresh

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        self.bounds.unpin(self.session)
        if self.connections:
            self.bounds.give_connections(self.credentials, self.connections)


def refusal_reply(call_id: Any, refusal: Refusal, state: CallState) -> Outgoing:
    """The answer to a task-creating call beyond a bound: nothing was started
    upstream; HTTP 503 (the tasks' bound) or 429 (the credential's share), with
    Retry-After, -32603 naming the setting."""
    log.warning("task_bound_reached", limit=refusal.limit, setting=refusal.setting)
    state.outcome = "task_limit"
    rejection = Rejection(INTERNAL_ERROR, refusal.message, call_id, status=refusal.http_status)
    headers = (("retry-after", "1"),)
    return Outgoing(rejection.to_message(), True, refusal.http_status, headers=headers)


__all__ = [
    "UNBOUNDED",
    "Hold",
    "Refusal",
    "TaskBounds",
    "refusal_reply",
]
