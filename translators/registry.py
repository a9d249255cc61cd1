"""The ordered registry of protocol versions.

Each version module states its version as a delta from its predecessor; the
registry folds the deltas in order, so a version's :class:`Features` are
everything its predecessors established plus its own changes. Adding a
version is adding one module and one line to ``_MODULES``.

Versions are looked up by exact wire name only and ordered by ``index``;
version strings are never compared (``"DRAFT-2026-v1" > "2026-07-28"`` as
strings, and a future ``"2026-07-28-rc"`` would sort anywhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Protocol

from translators import (
    v2024_11_05,
    v2025_03_26,
    v2025_06_18,
    v2025_11_25,
    v2026_07_28,
    v2026_draft,
)
from translators._base import EMPTY_FEATURES, Delta, Era, Features, Steps

__all__ = [
    "LATEST_LEGACY",
    "LATEST_MODERN",
    "Era",
    "Features",
    "Version",
    "draft_versions",
    "error_fallback",
    "get_version",
    "known_versions",
    "legacy_versions",
    "modern_versions",
    "steps_of",
]


class VersionModule(Protocol):
    """What every ``translators/v*.py`` module provides."""

    @property
    def DELTA(self) -> Delta: ...

    @property
    def STEPS(self) -> Steps: ...


# Oldest first. One line per version.
_MODULES: Final[tuple[VersionModule, ...]] = (
    v2024_11_05,
    v2025_03_26,
    v2025_06_18,
    v2025_11_25,
    v2026_draft,
    v2026_07_28,
)


@dataclass(frozen=True)
class Version:
    """A protocol version. Equality and hashing go by name, era and position."""

    name: str
    era: Era
    features: Features = field(compare=False, repr=False)
    index: int
    aliases: tuple[str, ...] = ()

    @property
    def wire_names(self) -> tuple[str, ...]:
        """Every protocolVersion string that denotes this version (canonical first)."""
        return (self.name, *self.aliases)


def _build() -> tuple[tuple[Version, ...], tuple[Steps, ...]]:
    versions: list[Version] = []
    steps: list[Steps] = []
    features = EMPTY_FEATURES
    for index, module in enumerate(_MODULES):
        delta = module.DELTA
        features = delta.apply(features)
        versions.append(Version(delta.name, delta.era, features, index, delta.aliases))
        steps.append(module.STEPS)
    return tuple(versions), tuple(steps)


_VERSIONS, _STEPS = _build()
_BY_NAME: Final = MappingProxyType({name: v for v in _VERSIONS for name in v.wire_names})
_FALLBACKS: Final = MappingProxyType(
    {meaning: to for m in _MODULES for meaning, to in m.DELTA.error_fallbacks.items()}
)


def known_versions() -> tuple[Version, ...]:
    """Every version the gateway knows, oldest first."""
    return _VERSIONS


def get_version(name: object) -> Version | None:
    """The version whose wire name is exactly ``name``; None for anything else."""
    if not isinstance(name, str):
        return None
    return _BY_NAME.get(name)


def _of_era(era: Era) -> tuple[Version, ...]:
    return tuple(v for v in _VERSIONS if v.era is era)


# Built once: the fronts ask on every request.
_LEGACY: Final = _of_era(Era.LEGACY)
_DRAFT: Final = _of_era(Era.DRAFT)
_MODERN: Final = _of_era(Era.MODERN)


def legacy_versions() -> tuple[Version, ...]:
    """Stateful versions (initialize handshake, sessions), oldest first."""
    return _LEGACY


def draft_versions() -> tuple[Version, ...]:
    """Pre-release 2026 drafts, oldest first."""
    return _DRAFT


def modern_versions() -> tuple[Version, ...]:
    """Published stateless versions (2026-07-28 on), oldest first. Drafts are not included."""
    return _MODERN


def steps_of(version: Version) -> Steps:
    """The step functions between ``version`` and its predecessor."""
    return _STEPS[version.index]


def error_fallback(meaning: str) -> str | None:
    """The meaning to use toward a version that lacks ``meaning`` (None: no standard substitute)."""
    return _FALLBACKS.get(meaning)


LATEST_MODERN: Final[Version] = modern_versions()[-1]
LATEST_LEGACY: Final[Version] = legacy_versions()[-1]
