"""The list cache of a modern upstream's legacy sessions.

A list (`tools/list`, `prompts/list`, `resources/list`,
`resources/templates/list`) is served again from `ListCache` while the
upstream's `ttlMs` says it is fresh: a legacy client has no such field, so the
gateway honours it for it. Entries are per credential; a re-fetch after expiry
that finds a different list sends `notifications/*/list_changed` to the
credential's other legacy sessions (`ModernTransport.announce`), the one way a
legacy client learns that the copy it keeps is stale.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

from app import jsonio
from app.call import Message
from app.upstream.sessions.pool import credential_hash
from translators import v2024_11_05
from translators.registry import Version

# The cacheable lists (2026-07-28 server/utilities/caching "Cacheable Results";
# resources/read is left to the upstream), each with the member that holds its
# items and the notification that says it changed (the translators' table).
LISTS = {method: (item.member, item.changed) for method, item in v2024_11_05.LISTS.items()}
# Bound on the cached list pages (all credentials together), least recently used out first.
LIST_CACHE_ENTRIES = 256


CacheKey = tuple[str, str, str, str]  # credential hash, method, canonical params, modern version


class _Cached:
    __slots__ = ("digest", "fresh_until", "result")

    def __init__(self, result: Message, fresh_until: float, digest: bytes) -> None:
        self.result = result
        self.fresh_until = fresh_until
        self.digest = digest


class ListCache:
    """Modern list results kept as long as their `ttlMs` says (2026-07-28
    server/utilities/caching "Time-to-Live (TTL) Field": "If `ttlMs` is
    positive, the client SHOULD consider the result fresh for that many
    milliseconds after receiving the response"), for the legacy sessions,
    whose clients cannot see the field.

    Keyed by the caller's credential hash, the method, its parameters (the
    cursor: each page is its own entry, "Interaction with Pagination") and the
    modern version: callers with different credentials never share an entry,
    even for `cacheScope: "public"`, which would allow it. Nothing is
    refreshed in the background ("Clients SHOULD NOT treat TTL as a polling
    interval"); an expired entry stays until its key is fetched again, to say
    whether the list changed."""

    def __init__(
        self, size: int = LIST_CACHE_ENTRIES, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[CacheKey, _Cached] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(authorization: str | None, message: Message, modern: Version) -> CacheKey | None:
        method = message.get("method")
        if method not in LISTS:
            return None
        params = message.get("params")
        params = dict(params) if isinstance(params, dict) else {}
        params.pop("_meta", None)
        if "inputResponses" in params or "requestState" in params:
            return None  # "Cache Key": results of a multi round-trip retry MUST NOT be cached
        canonical = jsonio.dumps_sorted(params).decode()
        return (credential_hash(authorization), str(method), canonical, modern.name)

    def fresh(self, key: CacheKey) -> Message | None:
        entry = self._entries.get(key)
        if entry is None or self._clock() >= entry.fresh_until:
            return None
        self._entries.move_to_end(key)
        return entry.result

    def store(self, key: CacheKey, result: Message) -> bool:
        """Keep `result` for its `ttlMs`; True if it replaces an entry whose list differs."""
        member = LISTS[key[1]][0]
        digest = hashlib.sha256(
            jsonio.dumps_sorted([result.get(member), result.get("nextCursor")])
        ).digest()
        before = self._entries.pop(key, None)
        changed = before is not None and before.digest != digest
        ttl = result.get("ttlMs")
        # "If `ttlMs` is negative, clients SHOULD ignore it and treat it as `0`";
        # 0 is "immediately stale": nothing to serve, but the digest is kept, so a
        # later fetch still tells whether the list changed.
        ttl_s = ttl / 1000 if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0 else 0
        self._entries[key] = _Cached(result, self._clock() + ttl_s, digest)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return changed

    def invalidate(self, notification: str) -> None:
        """An upstream `list_changed`: "the notification **invalidates** the cached
        response and it should be considered immediately stale" ("Interaction
        with Notifications"), for every credential."""
        methods = {m for m, (_, note) in LISTS.items() if note == notification}
        for key, entry in self._entries.items():
            if key[1] in methods:
                entry.fresh_until = 0.0
