"""The settings file `MCP_SHIM_CONFIG` read into values by field name, or
`SettingsError` naming the file and what is wrong in it.

Two forms, told apart by the file's name:

- `*.toml`: the settings' field names in lower case without the prefix,
  `port = 9000`, `upstream_url = "http://..."`, lists as arrays or
  comma-separated strings, `upstream_headers` as a table. Parsed by the
  standard library's `tomllib`, whose errors name the line and column.
- `.env` or `*.env`: `MCP_SHIM_PORT=9000` lines as a compose or systemd
  environment file writes them (`export ` allowed, `#` comments, values
  unquoted, "double-quoted" with backslash escapes, or 'single-quoted').

A key that is no setting is an error naming the closest setting, as an
unknown `MCP_SHIM_*` variable is (app/settings/check.py), and for the same
reason: a misspelt bound would otherwise stay at its default without a word.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Collection
from dataclasses import dataclass, field

from app.config import SettingsError
from app.settings.check import PREFIX, variable

# A settings file is a few kilobytes; anything much larger is the wrong file.
MAX_FILE_BYTES = 1024 * 1024
# The setting that names the file, which the file itself cannot set.
CONFIG_FIELD = "config"


@dataclass(frozen=True, slots=True)
class FileSettings:
    """What the file says: each value by field name, and each field's key as
    the file writes it (for messages)."""

    path: str
    values: dict[str, object] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)

    def origin(self, field_name: str) -> str:
        """Where a value came from, for a message: `port in gateway.toml`."""
        return f"{self.keys.get(field_name, field_name)} in {self.path}"


def read(path: str, fields: Collection[str]) -> FileSettings:
    """The settings in the file at `path`; SettingsError naming the file and
    each fault (a line it cannot parse, every key that is no setting)."""
    kind = _kind(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SettingsError(
            f"MCP_SHIM_CONFIG names {path!r}, which cannot be read: {exc.strerror}"
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise SettingsError(f"{path}: larger than {MAX_FILE_BYTES} bytes; is it a settings file?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SettingsError(f"{path}, line {line}: not UTF-8 text") from None
    raw = _toml(path, text) if kind == "toml" else _dotenv(path, text)
    values: dict[str, object] = {}
    keys: dict[str, str] = {}
    faults: list[str] = []
    for key, value in raw.items():
        name = key if kind == "toml" else _field_of_variable(key)
        if name == CONFIG_FIELD:
            faults.append(f"{path}: {key} names the settings file, which cannot name another")
        elif name is not None and name in fields:
            values[name], keys[name] = value, key
        else:
            faults.append(_unknown(path, key, kind, fields))
    if faults:
        raise SettingsError("\n  ".join(faults))
    return FileSettings(path, values, keys)


def _kind(path: str) -> str:
    name = os.path.basename(path)
    if name.endswith(".toml"):
        return "toml"
    if name == ".env" or name.endswith(".env"):
        return "env"
    raise SettingsError(
        f"MCP_SHIM_CONFIG={path!r}: a settings file is a .toml file (port = 9000) or a "
        ".env file (MCP_SHIM_PORT=9000), told apart by its name"
    )


def _toml(path: str, text: str) -> dict[str, object]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # The message ends "(at line N, column M)".
        raise SettingsError(f"{path}: not valid TOML: {exc}") from None


def _field_of_variable(name: str) -> str | None:
    upper = name.upper()
    return upper.removeprefix(PREFIX).lower() if upper.startswith(PREFIX) else None


def _unknown(path: str, key: str, kind: str, fields: Collection[str]) -> str:
    bare = key.lower().removeprefix(PREFIX.lower())
    found = difflib.get_close_matches(bare, list(fields), n=1, cutoff=0.6)
    line = f"{path}: {key} is not a setting"
    if found:
        guess = found[0] if kind == "toml" else variable(found[0])
        line += f"; did you mean {guess}?"
    if kind == "toml" and key.upper().startswith(PREFIX):
        line += " (a .toml file names settings without the MCP_SHIM_ prefix, in lower case)"
    return line + " (every setting: docs/settings.md)"


_ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$"}


def _dotenv(path: str, text: str) -> dict[str, object]:
    values: dict[str, object] = {}
    first: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ASSIGNMENT.match(stripped)
        if match is None:
            raise SettingsError(
                f"{path}, line {number}: expected NAME=value, e.g. MCP_SHIM_PORT=9000"
            )
        name, rest = match.groups()
        if name.upper() in first:
            raise SettingsError(
                f"{path}, line {number}: {name} is set twice (first on line {first[name.upper()]})"
            )
        first[name.upper()] = number
        values[name] = _dotenv_value(path, number, rest)
    return values


def _dotenv_value(path: str, number: int, rest: str) -> str:
    """The value after `=`: quoted (the quotes removed, escapes applied in
    double quotes) or bare (up to a ` #` comment)."""
    if not rest or rest[0] not in "\"'":
        return re.split(r"\s+#", rest, maxsplit=1)[0].strip()
    quote, out, i = rest[0], [], 1
    while i < len(rest) and rest[i] != quote:
        if quote == '"' and rest[i] == "\\" and i + 1 < len(rest):
            out.append(_ESCAPES.get(rest[i + 1], "\\" + rest[i + 1]))
            i += 2
            continue
        out.append(rest[i])
        i += 1
    after = rest[i + 1 :].strip()
    if i >= len(rest) or (after and not after.startswith("#")):
        raise SettingsError(
            f"{path}, line {number}: the value's {quote} quote is not closed at the end of "
            "the line (values are one line each)"
        )
    return "".join(out)
