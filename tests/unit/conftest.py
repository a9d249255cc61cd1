"""Shared helpers for the unit tests: the spec's JSON schemas and example messages.

The spec lives next to the project (``../shared/spec/<version>/``), or where
``MCP_SHIM_SPEC_DIR`` points. Schema validators are built once per
(version, definition) and cached.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

SPEC_DIR = Path(
    os.environ.get(
        "MCP_SHIM_SPEC_DIR", Path(__file__).resolve().parents[2].parent / "shared" / "spec"
    )
)


class Spec:
    """The published spec revisions: schema.json per version and the 2026 examples."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def has_schema(self, version: str) -> bool:
        return (self.root / version / "schema.json").is_file()

    @functools.cache  # noqa: B019 - one Spec per session
    def schema(self, version: str) -> dict[str, Any]:
        with (self.root / version / "schema.json").open(encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
        return data

    def definitions(self, version: str) -> dict[str, Any]:
        """The schema's named definitions (``definitions`` up to 2025-06-18, ``$defs`` after)."""
        schema = self.schema(version)
        defs: dict[str, Any] = schema.get("$defs") or schema["definitions"]
        return defs

    @functools.cache  # noqa: B019 - one Spec per session
    def validator(self, version: str, definition: str) -> Validator:
        schema = self.schema(version)
        key = "$defs" if "$defs" in schema else "definitions"
        if definition not in schema[key]:
            raise KeyError(f"{version} schema has no definition {definition!r}")
        cls = validator_for(schema)  # draft-07 or 2020-12, as the schema declares
        root = {**schema, "$ref": f"#/{key}/{definition}"}
        validator: Validator = cls(root)
        return validator

    def validate(self, version: str, definition: str, instance: Any) -> None:
        self.validator(version, definition).validate(instance)

    @functools.cache  # noqa: B019 - one Spec per session
    def method_definition(self, version: str, method: str, suffix: str) -> str | None:
        """The definition named ``*<suffix>`` whose ``method`` is the constant ``method``."""
        for name, d in self.definitions(version).items():
            if not name.endswith(suffix) or name.startswith(("Client", "Server")):
                continue
            if d.get("properties", {}).get("method", {}).get("const") == method:
                return name
        return None

    def example(self, type_name: str, file: str) -> dict[str, Any]:
        path = self.root / "2026-07-28" / "schema-examples" / type_name / f"{file}.json"
        with path.open(encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
        return data


_SPEC = Spec(SPEC_DIR)


@pytest.fixture(scope="session")
def spec() -> Spec:
    if not (SPEC_DIR / "2026-07-28" / "schema.json").is_file():
        pytest.skip(f"MCP spec not found at {SPEC_DIR} (set MCP_SHIM_SPEC_DIR)")
    return _SPEC


def load_example(type_name: str, file: str) -> dict[str, Any]:
    """A 2026-07-28 schema example, for building parametrize tables at import time."""
    return _SPEC.example(type_name, file)
