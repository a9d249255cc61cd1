"""What is wrong with the gateway's `MCP_SHIM_*` environment, said so that a
person can fix it: the bad value quoted (never a secret's) and what to write
instead, and every `MCP_SHIM_*` variable that is no setting, with the setting
it most resembles.

An unknown variable is an error, not a warning: a misspelt bound
(`MCP_SHIM_MAX_SESIONS=64`) would otherwise leave the real one at its default
without a word, the kind of surprise a production gateway must not have, and
a warning in a log nobody reads at start-up is no better. The few
`MCP_SHIM_*` names the project's own scripts read (`NOT_SETTINGS`) are
tolerated, since a shell that exported one for them may also start the gateway.

No project imports: app/settings/rules.py and app/settings/load.py use this
module, which must not depend on them.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, SecretStr, ValidationError

PREFIX = "MCP_SHIM_"

# `MCP_SHIM_*` names that are no setting of the gateway, read by the project's
# scripts and test suites; the gateway ignores them.
NOT_SETTINGS: Mapping[str, str] = {
    "MCP_SHIM_PEERS_DIR": "where scripts/setup_peers.sh, setup_bench_peers.sh, "
    "conformance.sh and the test suites keep the real MCP peers",
    "MCP_SHIM_DEBIAN_MIRROR": "the Debian mirror of scripts/container_base.sh",
    "MCP_SHIM_CONFORMANCE_REVISION": "the client revision scripts/conformance.sh tests",
    "MCP_SHIM_CONFORMANCE_TIMEOUT": "the bound of tests/integration/test_conformance.py",
    "MCP_SHIM_FUZZ_PROFILE": "the Hypothesis profile of tests/integration/test_fuzz.py",
    "MCP_SHIM_FUZZ_AVOID": "the known defects tests/integration/test_fuzz.py steers clear of",
}

# Examples for settings whose default gives none (unset by default).
_URL_EXAMPLE = "http://127.0.0.1:3001/mcp"


def variable(field: str) -> str:
    return PREFIX + field.upper()


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known variable `name` most resembles, or None. The shared prefix is
    left out of the comparison: it would make every name resemble every other."""
    suffixes = {item.upper().removeprefix(PREFIX): item for item in known}
    found = difflib.get_close_matches(name.upper().removeprefix(PREFIX), suffixes, n=1, cutoff=0.6)
    return suffixes[found[0]] if found else None


def unknown_variables(environ: Iterable[str], fields: Iterable[str]) -> list[str]:
    """One line for each `MCP_SHIM_*` name in `environ` that is no setting.
    Names are compared without case, as pydantic-settings reads them."""
    known = {variable(field) for field in fields}
    lines = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper in known or upper in NOT_SETTINGS:
            continue
        line = f"{name} is not a setting"
        guess = closest(upper, known)
        if guess is not None:
            line += f"; did you mean {guess}?"
        lines.append(line + " (every setting: docs/settings.md)")
    return lines


# A URL's user:password@, its scheme optional (a value missing it is quoted too).
_USERINFO = re.compile(r"^(\s*(?:[A-Za-z][A-Za-z0-9+.-]*://)?[^/@:]*:)[^/@]*@")


def mask_userinfo(text: str) -> str:
    """`text` with a URL's password, if any, replaced by ***."""
    return _USERINFO.sub(r"\1***@", text)


def error_lines(exc: ValidationError, model: type[BaseModel]) -> list[str]:
    """One line for each of `exc`'s errors, naming the variable; where the
    mistake is a common one, quoting the value and showing a corrected example."""
    lines = []
    for err in exc.errors():
        if not err["loc"]:  # a rule across settings names them itself
            lines.append(err["msg"].removeprefix("Value error, "))
            continue
        field = str(err["loc"][0])
        line = _explained(err, field, model) if field in model.model_fields else None
        if line is None:
            line = f"{variable(field)}: {err['msg'].removeprefix('Value error, ')}"
        lines.append(line)
    return lines


def _explained(err: Any, field: str, model: type[BaseModel]) -> str | None:
    info = model.model_fields[field]
    value = err.get("input")
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)  # a number from a .toml settings file, quoted as a variable's
    if not isinstance(value, str) or _is_secret(info.annotation):
        return None  # a secret is never quoted; nor is what came from no variable
    name = variable(field)
    kind = err["type"]
    quoted = f"{name}={mask_userinfo(value)!r}"
    if kind in ("url_parsing", "url_scheme"):
        if value.strip() == "":
            return f"{name} is empty: unset it, or write a URL, e.g. {name}={_URL_EXAMPLE}"
        if "://" not in value:
            fixed = mask_userinfo("http://" + value.strip())
            return f"{quoted} is not a URL: add the scheme, e.g. {name}={fixed}"
        return f"{quoted} is not an http:// or https:// URL, e.g. {name}={_URL_EXAMPLE}"
    example = _example(info.default, info.metadata)
    within = _range(info.metadata)
    if kind in ("int_parsing", "int_from_float", "float_parsing"):
        what = "a number" if kind == "float_parsing" else "a whole number"
        within = f" ({within.strip()})" if within else ""
        return f"{quoted} is not {what}{within}, e.g. {name}={example}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"{quoted} is out of range: it must be{within}, e.g. {name}={example}"
    if kind == "bool_parsing":
        return f"{quoted} is neither true nor false: write {name}=true or {name}=false"
    if kind == "literal_error":
        choices = [str(choice) for choice in _literal_choices(info.annotation)]
        guess = difflib.get_close_matches(value.lower(), choices, n=1) or [str(info.default)]
        return f"{quoted} is not one of {', '.join(choices)}: e.g. {name}={guess[0]}"
    return None


def _is_secret(annotation: object) -> bool:
    return annotation is SecretStr or SecretStr in typing.get_args(annotation)


def _literal_choices(annotation: object) -> tuple[object, ...]:
    if typing.get_origin(annotation) is Literal:
        return typing.get_args(annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return tuple(c for arg in typing.get_args(annotation) for c in _literal_choices(arg))
    return ()


def _bounds(metadata: list[Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in metadata:
        for bound in ("ge", "gt", "le", "lt"):
            if getattr(item, bound, None) is not None:
                found[bound] = getattr(item, bound)
    return found


def _range(metadata: list[Any]) -> str:
    bounds = _bounds(metadata)
    low = f"{bounds['ge']:g}" if "ge" in bounds else None
    high = f"{bounds['le']:g}" if "le" in bounds else None
    if low is not None and high is not None:
        return f" from {low} to {high}"
    parts = []
    if low is not None:
        parts.append(f"at least {low}")
    if "gt" in bounds:
        parts.append(f"above {bounds['gt']:g}")
    if high is not None:
        parts.append(f"at most {high}")
    if "lt" in bounds:
        parts.append(f"below {bounds['lt']:g}")
    return " " + " and ".join(parts) if parts else ""


def _example(default: object, metadata: list[Any]) -> str:
    if isinstance(default, int | float) and not isinstance(default, bool):
        return str(default)
    bounds = _bounds(metadata)
    if bounds.get("le") == 65535:  # a port, unset by default
        return "9090"
    return f"{max(bounds.get('ge', bounds.get('gt', 1)), 1):g}"
