"""Shared helpers for the unit tests: the spec's JSON schemas and example messages.

The schema helpers themselves live in tests/schema.py, shared with the
integration tests; this module keeps the names the unit tests import.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.schema import SPEC, SPEC_DIR, Spec

__all__ = ["SPEC_DIR", "Spec", "load_example", "spec"]

_SPEC = SPEC


@pytest.fixture(scope="session")
def spec() -> Spec:
    # The schemas are part of the repository (tests/spec): missing is a failure, not a skip.
    assert _SPEC.available(), f"MCP spec schemas missing under {SPEC_DIR}"
    return _SPEC


def load_example(type_name: str, file: str) -> dict[str, Any]:
    """A 2026-07-28 schema example, for building parametrize tables at import time."""
    return _SPEC.example(type_name, file)
