"""`mcp-shim`: start the gateway with settings from the environment."""

from __future__ import annotations

import sys

import uvicorn

from app import logs
from app.config import SettingsError, load_settings
from app.server import create_app


def main() -> None:
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"mcp-shim: {exc}", file=sys.stderr)
        sys.exit(2)
    logs.configure(settings.log_level)
    uvicorn.run(
        create_app(settings),
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


if __name__ == "__main__":
    main()
