"""Task records on a Redis server (`MCP_SHIM_TASK_STORE=redis://...`), shared by
every replica that names the same server and key prefix.

Keys: `<prefix>:task:{<owner tag>}:r:<task id>` holds a record's JSON, with
PEXPIRE at its TTL; `<prefix>:task:{<owner tag>}:live` is a sorted set of the
owner's task ids by creation. The owner tag is an HMAC-SHA256 of the owner (the
SHA-256 of its Authorization) under a subkey of MCP_SHIM_STATE_KEY: whoever
reads the server cannot test guesses of a weak token against it, and replicas
sharing the state key agree on it. It is of fixed length inside the braces, so
no task id can reach into another owner's keys, and all of one owner's keys
share a Redis Cluster hash slot. Records are filed under the current (first)
state key's tag and looked up under every key's, so rotating the key loses no
live task. A record is live
exactly while its key exists: its PEXPIRE is the one clock (the server's), and
the set is pruned of ids whose record has expired. The per-owner bound is
checked and the record filed in one Lua script, which Redis runs atomically,
so replicas creating at once never pass it together.

Every call to the server goes through `_run`: a failure, a refused connection
or a wait over `MCP_SHIM_TASK_STORE_TIMEOUT_S` becomes `TaskStoreUnavailable`
with one log line (rate-limited), never redis-py's own exceptions.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

import structlog
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from app import jsonio
from app.config import DEFAULT_MAX_RECORD_BYTES
from app.tasks.store import (
    Record,
    TaskLimitReached,
    TaskRecordTooLarge,
    TaskStoreUnavailable,
    encoded,
)

log = structlog.get_logger("mcp_shim.tasks")

T = TypeVar("T")

# Connections to the server per store (per gateway process); a call waits for
# a free one within the operation timeout.
MAX_CONNECTIONS: Final = 32
# A failure line at most this often, with the count since the last one: a
# store that is down under load costs a few lines, not one per call.
_LOG_EVERY_S: Final = 10.0

# What the owner tag's subkeys are derived for (app/cluster/sealing.py `Sealer.subkeys`).
OWNER_TAG_LABEL: Final = b"task store owner tag"

# The owner's live ids, with those whose record has expired taken out.
_PRUNE = """
local function prune(live, records)
  local kept = {}
  for _, id in ipairs(redis.call('ZRANGE', live, 0, -1)) do
    if redis.call('EXISTS', records .. id) == 1 then
      kept[#kept + 1] = id
    else
      redis.call('ZREM', live, id)
    end
  end
  return kept
end
"""

# KEYS: the owner's live set, the new record's key. ARGV: the owner's record
# key prefix, the task id, the record, the bound, the TTL in ms.
# 1: filed; 0: the owner is at its bound.
_CREATE = (
    _PRUNE
    + """
if #prune(KEYS[1], ARGV[1]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[5])
-- Creation order, strictly increasing even within one microsecond.
local now = redis.call('TIME')
local score = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] ~= nil and tonumber(last[2]) >= score then
  score = tonumber(last[2]) + 1
