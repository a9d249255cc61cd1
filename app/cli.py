"""`mcp-shim`: start the gateway with settings from the environment."""

from __future__ import annotations

import socket
import sys

import uvicorn
from fastapi import FastAPI

from app import logs
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


def main() -> None:
    try:
        settings = load_settings()
        check_listen_address(settings)
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
    try:
        server.run()
    except KeyboardInterrupt:
        # uvicorn re-raises Ctrl-C after its graceful shutdown; nothing is wrong.
        sys.exit(130)
    if not server.started:
        sys.exit(3)  # uvicorn's STARTUP_FAILURE, as uvicorn.run does


if __name__ == "__main__":
    main()
