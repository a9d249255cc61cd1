"""The record of a legacy session's tasks on a modern upstream
(app/upstream/modern/tasks.py, `LegacyTasks`): bounded, oldest out first, and a
task the gateway keeps itself forgotten at its ttl."""

from __future__ import annotations

from typing import Any

from app.upstream.modern.tasks import LegacyTasks


def record(limit: int) -> LegacyTasks:
    # The record never reaches the session or the upstream.
    none: Any = None
    return LegacyTasks(none, none, limit)


def test_the_record_keeps_the_newest_tasks() -> None:
    tasks = record(2)
    for task_id in ("a", "b", "c"):
        tasks.created(task_id)
    assert tasks.task_ids() == ["b", "c"]
    assert not tasks.known("a") and tasks.known("c")
    assert not tasks.known(None) and not tasks.known(1)


def test_a_call_answered_at_once_is_a_completed_task_until_its_ttl() -> None:
    tasks = record(5)
    kept = tasks.answered_at_once({"content": []}, 60_000)
    assert kept["status"] == "completed" and kept["ttl"] == 60_000
    assert tasks.known(kept["taskId"])
    gone = tasks.answered_at_once({"content": []}, 0)
    assert not tasks.known(gone["taskId"])
    assert gone["taskId"] not in tasks.task_ids()
    unlimited = tasks.answered_at_once({"content": []}, None)
    assert unlimited["ttl"] is None and tasks.known(unlimited["taskId"])
    assert tasks.answered_at_once({}, True)["ttl"] is None
