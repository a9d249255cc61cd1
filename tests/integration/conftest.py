from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import procs

# Every gateway these tests start is one process (the single-process path, with
# its process counts and per-process state), whatever the machine's CPU count,
# unless a test sets MCP_SHIM_WORKERS itself (tests/integration/test_workers.py).
os.environ.setdefault("MCP_SHIM_WORKERS", "1")


@pytest.fixture(scope="session")
def logs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def legacy_url(logs_dir: Path) -> Iterator[str]:
    """The legacy fixture server (mcp 1.x, Streamable HTTP with sessions)."""
    with procs.legacy_server(procs.free_port(), log_path=logs_dir / "legacy.log") as url:
        yield url


@pytest.fixture(scope="session")
def gateway_url(legacy_url: str, logs_dir: Path) -> Iterator[str]:
    """Base URL of a gateway process in front of the legacy fixture; MCP endpoint at /mcp."""
    with procs.gateway(legacy_url, procs.free_port(), log_path=logs_dir / "gateway.log") as base:
        yield base


@pytest.fixture(scope="session")
def gateway_log(logs_dir: Path) -> Path:
    return logs_dir / "gateway.log"


@pytest.fixture(scope="session")
def modern_url(logs_dir: Path) -> Iterator[str]:
    """The modern fixture server (mcp 2.x, 2026-07-28 only: it refuses initialize)."""
    with procs.modern_server(procs.free_port(), log_path=logs_dir / "modern.log") as url:
        yield url


@pytest.fixture(scope="session")
def modern_gateway_url(modern_url: str, logs_dir: Path) -> Iterator[str]:
    """Base URL of a gateway in front of the modern fixture (era probed: modern)."""
    log = logs_dir / "modern-gateway.log"
    with procs.gateway(modern_url, procs.free_port(), log_path=log) as base:
        yield base


@pytest.fixture(scope="session")
def modern_gateway_log(logs_dir: Path) -> Path:
    return logs_dir / "modern-gateway.log"
