"""Client capabilities as each revision's schema.json defines them.

The shapes themselves are data on the version modules (``Delta.client_capabilities``,
folded by the registry into ``Features.client_capabilities``); this module
reads capabilities objects by them. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from translators._base import Era, object_members, reduce_to_shape
from translators.registry import LATEST_LEGACY, Version, known_versions

# Built once per version: the fronts check every request's capabilities.
_OBJECTS: Final = MappingProxyType(
    {
        v.name: MappingProxyType(object_members(v.features.client_capabilities))
        for v in known_versions()
    }
)


def client_capability_objects(version: Version) -> Mapping[str, tuple[str, ...] | None]:
    """Which members of `version`'s ClientCapabilities are objects, each with the
    names of its members that are objects in turn (None: every value is). The
    set is open: other members are allowed and left to the translators, which
    drop what the upstream's revision does not define."""
    return _OBJECTS[version.name]


def canonical_client_capabilities(
    capabilities: Mapping[str, Any], version: Version
) -> dict[str, Any]:
    """`capabilities` (already in `version`'s form) cut to what a legacy `version`
    defines: every open object emptied, false flags and `experimental` dropped
    (the gateway implements no experimental capability on a client's behalf).
    A version after the legacy era is read as the newest legacy one."""
    shape_of = version if version.era is Era.LEGACY else LATEST_LEGACY
    return reduce_to_shape(capabilities, shape_of.features.client_capabilities)
