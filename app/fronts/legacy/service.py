"""The legacy service: what the legacy front (`POST`, `GET`, `DELETE /mcp`,
app/fronts/legacy/front.py) and the HTTP+SSE front (app/fronts/http_sse/front.py)
share to serve a legacy client's session.

The sessions (`sessions`), a session's calls and what comes back for them
(`calls`, app/fronts/legacy/calls.py), the limits every route applies the
same way, and the relay to the replica owning an id that is not here
(`relayed`). Built once by app/wiring.py and handed to both fronts, so
neither front calls the other. Opening a session is app/fronts/legacy/opening.py,
a session's GET stream app/fronts/legacy/stream.py: both take the sessions
and settings from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

from app import jsonio
from app.cluster.replicas import HOP_HEADER, ReplicaRelay, header_items
from app.cluster.session import LegacySession
from app.fronts.legacy import checks as front
from app.fronts.legacy.calls import LegacyCalls
from app.fronts.legacy.replies import owner_unreachable, refuse
from app.fronts.legacy.sessions import LegacySessions
from app.fronts.shared.auth import AuthRelay
from app.metrics import Metrics
from app.rejections import Rejection, RequestId
from translators.registry import Version


class LegacyService:
    def __init__(
        self,
        sessions: LegacySessions,
        *,
        offered: Version,
        max_batch: int,
        write_timeout_s: float,
        max_json_depth: int = jsonio.DEFAULT_MAX_DEPTH,
        auth_relay: AuthRelay | None = None,
        relay: ReplicaRelay | None = None,
        keepalive_s: float = 15.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.sessions = sessions
        # The version offered to the upstream at initialize (MCP_SHIM_UPSTREAM_PROTOCOL_VERSION).
        self.offered = offered
        self.max_batch = max_batch
        self.max_json_depth = max_json_depth
        self.write_timeout_s = write_timeout_s
        # A quiet GET stream gets an SSE comment this often, or proxies cut it.
        self.keepalive_s = keepalive_s
        self.auth_relay = auth_relay
        # Toward the replica owning a session that is not here (app/cluster/replicas.py).
        self.relay = relay
        self.calls = LegacyCalls(sessions, auth_relay=auth_relay, metrics=metrics)

    def relayed(
        self,
        method: str,
        target: str,
        session_id: str | None,
        headers: Mapping[str, str],
        body: bytes = b"",
        *,
        long_lived: bool = False,
        owned: str = "legacy_session",
        request_id: RequestId | None = None,
    ) -> Response | None:
        """The owner's answer, when the id (a session's, an HTTP+SSE channel's) names
        another replica (app/cluster/replicas.py); None: serve it here (which answers 404
        for an id that is not here)."""
        if self.relay is None:
            return None
        owner = self.sessions.elsewhere(
            session_id, headers.get("authorization"), HOP_HEADER in headers
        )
        if owner is None:
            return None
        return self.relay.answer(
            owner,
            method,
            target,
            header_items(headers),
            body,
            what=owned,
            long_lived=long_lived,
            unreachable=lambda: refuse(owner_unreachable(request_id)),
            write_timeout_s=self.write_timeout_s,
        )

    def batch_members(
        self, items: list[Any], session: LegacySession | None
    ) -> list[front.LegacyMessage] | Rejection:
        """The batch rules (`front.batch_members`) as every route applies them, by the
        session's negotiated version."""
        version = session.client_version if session is not None else None
        return front.batch_members(items, version, self.max_batch)
