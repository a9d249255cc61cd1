"""`mcp-shim probe`: the report as text (`--json` prints it as it is)."""

from __future__ import annotations

from typing import Any


def render(report: dict[str, Any]) -> str:
    server = report["server"]
    name = f"{server.get('name') or '(no serverInfo)'} {server.get('version') or ''}"
    lines = [
        f"server:      {name.rstrip()}",
        f"upstream:    {report['upstream']} ({report['transport']})",
        f"protocol:    {report['protocolVersion']} ({report['era']}; offered "
        f"{report['offeredProtocolVersion']})",
        "capabilities: " + (", ".join(_capability_summary(report["capabilities"])) or "none"),
    ]
    tools = report["tools"]
    if tools is not None:
        lines.append(f"tools ({len(tools)}): " + (", ".join(tools) or "none"))
    for key, label in (
        ("prompts", "prompts"),
        ("resources", "resources"),
        ("resourceTemplates", "resource templates"),
    ):
        if report[key] is not None:
            lines.append(f"{label}: {report[key]}")
    for method, error in report["listErrors"].items():
        lines.append(f"{method} failed: {error}")
    lines.extend(_dual_era_lines(report))
    lines.append(f"for {report['modernVersion']} clients the gateway:")
    lines.extend(f"  - {item['description']}" for item in report["translations"])
    return "\n".join(lines)


def _dual_era_lines(report: dict[str, Any]) -> list[str]:
    other = report["otherEra"]
    if other is None:
        return []
    if report["dualEra"]:
        lines = [
            f"dual-era:    yes, it also speaks {other['protocolVersion']} ({other['era']}); "
            "MCP_SHIM_UPSTREAM_ERA chooses what 2026-07-28 clients get:"
        ]
        for choice in report["eraChoices"]:
            now = " (in force)" if choice["chosen"] else ""
            lines.append(f"  {choice['era']}, {choice['setting']}{now}: {choice['summary']}")
        return lines
    word = "no" if other["accepted"] is False else "not known"
    return [f"dual-era:    {word} ({other['era']}: {other['reason']})"]


def _capability_summary(capabilities: dict[str, Any]) -> list[str]:
    out = []
    for name, value in capabilities.items():
        flags = [k for k, v in value.items() if v is True] if isinstance(value, dict) else []
        out.append(f"{name} ({', '.join(flags)})" if flags else name)
    return out
