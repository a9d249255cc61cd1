"""The Redis task store's owner tag (app/tasks/redis_store.py): keyed with a
subkey of MCP_SHIM_STATE_KEY, not a plain hash that anyone reading the server
could test guessed tokens against."""

from __future__ import annotations

import asyncio
import hashlib

from app.cluster.sealing import Sealer
from app.tasks.redis_store import OWNER_TAG_LABEL, RedisTaskStore, owner_tag
from app.upstream.sessions.pool import credential_hash

OWNER = credential_hash("Bearer weak")


def _store(sealer: Sealer) -> RedisTaskStore:
    # Built without connecting: nothing listens on port 9.
    keys = sealer.subkeys(OWNER_TAG_LABEL)
    return RedisTaskStore("redis://127.0.0.1:9/0", tag_keys=keys, max_per_owner=4)


def _live_key(store: RedisTaskStore) -> str:
    live, _ = store._keys(OWNER)
    return live


def test_the_tag_is_no_plain_hash_of_the_owner() -> None:
    store = _store(Sealer([b"k" * 32]))
    try:
        plain = hashlib.sha256(OWNER.encode()).hexdigest()[:32]
        assert plain not in _live_key(store)
        tag = owner_tag(Sealer([b"k" * 32]).subkeys(OWNER_TAG_LABEL)[0], OWNER)
        assert _live_key(store) == f"mcp-shim:task:{{{tag}}}:live" and len(tag) == 32
    finally:
        asyncio.run(store.close())


def test_the_tag_depends_on_the_state_key_and_replicas_sharing_it_agree() -> None:
    one, same, other = (_store(Sealer([k * 32])) for k in (b"k", b"k", b"o"))
    try:
        assert _live_key(one) == _live_key(same) != _live_key(other)
        # Another owner, another tag.
        assert one._keys(credential_hash("Bearer other")) != one._keys(OWNER)
    finally:
        for store in (one, same, other):
            asyncio.run(store.close())


def test_subkeys_are_per_label_and_never_the_state_key() -> None:
    sealer = Sealer([b"n" * 32, b"k" * 32])
    tags, other = sealer.subkeys(OWNER_TAG_LABEL), sealer.subkeys(b"something else")
    assert len(tags) == 2 and tags[1] == Sealer([b"k" * 32]).subkeys(OWNER_TAG_LABEL)[0]
    assert not set(tags) & set(other) and b"n" * 32 not in tags and b"k" * 32 not in tags
