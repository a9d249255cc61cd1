"""The spec files the tests validate against are in the repository, unchanged.

A clone has nothing beside it, so tests/spec must hold every schema the suite
reads; SHA256SUMS records the published bytes, so an edit (even a reformat)
of a copied file is caught.
"""

from __future__ import annotations

import hashlib

from tests.schema import SPEC, SPEC_DIR
from translators.registry import draft_versions, known_versions


def _sums() -> dict[str, str]:
    sums: dict[str, str] = {}
    for line in (SPEC_DIR / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, path = line.split("  ", 1)
        sums[path.removeprefix("./")] = digest
    return sums


def test_every_copied_spec_file_is_listed_and_unchanged() -> None:
    sums = _sums()
    on_disk = {p.relative_to(SPEC_DIR).as_posix() for p in SPEC_DIR.rglob("*.json")}
    assert on_disk == set(sums), "tests/spec and its SHA256SUMS disagree"
    for path, digest in sums.items():
        actual = hashlib.sha256((SPEC_DIR / path).read_bytes()).hexdigest()
        assert actual == digest, f"tests/spec/{path} differs from the published file"


def test_every_published_version_has_its_schema() -> None:
    drafts = {v.name for v in draft_versions()}
    published = [v.name for v in known_versions() if v.name not in drafts]
    assert published, "no published versions in the registry"
    for name in published:
        assert SPEC.has_schema(name), f"tests/spec/{name}/schema.json is missing"


def test_the_spec_folder_says_where_it_came_from_and_its_license() -> None:
    readme = (SPEC_DIR / "README.md").read_text(encoding="utf-8")
    assert "modelcontextprotocol/modelcontextprotocol" in readme and "b0f60ba5" in readme
    license_text = (SPEC_DIR / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0" in license_text
    assert "MIT License" in license_text
