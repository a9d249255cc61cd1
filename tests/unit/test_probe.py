"""`mcp-shim probe`'s pure parts: what it says the gateway translates (derived from
the translator registry) and how a failure becomes an exit code."""

from __future__ import annotations

from typing import Any

import pytest

from app import probe
from app.upstream.errors import (
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamHttpError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.stdio import StdioProcessExited
from translators.registry import LATEST_LEGACY, get_version


def version(name: str) -> Any:
    found = get_version(name)
    assert found is not None
    return found


def described(items: list[dict[str, str]], ident: str) -> str:
    matching = [item["description"] for item in items if item["id"] == ident]
    assert len(matching) == 1, (ident, items)
    return matching[0]


def test_server_requests_of_the_upstream_version_become_input_required() -> None:
    # 2024-11-05 servers may ask for roots and sampling; elicitation came in 2025-06-18.
    old = described(probe.translations(version("2024-11-05"), {}), "inputRequired")
    assert "roots/list" in old and "sampling/createMessage" in old
    assert "elicitation/create" not in old
    new = described(probe.translations(version("2025-06-18"), {}), "inputRequired")
    assert "elicitation/create" in new
    assert "tools/call" in new and "prompts/get" in new and "resources/read" in new


def test_tasks_only_for_versions_that_have_them() -> None:
    assert "tasks/get" in described(probe.translations(version("2025-11-25"), {}), "serverRequests")
    assert "tasks" not in described(probe.translations(version("2025-06-18"), {}), "serverRequests")


def test_error_renumbering_follows_the_registry() -> None:
    text = described(probe.translations(version("2025-11-25"), {}), "errorCodes")
    # 2026-07-28 changelog: resource not found -32002 -> -32602.
    assert text == "error codes renumbered: -32002 -> -32602 (resource not found)"


def test_log_level_only_when_the_server_logs() -> None:
    v = version("2025-11-25")
    assert "logLevel" not in {t["id"] for t in probe.translations(v, {})}
    assert "logLevel" in {t["id"] for t in probe.translations(v, {"logging": {}})}


def test_listen_names_what_it_can_deliver() -> None:
    caps = {"tools": {"listChanged": True}, "resources": {"subscribe": True, "listChanged": False}}
    text = described(probe.translations(version("2025-11-25"), caps), "listen")
    assert "tools.listChanged" in text and "resources.subscribe" in text
    assert "resources.listChanged" not in text
    assert "declares none" in described(probe.translations(version("2025-11-25"), {}), "listen")


def test_nothing_but_message_steps_between_two_legacy_versions() -> None:
    """Derived, not listed: toward a legacy version there is no session, discover,
    resultType or input_required translation to report."""
    items = probe.translations(version("2025-03-26"), {"logging": {}}, modern=LATEST_LEGACY)
    assert [item["id"] for item in items] == ["messages"]
    assert items[0]["description"].endswith("2025-03-26 -> 2025-06-18 -> 2025-11-25")


@pytest.mark.parametrize(
    ("error", "transport", "code", "start"),
    [
        (
            UpstreamTimeout("upstream timed out during initialize"),
            "streamable-http",
            5,
            "timed out",
        ),
        (UpstreamUnavailable("upstream unreachable"), "streamable-http", 3, "unreachable"),
        (UpstreamHttpError("upstream refused initialize with HTTP 404", 404), "sse", 4, "refused"),
        (UpstreamAuthChallenge("upstream answered with HTTP 401", 401, None), "sse", 4, "refused"),
        (UpstreamProtocolError("upstream refused initialize: -32602 x"), "stdio", 4, "refused"),
        (StdioProcessExited("exited"), "stdio", 6, "the upstream command"),
        (UpstreamUnavailable("could not be started: No such file"), "stdio", 6, "the upstream"),
    ],
)
def test_failures_become_distinct_exit_codes(
    error: UpstreamError, transport: str, code: int, start: str
) -> None:
    failed = probe._failure(error, transport, probe._Captured())
    assert failed.code == code
    assert failed.reason.startswith(start)
    assert "\n" not in failed.reason


def test_a_failed_commands_stderr_tail_is_bounded_and_on_one_line() -> None:
    captured = probe._Captured(exit_tail=[f"line {i} " + "x" * 200 for i in range(20)], exit_code=1)
    failed = probe._failure(StdioProcessExited("exited"), "stdio", captured)
    assert failed.reason.startswith("the upstream command exited with code 1 during initialize")
    assert "line 19" in failed.reason and "line 14" not in failed.reason
    assert len(failed.reason) < 600 and "\n" not in failed.reason
