"""What the HTTP clients toward the upstream share, below all of them: the
legacy transport (app/upstream/streamable_http/transport.py), aiohttp's session
(app/upstream/httpclient/aiohttp_client.py, imported by the first request that needs it)
and the replicas' relay (app/cluster/replicas.py) import it, and it imports none of
them (docs/architecture.md, "Imports point down")."""

from __future__ import annotations

# Idle pooled upstream connections are dropped after this long, unless
# MCP_SHIM_UPSTREAM_KEEPALIVE_S says otherwise (app/config.py says why 4 s).
KEEPALIVE_S = 4.0


def printable_ascii(value: str) -> bool:
    # RFC 9110 field values: visible ASCII, spaces and tabs (obs-text aside).
    return value.isascii() and all(c == "\t" or " " <= c <= "~" for c in value)


class BodyTooLarge(Exception):
    """An answer's body read past MCP_SHIM_MAX_UPSTREAM_ANSWER_BYTES (decoded), by
    an adapter that bounds it while reading (aiohttp's, httpx's; h1 has its own
    `AnswerTooLarge`); its connection is closed with the answer."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"answer over {limit} bytes")
        self.limit = limit
