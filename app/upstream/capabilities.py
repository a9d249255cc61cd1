"""Client capabilities as a legacy upstream's revision defines them, canonical.

The pool keys sessions by the capabilities sent at `initialize`. Keyed by
whatever a client declared, one anonymous client could open a session per
made-up capability and fill the pool. Reduced to the members the upstream's
revision defines (its schema.json `ClientCapabilities`), with every open
object emptied and `experimental` dropped (the gateway implements no
experimental capability on a client's behalf), the key space is small and
finite: what the upstream sees is exactly what can change its behaviour.

The shapes are the translators' (each revision's `Delta.client_capabilities`).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from translators.capabilities import canonical_client_capabilities
from translators.registry import Version


def canonical(capabilities: Mapping[str, Any], version: Version) -> dict[str, Any]:
    """`capabilities` (already in `version`'s form) cut to what `version` defines."""
    return canonical_client_capabilities(capabilities, version)
