"""`mcp-shim probe`: what the gateway will find behind it, before deploying it.

With the gateway's own settings, the probe first tells the upstream's era as
the gateway does (app/upstream/sessions/era.py: a `server/discover` POST to an HTTP
upstream; a stdio server is legacy). A modern (2026-07-28) upstream keeps no
session and refuses `initialize`: the probe reads its `DiscoverResult` and
sends the list methods of its capabilities as stateless modern requests. A
legacy one gets one session through the transport the gateway would use
(`app.upstream.choice.build_upstream`): `initialize` and
`notifications/initialized`, the list methods, then the session is closed
(DELETE over HTTP, the process stopped over stdio). An HTTP upstream is then
asked whether it speaks the other era too (a dual-era server): a modern one
gets a legacy `initialize`, its session closed at once (DELETE), nothing asked
in it; one the gateway treats as legacy, a `server/discover` unless the era
probe already had its refusal. Nothing else is sent, so nothing can change on
the server. The report: the server, its era and negotiated version, the
transport, its capabilities as declared and as 2026-07-28 clients will see
them, its tools, whether it is dual-era and what each MCP_SHIM_UPSTREAM_ERA
then gives, and what the gateway translates for a 2026-07-28 client, derived
from the translator registry (the negotiated version's features against
2026-07-28's), not from a list kept here.

Exit codes (also in `mcp-shim probe --help`): 0 the upstream answered; 2 the
configuration is invalid; 3 unreachable; 4 refused (an HTTP error, an
authorization challenge, a JSON-RPC error or something that is not MCP);
5 timed out; 6 the stdio command failed to start or exited.

Here the command line; asking.py asks in one era, dual_era.py in the other,
run.py runs both under the timeout into the report or an exit code, report.py
renders the report as text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from app.config import SettingsError
from app.probe.many import probe_servers
from app.probe.report import render
from app.probe.run import (
    EXIT_CONFIG,
    EXIT_OK,
    JSON_SHAPE,
    ProbeFailed,
    describe_upstream,
    run_probe,
)
from app.settings.load import load_settings
from app.settings.servers import read_servers
from app.upstream.choice import transport_name

DESCRIPTION = """\
Connect to the upstream named by the gateway's own environment
(MCP_SHIM_UPSTREAM_URL or MCP_SHIM_UPSTREAM_COMMAND, with every other MCP_SHIM_*
setting) through the transport the gateway would use, and print the server, its
protocol version, capabilities and tools, and what the gateway translates for
2026-07-28 clients. Only server/discover, initialize and list methods are sent
(a modern upstream's lists are asked statelessly; its initialize only tells
whether it is dual-era, the session closed at once); a session is closed
afterwards (DELETE over HTTP, the process stopped over stdio). A dual-era
upstream is reported with what each MCP_SHIM_UPSTREAM_ERA gives."""

EXIT_CODES_HELP = """\
exit codes:
  0  the upstream answered (the report is printed)
  2  invalid configuration (the variable is named) or command line
  3  unreachable: nothing accepted the connection, or it broke
  4  refused: an HTTP error or authorization challenge, a JSON-RPC error to
     initialize or server/discover, or an answer that is not MCP
  5  timed out (--timeout, or MCP_SHIM_STDIO_START_TIMEOUT_S for a command)
  6  the stdio command failed to start or exited (its last stderr lines shown)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="longest the whole probe may take (default 30)",
    )


def main(args: argparse.Namespace) -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"mcp-shim probe: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.timeout <= 0:
        print("mcp-shim probe: --timeout must be above 0", file=sys.stderr)
        return EXIT_CONFIG
    try:
        servers = read_servers(settings)
    except SettingsError as exc:
        print(f"mcp-shim probe: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if servers is not None:
        return probe_servers(settings, servers, args.timeout, args.json)
    try:
        report = asyncio.run(run_probe(settings, args.timeout))
    except ProbeFailed as failed:
        if args.json:
            _out(
                json.dumps(
                    {
                        "shape": JSON_SHAPE,
                        "ok": False,
                        "exitCode": failed.code,
                        "reason": failed.reason,
                        "upstream": describe_upstream(settings),
                        "transport": transport_name(settings),
                    }
                )
            )
        print(f"mcp-shim probe: {failed.reason}", file=sys.stderr)
        return failed.code
    _out(json.dumps(report, indent=2) if args.json else render(report))
    return EXIT_OK


def _out(text: str) -> None:
    """Print the report; a reader that stopped early (`mcp-shim probe | head -3`)
    is not an error of the probe."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python would report the failed flush again at exit: stdout goes nowhere now.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
