"""httpcore (httpx's own transport, under MCP_SHIM_UPSTREAM_HTTP_TRANSPORT=httpx;
the replica relay used it until bench/relay.py showed its cost) asks which async
library runs with `import sniffio` in every lock, event and cancellation shield
it makes, several per request. Without sniffio installed each of those is a
failed import, a search of every sys.path entry (about 85 us each here:
bench/relay.py). sniffio is a pinned dependency for that reason;
this fails if it goes missing again."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

from httpcore._synchronization import current_async_library


class _Searches(importlib.abc.MetaPathFinder):
    """Records every module the import system has to look for."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        self.names.append(fullname)
        return None


async def test_httpcore_finds_its_async_library_without_searching_for_modules() -> None:
    assert current_async_library() == "asyncio"  # the first call may import
    searches = _Searches()
    sys.meta_path.insert(0, searches)
    try:
        for _ in range(20):
            assert current_async_library() == "asyncio"
    finally:
        sys.meta_path.remove(searches)
    assert searches.names == [], f"httpcore searched for {sorted(set(searches.names))}"
