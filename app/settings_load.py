"""The settings read from the environment, or `SettingsError` naming every bad
variable: the `MCP_SHIM_*` names that are no setting and each value `Settings`
refused, said as app/settings_check.py says them."""

from __future__ import annotations

import os

from pydantic import SecretStr, ValidationError

from app import settings_check
from app.config import Settings, SettingsError


def load_settings(state_key: str | None = None) -> Settings:
    """The settings from the environment; `state_key`: MCP_SHIM_STATE_KEY when it
    was handed over by a descriptor rather than the environment (app/serving/state_key.py).
    An `MCP_SHIM_*` variable that is no setting is an error (app/settings_check.py)."""
    lines = settings_check.unknown_variables(os.environ, Settings.model_fields)
    try:
        settings = Settings(state_key=SecretStr(state_key)) if state_key is not None else Settings()
    except ValidationError as exc:
        lines += settings_check.error_lines(exc, Settings)
    if lines:
        raise SettingsError("invalid configuration:\n  " + "\n  ".join(lines)) from None
    return settings
