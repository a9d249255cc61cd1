"""Reference counts of resource URIs on one upstream session.

A legacy session needs `resources/subscribe` once per URI, however many
listeners want it, and `resources/unsubscribe` when the last one leaves. This
module only counts; it says which URIs just became wanted (subscribe them)
and which stopped being wanted (unsubscribe them). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable


class UriRefcount:
    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def add(self, uris: Iterable[str]) -> list[str]:
        """Count one more listener for each URI; return those that went from 0 to 1."""
        first: list[str] = []
        for uri in dict.fromkeys(uris):
            count = self._counts.get(uri, 0)
            self._counts[uri] = count + 1
            if count == 0:
                first.append(uri)
        return first

    def remove(self, uris: Iterable[str]) -> list[str]:
        """Count one listener less for each URI; return those that went from 1 to 0.

        URIs not counted are ignored, so a listener can be removed twice safely.
        """
        last: list[str] = []
        for uri in dict.fromkeys(uris):
            count = self._counts.get(uri, 0)
            if count <= 1:
                if self._counts.pop(uri, None) is not None:
                    last.append(uri)
            else:
                self._counts[uri] = count - 1
        return last

    def count(self, uri: str) -> int:
        return self._counts.get(uri, 0)

    def uris(self) -> list[str]:
        """Every URI some listener wants, in the order they were first wanted."""
        return list(self._counts)

    def __len__(self) -> int:
        return len(self._counts)
