"""The transport of a modern upstream for legacy clients: their sessions opened.

The legacy front (app/fronts/legacy) speaks to an upstream session, opened with
`initialize`. In front of a 2026-07-28 server, which has no handshake and no
session, `ModernTransport.open_session` answers the gateway's `initialize` from
the upstream's `server/discover` (capabilities and `serverInfo` translated down
to the offered legacy version, `instructions` kept); nothing is opened upstream.
The sessions of one upstream share its list cache and its listen hub.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

from app.call import Message
from app.quoting import quoted
from app.upstream.errors import UpstreamProtocolError
from app.upstream.modern.list_cache import ListCache
from app.upstream.modern.listen import ListenHub
from app.upstream.modern.session import ModernSession
from app.upstream.modern.upstream import ModernHttpUpstream
from app.upstream.sessions.era import EraProbe, newest_common, probe_era
from app.upstream.sessions.pool import credential_hash
from translators import translate
from translators.registry import LATEST_MODERN, get_version


class ModernTransport:
    def __init__(self, upstream: ModernHttpUpstream, probe: EraProbe | None = None) -> None:
        self._upstream = upstream
        self._probe = probe
        self.lists = ListCache()
        self.hub = ListenHub(upstream, self.lists)
        self._sessions: weakref.WeakSet[ModernSession] = weakref.WeakSet()

    async def open_session(
        self, initialize: Message, headers: Mapping[str, str]
    ) -> tuple[ModernSession, Message]:
        params = initialize.get("params") or {}
        offered = get_version(params.get("protocolVersion"))
        assert offered is not None
        authorization = headers.get("authorization")
        # A refusal that names no era raises `EraInconclusive`: the caller
        # learns the upstream's status, and the stored era stays as it is.
        era = await probe_era(self._upstream, LATEST_MODERN, authorization)
        result = era.discover
        if result is None:
            raise UpstreamProtocolError(
                f"upstream answered server/discover without a DiscoverResult ({era.name} era)"
            )
        modern = newest_common(result.get("supportedVersions"))
        if modern is None:
            raise UpstreamProtocolError(
                "upstream supports no modern protocol version this gateway knows: "
                f"{quoted(result.get('supportedVersions'))}"
            )
        # The discover result in the legacy shape: an InitializeResult.
        legacy = translate.result(result, "server/discover", modern, offered)
        init: Message = {
            "protocolVersion": offered.name,
            "capabilities": legacy.get("capabilities") or {},
            "serverInfo": legacy.get("serverInfo") or {"name": "unknown", "version": "0"},
        }
        if isinstance(result.get("instructions"), str):
            init["instructions"] = result["instructions"]
        session = ModernSession(
            self._upstream,
            modern=modern,
            legacy=offered,
            client_capabilities=params.get("capabilities") or {},
            client_info=params.get("clientInfo"),
            authorization=authorization,
            server_capabilities=result.get("capabilities") or {},
            probe=self._probe,
            seen=self._probe.known if self._probe is not None else None,
            hub=self.hub,
            transport=self,
        )
        self._sessions.add(session)
        return session, init

    def announce(self, notification: str, credential: str, source: ModernSession) -> None:
        """A list changed under the sessions of `credential`: tell the others on
        their GET streams (`source` fetched the new list itself)."""
        note: Message = {"jsonrpc": "2.0", "method": notification}
        for session in list(self._sessions):
            if session is not source and credential_hash(session.authorization) == credential:
                session.announce(note)

    async def aclose(self) -> None:
        await self.hub.aclose()
