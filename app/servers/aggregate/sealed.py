"""What the aggregate hands a client that must come back to the same member:
a `requestState`, a task id, a list cursor. Each is the member's own value (or
the gateway's cursor) sealed with the member's name under the replicas'
`MCP_SHIM_STATE_KEY` (AES-GCM, app/cluster/sealing.py), each kind with a purpose
of its own so that none opens as another, nor as any other sealed value of
the gateway. A client can neither read nor alter which member a value goes
back to; a retry reaches the member that asked. Pure: no clock, no I/O.
"""

from __future__ import annotations

from typing import Any, Final

from app import jsonio
from app.cluster.sealing import Sealer

STATE: Final = b"mcp-shim aggregate requestState v1"
TASK: Final = b"mcp-shim aggregate task id v1"
CURSOR: Final = b"mcp-shim aggregate cursor v1"
# A member's own value sealed in: a named route's sealed state or task id is
# a few hundred characters; a modern server's own state may be larger. Beyond
# this the aggregate refuses to seal (the caller answers an error) rather than
# hand out a value no header or client bound would carry.
MAX_WRAPPED_CHARS: Final = 16384
MAX_TOKEN_CHARS: Final = 2 * MAX_WRAPPED_CHARS


def wrap(sealer: Sealer, purpose: bytes, member: str, value: str) -> str | None:
    """`value` of `member`, sealed; None: too long to seal."""
    if len(value) > MAX_WRAPPED_CHARS:
        return None
    return sealer.seal_bytes(jsonio.dumps({"s": member, "v": value}), purpose)


def unwrap(sealer: Sealer, purpose: bytes, token: object) -> tuple[str, str] | None:
    """(member, its own value) of a token `wrap` sealed for `purpose`; None for
    anything else, one answer for every failure."""
    data = sealer.open_object(token, purpose, MAX_TOKEN_CHARS)
    if data is None:
        return None
    member, value = data.get("s"), data.get("v")
    if not isinstance(member, str) or not isinstance(value, str):
        return None
    return member, value


def seal_cursor(sealer: Sealer, method: str, offset: int) -> str:
    """The gateway's own cursor of a merged list: the method it pages and the
    offset of the next page."""
    return sealer.seal_bytes(jsonio.dumps({"m": method, "o": offset}), CURSOR)


def open_cursor(sealer: Sealer, method: str, token: object) -> int | None:
    """The offset a cursor of `method` names; None: not ours, altered, or a
    cursor of another list."""
    data: dict[str, Any] | None = sealer.open_object(token, CURSOR)
    if data is None or data.get("m") != method:
        return None
    offset = data.get("o")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        return None
    return offset
