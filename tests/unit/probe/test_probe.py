"""`mcp-shim probe`'s pure parts: what it says the gateway translates (derived from
the translator registry) and how a failure becomes an exit code."""

from __future__ import annotations

from typing import Any

import pytest

from app.probe import asking, dual_era, report, run
from app.upstream.errors import (
    UpstreamAuthChallenge,
    UpstreamError,
    UpstreamHttpError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from app.upstream.stdio.process import StdioProcessExited
from translators.explain import translations
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
    old = described(translations(version("2024-11-05"), {}), "inputRequired")
    assert "roots/list" in old and "sampling/createMessage" in old
    assert "elicitation/create" not in old
    new = described(translations(version("2025-06-18"), {}), "inputRequired")
    assert "elicitation/create" in new
    assert "tools/call" in new and "prompts/get" in new and "resources/read" in new


def test_tasks_only_for_versions_that_have_them() -> None:
    assert "tasks/get" in described(translations(version("2025-11-25"), {}), "serverRequests")
    assert "tasks" not in described(translations(version("2025-06-18"), {}), "serverRequests")


def test_error_renumbering_follows_the_registry() -> None:
    text = described(translations(version("2025-11-25"), {}), "errorCodes")
    # 2026-07-28 changelog: resource not found -32002 -> -32602.
    assert text == "error codes renumbered: -32002 -> -32602 (resource not found)"


def test_log_level_only_when_the_server_logs() -> None:
    v = version("2025-11-25")
    assert "logLevel" not in {t["id"] for t in translations(v, {})}
    assert "logLevel" in {t["id"] for t in translations(v, {"logging": {}})}


def test_listen_names_what_it_can_deliver() -> None:
    caps = {"tools": {"listChanged": True}, "resources": {"subscribe": True, "listChanged": False}}
    text = described(translations(version("2025-11-25"), caps), "listen")
    assert "tools.listChanged" in text and "resources.subscribe" in text
    assert "resources.listChanged" not in text
    assert "declares none" in described(translations(version("2025-11-25"), {}), "listen")


def test_nothing_but_message_steps_between_two_legacy_versions() -> None:
    """Derived, not listed: toward a legacy version there is no session, discover,
    resultType or input_required translation to report."""
    items = translations(version("2025-03-26"), {"logging": {}}, modern=LATEST_LEGACY)
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
    failed = run._failure(error, transport, run._Captured())
    assert failed.code == code
    assert failed.reason.startswith(start)
    assert "\n" not in failed.reason


def test_a_failed_commands_stderr_tail_is_bounded_and_on_one_line() -> None:
    captured = run._Captured(exit_tail=[f"line {i} " + "x" * 200 for i in range(20)], exit_code=1)
    failed = run._failure(StdioProcessExited("exited"), "stdio", captured)
    assert failed.reason.startswith("the upstream command exited with code 1 during initialize")
    assert "line 19" in failed.reason and "line 14" not in failed.reason
    assert len(failed.reason) < 600 and "\n" not in failed.reason


# -- a dual-era upstream: what each MCP_SHIM_UPSTREAM_ERA gives ------------------

MODERN = version("2026-07-28")


def found(era: str, name: str, capabilities: dict[str, Any] | None = None) -> Any:
    return asking.Found(
        era=era,
        version=version(name),
        offered=name,
        transport="streamable-http",
        server={},
        capabilities=capabilities or {},
        instructions=False,
    )


def ids(items: list[dict[str, str]]) -> set[str]:
    return {item["id"] for item in items}


@pytest.mark.parametrize("setting", ["auto", "modern"])
def test_a_modern_upstream_that_accepts_initialize_offers_both_choices(setting: str) -> None:
    other = dual_era.OtherEra("legacy", True, LATEST_LEGACY, {"tools": {}, "logging": {}})
    modern, legacy = dual_era.era_choices(found("modern", MODERN.name), other, setting)
    assert (modern["era"], modern["chosen"], modern["protocolVersion"]) == (
        "modern",
        True,
        "2026-07-28",
    )
    assert ids(modern["translations"]) == {"passThrough"}
    assert (legacy["era"], legacy["chosen"], legacy["protocolVersion"]) == (
        "legacy",
        False,
        LATEST_LEGACY.name,
    )
    assert legacy["setting"] == "MCP_SHIM_UPSTREAM_ERA=legacy"
    # The legacy choice's translations are those of the version its initialize
    # negotiated, with the capabilities it declared there.
    assert {"sessions", "inputRequired", "logLevel"} <= ids(legacy["translations"])
    assert "input_required" in legacy["summary"] and "pooled" in legacy["summary"]


def test_a_forced_legacy_upstream_that_answers_discover_shows_legacy_in_force() -> None:
    other = dual_era.OtherEra("modern", True, MODERN, {"tools": {}})
    choices = dual_era.era_choices(found("legacy", "2025-06-18"), other, "legacy")
    assert [(c["era"], c["chosen"], c["protocolVersion"]) for c in choices] == [
        ("modern", False, "2026-07-28"),
        ("legacy", True, "2025-06-18"),
    ]


@pytest.mark.parametrize(
    "other",
    [
        None,  # a stdio upstream: never asked
        dual_era.OtherEra("legacy", False, reason="upstream refused initialize: -32602 x"),
        dual_era.OtherEra("legacy", None, reason="upstream timed out"),
        dual_era.OtherEra("modern", False, reason="it refused server/discover"),
    ],
)
def test_one_era_only_or_not_known_offers_no_choice(other: Any) -> None:
    assert dual_era.era_choices(found("modern", MODERN.name), other, "auto") == []


def report_with(other: Any, upstream: Any) -> dict[str, Any]:
    return {
        "dualEra": None if other is None else other.accepted,
        "otherEra": None if other is None else other.describe(),
        "eraChoices": dual_era.era_choices(upstream, other, "auto"),
    }


def test_the_text_report_says_dual_era_and_each_choice() -> None:
    other = dual_era.OtherEra("legacy", True, LATEST_LEGACY, {})
    lines = report._dual_era_lines(report_with(other, found("modern", MODERN.name)))
    assert lines[0].startswith(f"dual-era:    yes, it also speaks {LATEST_LEGACY.name} (legacy)")
    assert lines[1].startswith("  modern, MCP_SHIM_UPSTREAM_ERA=auto|modern (in force): ")
    assert lines[2].startswith("  legacy, MCP_SHIM_UPSTREAM_ERA=legacy: the gateway's translation")


def test_the_text_report_says_why_not_dual_era_with_the_upstreams_words_bounded() -> None:
    refused = dual_era.OtherEra(
        "legacy", False, reason="upstream refused initialize: " + "x" * 5000
    )
    (line,) = report._dual_era_lines(report_with(refused, found("modern", MODERN.name)))
    assert line.startswith("dual-era:    no (legacy: upstream refused initialize: xxx")
    assert len(line) < dual_era.REASON_CHARS + 40
    unknown = dual_era.OtherEra("modern", None, reason="timed out")
    (line,) = report._dual_era_lines(report_with(unknown, found("legacy", "2025-11-25")))
    assert line == "dual-era:    not known (modern: timed out)"
    assert report._dual_era_lines(report_with(None, found("legacy", "2025-11-25"))) == []
