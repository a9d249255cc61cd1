"""One subscriptions/listen stream held open until the server ends it.

Usage: listen_until_closed.py URL READY_FILE

Writes READY_FILE once the subscription is acknowledged, then iterates it:
the mcp 2.x client ends the loop quietly on the server's graceful closing
result and raises SubscriptionLost on an abrupt drop. Reports which one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from _common import connect, main
from mcp.client.subscriptions import SubscriptionLost


async def run(url: str, args: list[str]) -> dict[str, Any]:
    ready = Path(args[0])
    async with connect(url) as client:
        out: dict[str, Any] = {"protocolVersion": client.protocol_version}
        async with client.listen(tools_list_changed=True) as sub:
            out["id"] = sub.subscription_id
            await anyio.Path(ready).write_text("acknowledged")
            events = 0
            try:
                with anyio.fail_after(60):
                    async for _ in sub:
                        events += 1
                out["ended"] = "graceful"
            except SubscriptionLost as exc:
                out["ended"] = "lost"
                out["error"] = str(exc)
            out["events"] = events
        return out


if __name__ == "__main__":
    main(run)
