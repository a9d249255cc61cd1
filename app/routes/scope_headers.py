"""A request's headers read from the ASGI scope once, for the `POST /mcp` path.

Starlette's `Headers` decodes and scans the whole header list on every look-up
(through `collections.abc.Mapping.get`); the hot path looks up about ten
names per call (bench/profile.py). Same answers as `Headers`:
names as the server gave them (lower case), the first value of a repeated
header from `get`, every pair from `items` and `getlist`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import overload


class ScopeHeaders(Mapping[str, str]):
    __slots__ = ("_first", "_items")

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        self._items = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]
        # Reversed: the first of a repeated header wins, as in `Headers.get`.
        self._first = dict(reversed(self._items))

    def __getitem__(self, key: str) -> str:
        return self._first[key.lower()]

    @overload  # type: ignore[override]
    def get(self, key: str, /) -> str | None: ...
    @overload
    def get(self, key: str, default: str, /) -> str: ...
    def get(self, key: str, default: str | None = None, /) -> str | None:
        return self._first.get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._first

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[tuple[str, str]]:  # type: ignore[override]
        return list(self._items)

    def getlist(self, key: str) -> list[str]:
        wanted = key.lower()
        if wanted not in self._first:
            return []  # the common case (traceparent, tracestate): no scan
        return [value for name, value in self._items if name == wanted]
