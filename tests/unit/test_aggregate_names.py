"""The aggregate's names and URIs, both directions (app/servers/aggregate/names.py, uris.py)."""

from __future__ import annotations

import pytest

from app.servers.aggregate import names, uris

MEMBERS = frozenset({"files", "web", "a.b"})


@pytest.mark.parametrize(
    ("member", "own", "shown"),
    [
        ("files", "echo", "files__echo"),
        ("files", "read__all", "files__read__all"),  # the member's own separator kept
        ("a.b", "x", "a.b__x"),
    ],
)
def test_prefix_and_split_are_inverse(member: str, own: str, shown: str) -> None:
    assert names.prefixed(member, own, "__") == shown
    assert names.split(shown, MEMBERS, "__") == (member, own)


@pytest.mark.parametrize("name", ["echo", "nobody__echo", "files__", "__echo", None, 3])
def test_split_refuses_names_of_no_member(name: object) -> None:
    assert names.split(name, MEMBERS, "__") is None


def test_other_separator() -> None:
    assert names.split("files.echo", MEMBERS, ".") == ("files", "echo")
    assert names.prefixed("web", "get", "-") == "web-get"


def test_member_problems() -> None:
    problems = names.member_problems(["ok", "bad__name", "sp ace"], "__")
    assert len(problems) == 2
    assert "'bad__name' holds the aggregate separator '__'" in problems[0]
    assert '"aggregate": false' in problems[0]
    assert "'sp ace' has characters" in problems[1]
    assert names.member_problems(["ok", "also-ok"], "__") == []


@pytest.mark.parametrize(("sep", "bad"), [("__", False), ("", True), ("/", True), (".", False)])
def test_separator_problem(sep: str, bad: bool) -> None:
    assert (names.separator_problem(sep) is not None) is bad


def test_too_long() -> None:
    assert not names.too_long("a" * 128)
    assert names.too_long("a" * 129)


def test_made_uris_round_trip() -> None:
    made = uris.made("docs", "file:///notes.txt")
    assert made == "mcp-shim:docs/file:///notes.txt"
    assert uris.parse_made(made) == ("docs", "file:///notes.txt")
    assert uris.parse_made("file:///x") is None
    assert uris.parse_made("mcp-shim:docs") is None
    assert uris.parse_made("mcp-shim:/x") is None


def test_first_member_keeps_a_shared_uri() -> None:
    owners = uris.owners(
        ["a", "b"],
        {"a": ["file:///x", "file:///a"], "b": ["file:///x", "file:///b"]},
        {"a": ["t://{id}"], "b": ["t://{id}", "u://{id}"]},
    )
    assert owners.outward("a", "file:///x") == "file:///x"
    assert owners.outward("b", "file:///x") == "mcp-shim:b/file:///x"
    assert owners.outward("b", "file:///b") == "file:///b"
    assert owners.outward("b", "t://{id}") == "mcp-shim:b/t://{id}"
    assert owners.shared == (("file:///x", "a", "b"), ("t://{id}", "a", "b"))
    # Back: every listed URI reaches the member that listed it, in its own form.
    assert owners.route("file:///x", ["a", "b"]) == ("a", "file:///x")
    assert owners.route("mcp-shim:b/file:///x", ["a", "b"]) == ("b", "file:///x")
    assert owners.route("file:///b", ["a", "b"]) == ("b", "file:///b")
    # Templates: the first member whose template matches; made ones by their prefix.
    assert owners.route("t://7", ["a", "b"]) == ("a", "t://7")
    assert owners.route("u://7", ["a", "b"]) == ("b", "u://7")
    assert owners.route("mcp-shim:b/t://7", ["a", "b"]) == ("b", "t://7")
    # Unknown, or a member no longer present: never guessed.
    assert owners.route("file:///nowhere", ["a", "b"]) is None
    assert owners.route("file:///b", ["a"]) is None
    assert owners.route("mcp-shim:c/file:///x", ["a", "b"]) is None


def test_a_member_uri_in_the_gateway_scheme_is_always_made() -> None:
    owners = uris.owners(["a"], {"a": ["mcp-shim:a/evil"]}, {})
    assert owners.outward("a", "mcp-shim:a/evil") == "mcp-shim:a/mcp-shim:a/evil"
    assert owners.route("mcp-shim:a/mcp-shim:a/evil", ["a"]) == ("a", "mcp-shim:a/evil")


@pytest.mark.parametrize(
    ("template", "uri", "matches"),
    [
        ("file:///{path}", "file:///a/b.txt", True),
        ("file:///{path}", "http://x", False),
        ("db://{table}/rows/{id}", "db://t/rows/3", True),
        ("db://{table}/rows/{id}", "db://t/cols/3", False),
        ("a.b://{+x}", "aXb://y", False),  # literal dots stay literal
    ],
)
def test_template_pattern(template: str, uri: str, matches: bool) -> None:
    assert bool(uris.template_pattern(template).match(uri)) is matches