end
-- %.0f: Lua would write a number this large with an exponent, losing digits.
redis.call('ZADD', KEYS[1], 'NX', string.format('%.0f', score), ARGV[2])
-- The set lives as long as its longest-lived record (updates keep expiries).
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[5]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
return 1
"""
)

# KEYS: the owner's live set. ARGV: the owner's record key prefix.
_LIVE = _PRUNE + "\nreturn prune(KEYS[1], ARGV[1])\n"


class RedisTaskStore:
    """The `TaskStore` contract (app/tasks/store.py) on a Redis server."""

    def __init__(
        self,
        url: str,
        *,
        tag_keys: Sequence[bytes],
        max_per_owner: int,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        prefix: str = "mcp-shim",
        timeout_s: float = 2.0,
    ) -> None:
        if not tag_keys:
            raise ValueError("the owner tag needs at least one key")
        self.max_per_owner = max_per_owner
        self.max_record_bytes = max_record_bytes
        # The first files, all are looked up (rotation of MCP_SHIM_STATE_KEY).
        self._tag_keys = list(tag_keys)
        self._prefix = prefix
        self._timeout_s = timeout_s
        # One retry on a fresh connection: a pooled connection that the server
        # closed (a restart) fails its first command; more is the timeout's.
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=MAX_CONNECTIONS,
            timeout=timeout_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1),
        )
        self._redis = Redis.from_pool(pool)
        self._create = self._redis.register_script(_CREATE)
        self._live = self._redis.register_script(_LIVE)
        self._failures = 0
        self._logged_at = -1e18

    def _keys(self, owner: str, key: bytes | None = None) -> tuple[str, str]:
        """The owner's live set and the prefix of its record keys, under the tag
        of `key` (the current one by default)."""
        tag = owner_tag(self._tag_keys[0] if key is None else key, owner)
        base = f"{self._prefix}:task:{{{tag}}}"
        return f"{base}:live", f"{base}:r:"

    def _every_keys(self, owner: str) -> list[tuple[str, str]]:
        """`_keys` under each tag key, the current one first."""
        return [self._keys(owner, key) for key in self._tag_keys]

    async def _run(self, op: str, call: Callable[[], Awaitable[T]]) -> T:
        """The one place where the server's failures become ours."""
        try:
            async with asyncio.timeout(self._timeout_s):
                return await call()
        except (RedisError, OSError, TimeoutError, jsonio.JSONDecodeError) as exc:
            reason = "did not answer in time" if isinstance(exc, TimeoutError) else "failed"
            message = f"the task store (MCP_SHIM_TASK_STORE) {reason}; retry later"
            self._log_failure(op, message, exc)
            raise TaskStoreUnavailable(message) from None

    def _log_failure(self, op: str, message: str, exc: BaseException) -> None:
        self._failures += 1
        now = time.monotonic()
        if now - self._logged_at < _LOG_EVERY_S:
            return
        self._logged_at = now
        count, self._failures = self._failures, 0
        # redis-py's messages name the host and port, never the password.
        log.warning(
            "task_store_unavailable",
            op=op,
            error=message,
            cause=f"{type(exc).__name__}: {exc}",
            count_since_last=count,
        )

    async def create(
        self, owner: str, task_id: str, record: Record, ttl_ms: int
    ) -> TaskLimitReached | None:
        data = encoded(record, self.max_record_bytes)
        if isinstance(data, TaskRecordTooLarge):
            return data
        live, records = self._keys(owner)
        args: list[Any] = [records, task_id, data, self.max_per_owner, max(1, ttl_ms)]

        async def call() -> Any:
            return await self._create(keys=[live, records + task_id], args=args)

        filed = await self._run("create", call)
        return None if filed == 1 else TaskLimitReached(self.max_per_owner)

    async def get(self, owner: str, task_id: str) -> Record | None:
        async def call() -> Record | None:
            for _, records in self._every_keys(owner):
                data = await self._redis.get(records + task_id)
                if data is not None:
                    record = jsonio.loads(data)
                    return record if isinstance(record, dict) else None
            return None

        return await self._run("get", call)

    async def update(self, owner: str, task_id: str, record: Record) -> bool:
        data = encoded(record, self.max_record_bytes)
        if isinstance(data, TaskRecordTooLarge):
            return False

        async def call() -> bool:
            for _, records in self._every_keys(owner):
                # XX: only a record that still exists; KEEPTTL: its expiry stays.
                if await self._redis.set(records + task_id, data, xx=True, keepttl=True):
                    return True
            return False

        return await self._run("update", call)

    async def delete(self, owner: str, task_id: str) -> None:
        async def call() -> None:
            # One transaction per tag: one tag's keys share a hash slot, two do not.
            for live, records in self._every_keys(owner):
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.delete(records + task_id)
                    pipe.zrem(live, task_id)
                    await pipe.execute()

        await self._run("delete", call)

    async def live(self, owner: str) -> list[str]:
        async def call() -> list[str]:
            found: list[str] = []
            for live, records in self._every_keys(owner):
                ids = await self._live(keys=[live], args=[records])
                found += [i.decode() if isinstance(i, bytes) else str(i) for i in ids]
            return list(dict.fromkeys(found))

        return await self._run("live", call)

    async def close(self) -> None:
        """The connections closed; the records stay on the server."""
        await self._redis.aclose()


def owner_tag(key: bytes, owner: str) -> str:
    """128 bits of HMAC-SHA256(subkey, owner), as hex: what an owner's keys are
    named by. Keyed, so the tag of a guessed token cannot be computed without
    the state key (an unkeyed hash of a credential hash could)."""
    return hmac.new(key, owner.encode(), hashlib.sha256).hexdigest()[:32]
