"""docs/settings.md: every setting of app/config.py, its tables written from `Settings`."""

from __future__ import annotations

import re

from app.config import Settings
from scripts import settings_doc


def test_every_setting_has_one_row_in_one_group() -> None:
    listed = [field for _title, rows in settings_doc.GROUPS for field, _line in rows]
    assert len(listed) == len(set(listed)), "a setting is listed twice"
    assert set(listed) == set(Settings.model_fields), set(listed) ^ set(Settings.model_fields)


def test_the_essentials_come_first_and_stay_few() -> None:
    title, rows = settings_doc.GROUPS[0]
    assert title == "Essentials" and len(rows) <= 10
    assert {"upstream_url", "upstream_command", "port", "allowed_hosts"} <= {f for f, _ in rows}


def test_one_line_each() -> None:
    for _title, rows in settings_doc.GROUPS:
        for field, line in rows:
            assert "|" not in line and len(line) <= 90, (field, line)


def test_the_tables_in_docs_are_current() -> None:
    current = settings_doc.DOC.read_text(encoding="utf-8")
    assert settings_doc.rendered(current) == current, (
        "docs/settings.md is stale: run .venv/bin/python scripts/settings_doc.py"
    )


def test_every_setting_has_a_details_section() -> None:
    details = settings_doc.DOC.read_text(encoding="utf-8").split(settings_doc.END, 1)[1]
    headings = re.findall(r"^#### `(MCP_SHIM_[A-Z0-9_]+)`$", details, flags=re.MULTILINE)
    assert sorted(headings) == sorted(settings_doc.variable(f) for f in Settings.model_fields)


def test_defaults_come_from_settings() -> None:
    tables = settings_doc.tables()
    assert "| [`MCP_SHIM_PORT`](#mcp_shim_port) | `8080` | 1-65535 |" in tables
    assert (
        "| [`MCP_SHIM_MAX_BODY_BYTES`](#mcp_shim_max_body_bytes) | `4194304` | ≥ 1024 |" in tables
    )
