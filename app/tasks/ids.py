"""Task ids the gateway hands out: sealed, naming their owner.

A task id the client sees is the gateway's, never the upstream's: it is
sealed (AES-GCM, the replicas' `MCP_SHIM_STATE_KEY`, app/cluster/sealing.py) with
a purpose of its own, so that neither a `requestState` nor a session id ever
opens as one, and says which replica runs the task, what the upstream calls
it and whose it is (the digest of the caller's credential hash). A task id
presented with another credential is "not found", exactly as an unknown one:
nothing tells the caller the task exists. Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from app import jsonio
from app.cluster.sealing import Sealer, caller_digest

PURPOSE: Final = b"mcp-shim task id v1"
# The requestState of an input round before a task is shown (app/tasks/create.py).
ROUND_PURPOSE: Final = b"mcp-shim task round v1"
# A sealed id is ~200 characters; an upstream task id longer than this is
# refused rather than sealed into something no header can carry (the task is
# cancelled upstream and the call fails, 502: app/tasks/create.py).
MAX_UPSTREAM_ID_CHARS: Final = 512


@dataclass(frozen=True, slots=True)
class TaskRef:
    """What a task id says."""

    owner: str  # caller_digest of the caller's credential hash
    replica: str  # the replica that runs it
    upstream_id: str  # the upstream's task id ("" for a task the gateway runs itself)
    local: str  # the gateway's own handle of the task on that replica


def upstream_id_fits(upstream_id: str) -> bool:
    """Whether the upstream's task id may be sealed into one of ours."""
    return len(upstream_id) <= MAX_UPSTREAM_ID_CHARS


def owner_of(credential_hash: str) -> str:
    return caller_digest(credential_hash)


def seal(sealer: Sealer, ref: TaskRef) -> str:
    plain = jsonio.dumps({"o": ref.owner, "r": ref.replica, "u": ref.upstream_id, "l": ref.local})
    return sealer.seal_bytes(plain, PURPOSE)


def open_for(sealer: Sealer, token: object, owner: str) -> TaskRef | None:
    """The task a caller with `owner` names, or None: not a task id of ours,
    altered, or another owner's (all alike to the caller)."""
    data = sealer.open_object(token, PURPOSE)
    if data is None:
        return None
    fields = (data.get("o"), data.get("r"), data.get("u"), data.get("l"))
    if not all(isinstance(f, str) for f in fields):
        return None
    ref = TaskRef(*fields)  # type: ignore[arg-type]
    return ref if ref.owner == owner else None


def seal_round(sealer: Sealer, task_id: str, owner: str) -> str:
    """The requestState of the input round that precedes task `task_id`."""
    return sealer.seal_bytes(jsonio.dumps({"t": task_id, "o": owner}), ROUND_PURPOSE)


def open_round(sealer: Sealer, token: object, owner: str) -> str | None:
    """The task id a round's requestState names, for its owner only."""
    data = sealer.open_object(token, ROUND_PURPOSE)
    if data is None or data.get("o") != owner or not isinstance(data.get("t"), str):
        return None
    return str(data["t"])
