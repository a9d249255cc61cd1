"""What reading one request's exchange of a shared stream costs (stdio,
HTTP+SSE: app/upstream/sessions/routing.py), on uvloop, without a process or a socket.

    .venv/bin/python bench/exchange_read.py [--iterations 50000] [--rounds 5]

Each iteration is what a legacy call over stdio does with its exchange: the
router opens it, the reader waits for the answer (its queue is empty), the
answer is dispatched from another callback as the stdout reader does, the
reader takes it and the exchange is closed. Printed: this process's CPU time
per iteration (`time.process_time`), best and median of `--rounds`, with the
request timeout armed (as the gateway runs) and without one. Run it on two
trees to compare them (bench/JOURNAL.md, "Sixth session").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.upstream.sessions.routing import Router


async def _nothing(message: dict[str, Any]) -> None:
    return None


async def run(iterations: int, timeout_s: float | None) -> float:
    loop = asyncio.get_running_loop()
    router = Router("bench", initialized=lambda: True, respond=_nothing)
    request = {"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": {}}
    started = time.process_time()
    for i in range(iterations):
        request["id"] = i
        exchange = router.open(request, timeout_s)  # type: ignore[arg-type]
        loop.call_soon(router.dispatch, {"jsonrpc": "2.0", "id": i, "result": {}})
        async for _ in exchange:
            pass
        await exchange.aclose()
    return (time.process_time() - started) / iterations * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for label, timeout_s in (("request timeout armed (300 s)", 300.0), ("no timeout", None)):
        figures = [uvloop.run(run(args.iterations, timeout_s)) for _ in range(args.rounds)]
        print(
            f"{label}: best {min(figures):.2f} us, median {statistics.median(figures):.2f} us "
            f"per exchange ({args.rounds} rounds of {args.iterations:,})"
        )


if __name__ == "__main__":
    main()
