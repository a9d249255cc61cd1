"""The gateway's readable start line (app/wiring.py `start_line`, `say_started`)."""

from __future__ import annotations

import io
from collections.abc import Mapping

import pytest
import structlog.testing

from app import wiring
from app.config import Settings


def line(found: Mapping[str, object], **values: object) -> str:
    settings = Settings(**values)  # type: ignore[arg-type]
    return wiring.start_line(settings, found)


def test_an_http_upstream_with_what_the_probe_learned() -> None:
    found = {"upstream_era": "modern", "upstream_protocol_version": "2026-07-28"}
    assert line(found, upstream_url="http://127.0.0.1:3001/mcp", port=8080) == (
        "mcp-shim listening on http://127.0.0.1:8080/mcp -> http://127.0.0.1:3001/mcp "
        "(modern 2026-07-28)"
    )


def test_a_failed_probe_is_unknown_and_a_url_loses_its_credentials_and_query() -> None:
    found = {"upstream_era": None, "upstream_protocol_version": None}
    text = line(
        found, upstream_url="https://user:pa55@[::1]:3001/mcp?token=t0k", host="::", port=80
    )
    assert text == "mcp-shim listening on http://[::]:80/mcp -> https://[::1]:3001/mcp (unknown)"


def test_a_stdio_server_is_its_program_alone() -> None:
    found = {"upstream_era": "legacy", "upstream_protocol_version": None}
    text = line(found, upstream_command="npx -y some-server --api-key=s3cret")
    assert text.endswith("-> stdio: npx ... (legacy)"), text
    assert line(found, upstream_command="python3").endswith("-> stdio: python3 (legacy)")


@pytest.mark.parametrize("tty", [True, False])
def test_plain_text_only_on_a_terminal_json_always(
    monkeypatch: pytest.MonkeyPatch, tty: bool
) -> None:
    class Stderr(io.StringIO):
        def isatty(self) -> bool:
            return tty

    stderr = Stderr()
    monkeypatch.setattr("sys.stderr", stderr)
    with structlog.testing.capture_logs() as seen:
        wiring.say_started("mcp-shim listening on x")
    assert seen == [
        {"event": "gateway_listening", "message": "mcp-shim listening on x", "log_level": "info"}
    ]
    assert stderr.getvalue() == ("mcp-shim listening on x\n" if tty else "")
