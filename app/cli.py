"""`mcp-shim`: start the gateway with settings from the environment."""

from __future__ import annotations

import argparse
import socket
import sys
from importlib import metadata

import uvicorn
from fastapi import FastAPI

from app import logs, metrics
from app.config import Settings, SettingsError, load_settings
from app.server import create_app, drain


class GracefulServer(uvicorn.Server):
    """uvicorn, ending long-lived listen streams properly on SIGTERM/SIGINT.

    uvicorn's shutdown stops accepting, waits for open responses up to
    timeout_graceful_shutdown and then cancels them; lifespan shutdown only
    runs afterwards. `drain` first sends each subscriptions/listen stream its
    graceful closing result, so the wait below finds them finished.
    """

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await drain(self._app)
        await super().shutdown(sockets)


def check_listen_address(settings: Settings) -> None:
    """Fail before start-up, naming the variable, when the gateway cannot listen:
    uvicorn would only say so after the application started."""
    try:
        infos = socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise SettingsError(
            f"invalid configuration:\n  MCP_SHIM_HOST: cannot resolve {settings.host!r} "
            f"({exc.strerror})"
        ) from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise SettingsError(
                "invalid configuration:\n  MCP_SHIM_HOST/MCP_SHIM_PORT: cannot listen on "
                f"{settings.host}:{settings.port} ({exc.strerror})"
            ) from None


_DESCRIPTION = """\
Run the mcp-shim gateway: an HTTP endpoint (POST /mcp) that lets MCP clients
of any protocol revision use an MCP server of another revision.

Configuration is by environment variables, not options: MCP_SHIM_UPSTREAM_URL
(required) is the MCP endpoint of the server behind the gateway, e.g.
http://127.0.0.1:3001/mcp; MCP_SHIM_HOST and MCP_SHIM_PORT (default
127.0.0.1:8080) where the gateway listens. Every MCP_SHIM_* variable is listed
in README.md ("Configuration")."""


def _version() -> str:
    try:
        return metadata.version("mcp-shim")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: only --help, --version and the `serve` subcommand; the
    settings themselves are environment variables. Unknown arguments exit 2."""
    parser = argparse.ArgumentParser(
        prog="mcp-shim",
        usage="%(prog)s [-h] [--version] [serve]",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example: MCP_SHIM_UPSTREAM_URL=http://127.0.0.1:3001/mcp mcp-shim",
    )
    parser.add_argument("--version", action="version", version=f"mcp-shim {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    # A subcommand from the start, so that others (a `probe`) can join it.
    commands.add_parser("serve", help="run the gateway (the default when no command is given)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    parse_args(argv)
    try:
        settings = load_settings()
        check_listen_address(settings)
        metrics.check_port(settings.host, settings.metrics_port)
    except SettingsError as exc:
        print(f"mcp-shim: {exc}", file=sys.stderr)
        sys.exit(2)
    logs.configure(settings.log_level)
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_config=None,
        access_log=False,
        lifespan="on",
        # Headers and bodies of a slow client must not hold a worker forever.
        timeout_keep_alive=30,
        timeout_graceful_shutdown=10,
    )
    server = GracefulServer(config, app)
    app.state.metrics.watch_server(server.server_state)  # open connections, requests served
    try:
        server.run()
    except KeyboardInterrupt:
        # uvicorn re-raises Ctrl-C after its graceful shutdown; nothing is wrong.
        sys.exit(130)
    if not server.started:
        sys.exit(3)  # uvicorn's STARTUP_FAILURE, as uvicorn.run does


if __name__ == "__main__":
    main()
