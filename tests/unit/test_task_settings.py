"""MCP_SHIM_TASK_STORE and the task bounds: what starts, what is refused at
start-up (naming the variable, never quoting a URL that may hold a password),
and the store each choice builds."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from app.cluster.sealing import Sealer, generate_key
from app.config import Settings, SettingsError
from app.settings.load import load_settings
from app.tasks.factory import build_task_store, is_shared
from app.tasks.redis_store import RedisTaskStore
from app.tasks.store import MemoryTaskStore
from tests import procs


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    monkeypatch.setenv("MCP_SHIM_UPSTREAM_URL", "http://127.0.0.1:9/mcp")
    for name, value in env.items():
        monkeypatch.setenv(f"MCP_SHIM_{name}", value)
    return load_settings()


@pytest.mark.parametrize(
    ("value", "url"),
    [
        ("", None),
        ("memory", None),
        (" memory ", None),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://cache", "redis://cache"),
        ("rediss://:s3cret@cache.example:6380/2", "rediss://:s3cret@cache.example:6380/2"),
    ],
)
def test_accepted_task_stores(monkeypatch: pytest.MonkeyPatch, value: str, url: str | None) -> None:
    settings = _settings(monkeypatch, TASK_STORE=value)
    assert settings.task_store_url() == url
    assert is_shared(settings) is (url is not None)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("postgres://:s3cret@db/1", "neither memory nor a redis://"),
        ("redis", "neither memory nor a redis://"),
        ("redis://:s3cret@", "names no host"),
        ("redis://:s3cret@cache:99999/0", "port that is not a number"),
        ("redis://:s3cret@cache:0/0", "port 0"),
        ("redis://:s3cret@cache:6379/zero", "not a database number"),
        ("redis://:s3cret@cache:6379/0?ssl_cert_reqs=none", "query"),
    ],
)
def test_refused_task_stores(monkeypatch: pytest.MonkeyPatch, value: str, says: str) -> None:
    with pytest.raises(SettingsError) as caught:
        _settings(monkeypatch, TASK_STORE=value)
    text = str(caught.value)
    assert "MCP_SHIM_TASK_STORE:" in text and says in text
    assert "s3cret" not in text and "cache" not in text
    assert "use memory, redis://host:port/db or rediss://host:port/db" in text


def test_a_url_never_shows_in_the_settings_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch, TASK_STORE="redis://:s3cret@cache:6379/0")
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TASK_TTL_MS": "999"}, "MCP_SHIM_TASK_TTL_MS"),
        ({"TASK_TTL_MS": str(8 * 24 * 3_600_000)}, "MCP_SHIM_TASK_TTL_MS"),
        ({"TASK_STORE_PREFIX": "a b"}, "MCP_SHIM_TASK_STORE_PREFIX"),
        ({"TASK_STORE_PREFIX": ""}, "MCP_SHIM_TASK_STORE_PREFIX"),
        ({"MAX_TASKS_PER_CREDENTIAL": "0"}, "MCP_SHIM_MAX_TASKS_PER_CREDENTIAL"),
        ({"MAX_TASK_RESULT_BYTES": "100"}, "MCP_SHIM_MAX_TASK_RESULT_BYTES"),
        ({"TASK_STORE_TIMEOUT_S": "0"}, "MCP_SHIM_TASK_STORE_TIMEOUT_S"),
    ],
)
def test_refused_task_bounds(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], says: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        _settings(monkeypatch, **env)
    assert says in str(caught.value)


def test_the_factory_builds_the_store_named(monkeypatch: pytest.MonkeyPatch) -> None:
    sealer = Sealer([generate_key()])
    memory = build_task_store(
        _settings(monkeypatch, MAX_TASKS_PER_CREDENTIAL="7", MAX_TASK_RESULT_BYTES="2048"), sealer
    )
    assert isinstance(memory, MemoryTaskStore)
    assert (memory.max_per_owner, memory.max_record_bytes) == (7, 2048)
    # Built without connecting: nothing listens on port 9.
    shared = build_task_store(_settings(monkeypatch, TASK_STORE="redis://127.0.0.1:9/0"), sealer)
    assert isinstance(shared, RedisTaskStore)
    assert (shared.max_per_owner, shared.max_record_bytes) == (7, 2048)
    asyncio.run(shared.close())


def test_redis_py_is_loaded_only_for_the_redis_store() -> None:
    # A fresh interpreter: sys.modules is per process.
    script = (
        "import sys, os\n"
        "os.environ['MCP_SHIM_UPSTREAM_URL'] = 'http://127.0.0.1:9/mcp'\n"
        "import app.serving.cli\n"
        "from app.settings.load import load_settings\n"
        "from app.tasks.factory import build_task_store\n"
        "from app.cluster.sealing import Sealer, generate_key\n"
        "build_task_store(load_settings(), Sealer([generate_key()]))\n"
        "print('redis' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=procs.ROOT,
    )
    assert out.stdout.strip().splitlines()[-1] == "False"
