"""The task store `MCP_SHIM_TASK_STORE` names, built from the settings once.

Apart from app/tasks/store.py because the Redis store imports that module's
values: the factory there would tie the two modules both ways.
"""

from __future__ import annotations

from app.cluster.sealing import Sealer
from app.config import Settings
from app.tasks.store import MemoryTaskStore, TaskStore


def build_task_store(settings: Settings, sealer: Sealer) -> TaskStore:
    """The in-memory store, or the Redis one (imported only then: redis-py is
    not loaded by a gateway that does not use it), its owner tags keyed with
    subkeys of `sealer`'s keys (MCP_SHIM_STATE_KEY, shared by the replicas)."""
    url = settings.task_store_url()
    if url is None:
        return MemoryTaskStore(
            settings.max_tasks_per_credential, max_record_bytes=settings.max_task_result_bytes
        )
    from app.tasks.redis_store import OWNER_TAG_LABEL, RedisTaskStore

    return RedisTaskStore(
        url,
        tag_keys=sealer.subkeys(OWNER_TAG_LABEL),
        max_per_owner=settings.max_tasks_per_credential,
        max_record_bytes=settings.max_task_result_bytes,
        prefix=settings.task_store_prefix,
        timeout_s=settings.task_store_timeout_s,
    )


def is_shared(settings: Settings) -> bool:
    """Whether task records outlive this process and are seen by other replicas."""
    return settings.task_store_url() is not None
