"""The settings from their sources, or `SettingsError` naming every fault.

Sources, highest first: the command-line flags (written into the environment
before this runs: app/settings/command.py `apply_flags`), the environment
(`MCP_SHIM_*`), the settings file `MCP_SHIM_CONFIG` (app/settings/file.py),
the defaults. The file's value of a setting is used only when the
environment does not set it; `MCP_SHIM_UPSTREAM_HEADERS`, from whichever
source, is resolved here (its `{"file": ...}` values read:
app/settings/headers.py). Then the rules that read the built model
(app/settings/rules.py). Every fault is said as app/settings/check.py says
it: the `MCP_SHIM_*` names that are no setting, the file's keys that are
none, each value refused, naming the file where the value came from it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import SecretStr, ValidationError

from app.config import Settings, SettingsError
from app.settings import check, rules
from app.settings.file import FileSettings, read
from app.settings.headers import fixed_headers

_HEADERS = "upstream_headers"


@dataclass(frozen=True, slots=True)
class Loaded:
    """The settings, and which of them the settings file gave (for `mcp-shim config`)."""

    settings: Settings
    file: FileSettings | None

    @property
    def from_file(self) -> frozenset[str]:
        """The fields whose value is the file's (the environment did not set them)."""
        return frozenset(self.file.values) if self.file is not None else frozenset()


def load_settings(state_key: str | None = None) -> Settings:
    """The settings from the flags, the environment and the settings file;
    `state_key`: MCP_SHIM_STATE_KEY when it was handed over by a descriptor
    rather than the environment (app/serving/state_key.py)."""
    return load(state_key).settings


def load(state_key: str | None = None) -> Loaded:
    """`load_settings`, with what the settings file gave."""
    environ = os.environ
    lines = check.unknown_variables(environ, Settings.model_fields)
    in_environment = _fields_set(environ)
    file: FileSettings | None = None
    path = _value_of(environ, check.variable("config"))
    if path:
        try:
            file = read(path, Settings.model_fields)
        except SettingsError as exc:
            # The file's faults alone: the settings without it would only add
            # faults that its values fix (no upstream named, say).
            faults = "\n  ".join([*lines, str(exc)])
            raise SettingsError(f"invalid configuration:\n  {faults}") from None
    values: dict[str, object] = {}
    if file is not None:
        # The environment wins: the file's value only for what it does not set.
        file = FileSettings(
            file.path,
            {k: v for k, v in file.values.items() if k not in in_environment},
            file.keys,
        )
        values.update(file.values)
    try:
        headers = _headers(environ, file)
    except SettingsError as exc:
        lines.append(str(exc))
        values[_HEADERS] = {}  # said once, not again as the model's fault
    else:
        if headers is not None:
            values[_HEADERS] = headers
    if state_key is not None:
        values["state_key"] = SecretStr(state_key)
    settings = None
    try:
        settings = Settings(**values)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines += _from_file(check.error_lines(exc, Settings), file)
    if settings is not None:
        lines += _from_file(rules.problems(settings), file)
    if lines or settings is None:
        raise SettingsError("invalid configuration:\n  " + "\n  ".join(lines)) from None
    return Loaded(settings, file)


def _fields_set(environ: Mapping[str, str]) -> set[str]:
    """The fields the environment sets (names compared without case)."""
    names = {name.upper() for name in environ}
    return {field for field in Settings.model_fields if check.variable(field) in names}


def _value_of(environ: Mapping[str, str], name: str) -> str | None:
    for key, value in environ.items():
        if key.upper() == name:
            return value
    return None


def _headers(environ: Mapping[str, str], file: FileSettings | None) -> dict[str, str] | None:
    """MCP_SHIM_UPSTREAM_HEADERS resolved, from the environment or the file; None if unset."""
    name = check.variable(_HEADERS)
    raw = _value_of(environ, name)
    if raw is not None:
        return fixed_headers(raw, name)
    if file is not None and _HEADERS in file.values:
        return fixed_headers(file.values[_HEADERS], file.origin(_HEADERS))
    return None


def _from_file(lines: list[str], file: FileSettings | None) -> list[str]:
    """`lines`, each naming the settings file where a value it names came from it."""
    if file is None:
        return lines
    out = []
    for line in lines:
        for field in file.values:
            if re.match(rf"{check.variable(field)}(?![A-Z0-9_])", line):
                line += f" (set as {file.origin(field)})"
                break
        out.append(line)
    return out
