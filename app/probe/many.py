"""`mcp-shim probe` with a servers file: every server probed as the gateway
would reach it (its own settings, its stdio variables and directory), one
after the other (each probe keeps the log lines of its own stdio server) and
each under the timeout; a report per server, and an exit code that is
not 0 when any server could not be probed (the first failing server's code)."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from app.config import Settings, SettingsError
from app.probe.report import render
from app.probe.run import (
    EXIT_CONFIG,
    EXIT_OK,
    JSON_SHAPE,
    ProbeFailed,
    describe_upstream,
    run_probe,
)
from app.settings.servers import Servers, server_settings, where_of
from app.upstream.choice import transport_name


async def _one(settings: Settings, env: dict[str, str], cwd: str | None, timeout_s: float) -> Any:
    try:
        return await run_probe(settings, timeout_s, env=env, cwd=cwd)
    except ProbeFailed as failed:
        return failed


def probe_servers(settings: Settings, servers: Servers, timeout_s: float, as_json: bool) -> int:
    """Print every server's report (or its failure); the exit code."""
    where = where_of(settings)
    try:
        own = [server_settings(settings, spec, where) for spec in servers.specs]
    except SettingsError as exc:
        print(f"mcp-shim probe: {exc}", file=sys.stderr)
        return EXIT_CONFIG

    async def every() -> list[Any]:
        return [
            await _one(mine, dict(spec.env), spec.cwd, timeout_s)
            for mine, spec in zip(own, servers.specs, strict=True)
        ]

    outcomes = asyncio.run(every())
    code = EXIT_OK
    reports: dict[str, Any] = {}
    for spec, mine, outcome in zip(servers.specs, own, outcomes, strict=True):
        if isinstance(outcome, ProbeFailed):
            code = code or outcome.code
            reports[spec.name] = {
                "shape": JSON_SHAPE,
                "ok": False,
                "exitCode": outcome.code,
                "reason": outcome.reason,
                "upstream": describe_upstream(mine),
                "transport": transport_name(mine),
            }
        else:
            reports[spec.name] = outcome
    if as_json:
        print(
            json.dumps({"shape": JSON_SHAPE, "ok": code == EXIT_OK, "servers": reports}, indent=2)
        )
        return code
    for name, report in reports.items():
        print(f"== {name} (/servers/{name}/mcp)")
        if report["ok"]:
            print(render(report))
        else:
            print(f"failed (exit {report['exitCode']}): {report['reason']}")
        print()
    return code
