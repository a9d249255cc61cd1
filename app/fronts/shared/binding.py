"""A client's session (a legacy session, an HTTP+SSE channel) is bound to the
credential that opened it: a request carrying another `Authorization` does not
find it, and is answered as for an unknown id (404)."""

from __future__ import annotations

import hmac

from app.upstream.sessions.pool import credential_hash


def held_by(credentials: str, authorization: str | None) -> bool:
    """Whether `authorization` is the credential whose hash (`credential_hash`) the
    session was opened with; compared in constant time, so the answer's timing
    tells nothing of the hash."""
    return hmac.compare_digest(credentials, credential_hash(authorization))
