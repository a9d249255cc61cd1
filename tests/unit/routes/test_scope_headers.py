"""`ScopeHeaders` (app/routes/scope_headers.py) answers what starlette's
`Headers` answers for the same scope: the POST path reads its headers with it."""

from __future__ import annotations

from starlette.datastructures import Headers

from app.routes.scope_headers import ScopeHeaders

RAW = [
    (b"host", b"127.0.0.1:8080"),
    (b"mcp-name", b"first"),
    (b"traceparent", b"00-a-b-01"),
    (b"mcp-name", b"second"),
    (b"content-type", b""),
    (b"x-odd", "caf\u00e9".encode("latin-1")),
    (b"traceparent", b"00-c-d-01"),
]


def test_same_answers_as_starlette_headers() -> None:
    ours, theirs = ScopeHeaders(RAW), Headers(scope={"type": "http", "headers": list(RAW)})
    for name in ("host", "Host", "MCP-NAME", "content-type", "x-odd", "missing"):
        assert ours.get(name) == theirs.get(name), name
        assert ours.get(name, "dflt") == theirs.get(name, "dflt"), name
        assert (name in ours) == (name in theirs), name
        assert ours.getlist(name) == theirs.getlist(name), name
    assert ours.items() == theirs.items()
    assert list(ours) == list(theirs)
    assert len(ours) == len(theirs)
    assert ours["mcp-name"] == theirs["mcp-name"] == "first"
    assert ours.get("content-type", "application/json") == ""  # present, empty
    assert 3 not in ours
