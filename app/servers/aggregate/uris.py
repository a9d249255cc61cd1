"""Resource URIs in the aggregate, and who owns each.

Members keep their URIs: a client reads `file:///notes.txt` through the
aggregate as it would from the server itself. When several members list the
same URI (or the same URI template), the first member in the servers file's
order keeps it, and every other member's copy is listed under a gateway-made
URI, `mcp-shim:NAME/` followed by the member's own URI
(`mcp-shim:docs/file:///notes.txt`), which always reaches that member. A
member's URI that already begins with `mcp-shim:` is always listed in the
gateway-made form, so no plain URI is ever read as one. A template keeps its
expressions in either form (`mcp-shim:docs/file:///{path}` expands as the
member's own). Nothing is ever routed by guess: a plain URI goes to its owner
by the lists, or to the first member whose template matches, or is unknown.
Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

SCHEME: Final = "mcp-shim:"
# A template's expressions (RFC 6570): `{x}`, `{+x}`, `{/x,y}`, ...
_EXPRESSION = re.compile(r"\{[^{}]*\}")


def made(member: str, uri: str) -> str:
    """The gateway-made URI of `member`'s `uri`."""
    return f"{SCHEME}{member}/{uri}"


def parse_made(uri: str) -> tuple[str, str] | None:
    """(member, the member's own URI) of a gateway-made URI; None: not one."""
    if not uri.startswith(SCHEME):
        return None
    member, slash, rest = uri[len(SCHEME) :].partition("/")
    if not slash or not member or not rest:
        return None
    return member, rest


def template_pattern(template: str) -> re.Pattern[str]:
    """A URI template as a regular expression over the URIs it expands to: its
    literal parts exact, each expression any run of characters."""
    parts: list[str] = []
    last = 0
    for match in _EXPRESSION.finditer(template):
        parts.append(re.escape(template[last : match.start()]))
        parts.append(".*?")
        last = match.end()
    parts.append(re.escape(template[last:]))
    return re.compile("^" + "".join(parts) + "$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Owners:
    """Who owns each plain URI and template, and each member's renamed ones."""

    order: tuple[str, ...]
    uris: Mapping[str, str] = field(default_factory=dict)  # plain URI -> member
    templates: Mapping[str, str] = field(default_factory=dict)  # plain template -> member
    renamed: Mapping[str, frozenset[str]] = field(
        default_factory=dict
    )  # member -> its URIs listed made
    shared: tuple[tuple[str, str, str], ...] = ()  # (uri, owner, other member): to log

    def outward(self, member: str, uri: str) -> str:
        """`member`'s own URI as the aggregate shows it."""
        if uri.startswith(SCHEME) or uri in self.renamed.get(member, frozenset()):
            return made(member, uri)
        return uri

    def route(self, uri: str, members: Iterable[str]) -> tuple[str, str] | None:
        """(member, its own URI) for a URI a client names; None: no member known."""
        present = set(members)
        parsed = parse_made(uri)
        if parsed is not None:
            return parsed if parsed[0] in present else None
        owner = self.uris.get(uri)
        if owner is not None and owner in present:
            return owner, uri
        for template, member in self.templates.items():
            if member in present and template_pattern(template).match(uri):
                return member, uri
        return None


def owners(
    order: Sequence[str],
    resources: Mapping[str, Sequence[str]],
    templates: Mapping[str, Sequence[str]],
) -> Owners:
    """Ownership from each member's listed URIs and templates: the first member
    in `order` keeps a shared one."""
    uri_owner: dict[str, str] = {}
    template_owner: dict[str, str] = {}
    renamed: dict[str, set[str]] = {}
    shared: list[tuple[str, str, str]] = []
    for member in order:
        for kind, owned in ((resources, uri_owner), (templates, template_owner)):
            for uri in kind.get(member, ()):
                if uri.startswith(SCHEME):
                    continue
                first = owned.setdefault(uri, member)
                if first != member:
                    renamed.setdefault(member, set()).add(uri)
                    shared.append((uri, first, member))
    return Owners(
        order=tuple(order),
        uris=uri_owner,
        templates=template_owner,
        renamed={m: frozenset(u) for m, u in renamed.items()},
        shared=tuple(shared),
    )
