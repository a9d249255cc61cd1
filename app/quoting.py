"""How a message to a client quotes a value the client sent (an id, a method, a
header, a key): recognisable, bounded, and never a Python repr.

Leaf module: the standard library only, so fronts, bridges and upstream
adapters can all use it (docs/operations.md, "Limits").
"""

from __future__ import annotations

import json
from typing import Final

# What a message shows of a client's value: enough to recognise it, never a
# multi-megabyte echo of a megabyte id.
QUOTED_CHARS: Final = 100

# Escapes that read better than their \u form.
_SHORT_ESCAPES: Final = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(ch: str) -> str:
    short = _SHORT_ESCAPES.get(ch)
    if short is not None:
        return short
    if ch.isprintable():
        return ch
    # Control, format (bidi overrides), separator and surrogate characters: shown
    # as JSON escapes, so the message is one readable line that encodes as UTF-8.
    return json.dumps(ch)[1:-1]


def _unserialisable(value: object) -> str:
    # Not a JSON value (none arrives from a parsed body): its type's name, as a
    # JSON string would stand there, never its repr.
    return f"<{type(value).__name__}>"


def _json_text(value: object) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_unserialisable)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(_unserialisable(value))
    if text.isprintable():
        return text
    # Outside its strings JSON text is printable ASCII, and inside them JSON has
    # escaped the C0 controls: what is left is escaped the same way, still JSON.
    return "".join(ch if ch.isprintable() else json.dumps(ch)[1:-1] for ch in text)


def quoted(value: object) -> str:
    """`value` as a message to a client quotes it.

    A string in single quotes, `\\`, `'` and unprintable characters escaped
    (`'tools/call'`, `'a\\'b'`); anything else as compact JSON (`1`, `null`,
    `{"a":1}`). At most QUOTED_CHARS characters of that text are shown (between
    the quotes, for a string); a longer value is cut and followed by
    "... (N characters)", N counting the string's own characters, or the whole
    JSON text's.
    """
    if isinstance(value, str):
        shown: list[str] = []
        width = 0
        for ch in value[:QUOTED_CHARS]:
            piece = _escaped(ch)
            if width + len(piece) > QUOTED_CHARS:
                break
            shown.append(piece)
            width += len(piece)
        text = "'" + "".join(shown) + "'"
        if len(shown) == len(value):
            return text
        return f"{text}... ({len(value)} characters)"
    text = _json_text(value)
    if len(text) <= QUOTED_CHARS:
        return text
    return f"{text[:QUOTED_CHARS]}... ({len(text)} characters)"
