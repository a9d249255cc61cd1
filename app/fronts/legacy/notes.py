"""The small notes the workers (replicas) send each other about legacy sessions.

A legacy client's plain requests on a Streamable HTTP upstream need nothing of
the worker that opened the session but the upstream session's id and the two
versions, so another worker serves them itself: it *joins* the session once
(asking its owner for that state) and from then on speaks to the upstream
directly. What keeps the session one session is these notes, never a
request's relay:

- `join` (a worker to the owner): the owner answers with the upstream
  session's state, and from then on knows that worker holds a copy;
- `touch` (a worker to the owner, every few seconds while it uses copies): the
  owner's idle clock, which ends idle sessions and makes room at the bound,
  counts the other workers' use; the owner answers with the sessions it no
  longer has, which the worker forgets;
- `end` (the owner to the workers that joined): the session ended (DELETE,
  idle, reclaimed, expired); they forget their copy before the client's
  DELETE is answered;
- `expired` (a worker to the owner): the upstream answered 404 for it;
- `remember` (a worker to the owner): a server request met on a call (the
  client answers it with a POST, relayed to the owner) or a call left to be
  resumed on the GET stream (the owner's), so the owner translates them;
- `cancel` (the owner to the workers that joined): a client's
  `notifications/cancelled` for a call one of them serves.

Each note is sealed with the state key (app/mrtr/state.py, its own purpose):
only a replica of this deployment can send one or read its answer, and the
upstream session id it carries is never readable on the wire.
"""

from __future__ import annotations

from typing import Any, Final

import structlog

from app import jsonio
from app.mrtr.state import Sealer
from app.replicas import MAX_NOTE_BYTES, ReplicaRelay

log = structlog.get_logger("mcp_shim.legacy")

_PURPOSE: Final = b"mcp-shim legacy note v1"
_REPLY_PURPOSE: Final = b"mcp-shim legacy note reply v1"
# A note is small and between replicas: one that takes longer is as good as lost.
NOTE_TIMEOUT_S: Final = 5.0


class Notes:
    """Sealing, sending and opening the notes; `me` is this replica's advertised URL."""

    def __init__(self, sealer: Sealer, relay: ReplicaRelay, me: str) -> None:
        self._sealer = sealer
        self._relay = relay
        self.me = me

    async def send(
        self, replica: str, note: dict[str, Any], *, as_long_as_a_call: bool = False
    ) -> dict[str, Any] | None:
        """The owner's (or worker's) answer to `note`, or None: not delivered.
        `as_long_as_a_call`: the answer may wait for a call in flight there (a
        `hold`), so it is waited for as long as a call (MCP_SHIM_REQUEST_TIMEOUT_S)."""
        body = self._sealer.seal_bytes(jsonio.dumps(note), _PURPOSE).encode("ascii")
        timeout_s = self._relay.request_timeout_s if as_long_as_a_call else NOTE_TIMEOUT_S
        reply = await self._relay.note(replica, body, timeout_s=timeout_s)
        log.info("replica_note", kind=note.get("k"), replica=replica[:200], ok=reply is not None)
        if reply is None:
            return None
        return _opened(self._sealer, reply, _REPLY_PURPOSE)

    def open(self, body: bytes) -> dict[str, Any] | None:
        """A note another replica sealed, or None (not one: forged, altered, too big)."""
        return _opened(self._sealer, body, _PURPOSE)

    def seal_reply(self, reply: dict[str, Any]) -> bytes:
        return self._sealer.seal_bytes(jsonio.dumps(reply), _REPLY_PURPOSE).encode("ascii")


def _opened(sealer: Sealer, body: bytes, purpose: bytes) -> dict[str, Any] | None:
    try:
        token = body.decode("ascii")
    except UnicodeDecodeError:
        return None
    return sealer.open_object(token, purpose, max_chars=2 * MAX_NOTE_BYTES)
