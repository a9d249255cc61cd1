"""An upstream session that does nothing, for tests of the pool's accounting
(tests/unit/upstream/test_pool_bounds.py, test_pool_expiry.py): it only remembers
whether it was closed."""

from __future__ import annotations

from typing import Any


class Session:
    def __init__(self) -> None:
        self.closed = False

    async def request(self, message: dict[str, Any]) -> Any:
        raise AssertionError("not used")

    async def notify(self, message: dict[str, Any]) -> None:
        pass

    async def respond(self, message: dict[str, Any]) -> None:
        pass

    async def listen(self, last_event_id: str | None = None) -> Any:
        raise AssertionError("not used")

    async def close(self) -> None:
        self.closed = True
