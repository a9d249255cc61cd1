"""Client values quoted in messages to clients (app/quoting.py): one rule for every
rejection, bounded, never a Python repr (docs/operations.md, "Limits")."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from app.fronts.legacy import checks as legacy
from app.fronts.modern import checks as modern
from app.fronts.shared import header_guard, security
from app.mrtr import answers, results
from app.quoting import QUOTED_CHARS, quoted
from app.rejections import Rejection
from app.upstream.errors import UpstreamProtocolError, UpstreamTimeout
from app.upstream.sessions.routing import Router
from translators.registry import Version, get_version

MIB = 1 << 20
BIG = "x" * MIB
CUT = f"... ({MIB} characters)"
# The longest a message quoting two client values can be: its own words (none of
# these is near 300 characters) and two quotes of at most 100 characters each.
MESSAGE_BOUND = 300 + 2 * (QUOTED_CHARS + 2 + len(CUT))

# -- the rule -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("tools/call", "'tools/call'"),
        ("", "''"),
        ("it's", "'it\\'s'"),
        ("a\\b", "'a\\\\b'"),
        ("line\nnext\ttab", "'line\\nnext\\ttab'"),
        ("\x00", "'\\u0000'"),
        ("évite 名前 😀", "'évite 名前 😀'"),  # printable text as it is
        ("a\u202eb", "'a\\u202eb'"),  # a bidi override would reorder the message
        ("\ud800", "'\\ud800'"),  # a lone surrogate could not be encoded as UTF-8
        (1, "1"),
        (-2.5, "-2.5"),
        (True, "true"),
        (None, "null"),
        ({"a": 1}, '{"a":1}'),
        ([1, "b", None], '[1,"b",null]'),
        ({"k": "\u202e"}, '{"k":"\\u202e"}'),
        ({"é": "ü"}, '{"é":"ü"}'),
    ],
)
def test_values_are_quoted_by_one_rule(value: Any, shown: str) -> None:
    assert quoted(value) == shown


def test_a_string_of_the_limit_is_whole_and_a_longer_one_cut() -> None:
    assert quoted("x" * QUOTED_CHARS) == "'" + "x" * QUOTED_CHARS + "'"
    assert quoted("x" * (QUOTED_CHARS + 1)) == (
        "'" + "x" * QUOTED_CHARS + f"'... ({QUOTED_CHARS + 1} characters)"
    )


def test_a_megabyte_string_shows_its_first_hundred_characters_and_its_length() -> None:
    assert quoted(BIG) == "'" + "x" * QUOTED_CHARS + "'" + CUT


def test_escapes_count_toward_the_limit_and_are_never_split() -> None:
    # 60 newlines are 120 characters shown: 50 fit, the count is the string's own.
    assert quoted("\n" * 60) == "'" + "\\n" * 50 + "'... (60 characters)"
    # A six-character escape that would cross the limit is left out whole.
    text = quoted("y" * 97 + "\x01")
    assert text == "'" + "y" * 97 + "'... (98 characters)"


def test_unicode_is_counted_in_characters_not_bytes() -> None:
    assert quoted("é" * QUOTED_CHARS) == "'" + "é" * QUOTED_CHARS + "'"
    assert quoted("名" * 150) == "'" + "名" * QUOTED_CHARS + "'... (150 characters)"


def test_a_long_non_string_is_its_json_cut() -> None:
    value = {"k": "v" * 500}
    text = json.dumps(value, separators=(",", ":"))
    assert quoted(value) == f"{text[:QUOTED_CHARS]}... ({len(text)} characters)"


def test_never_a_python_repr() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "SECRET-REPR"

    for value in (Opaque(), {"a": Opaque()}, {(1, 2): 3}, b"bytes"):
        assert "SECRET" not in quoted(value) and "b'" not in quoted(value)
    assert quoted(Opaque()) == '"<Opaque>"' and quoted({(1, 2): 3}) == '"<dict>"'
    assert quoted({"a": 1, "b": [True, None]}) == '{"a":1,"b":[true,null]}'


# -- every rejection that quotes a client value ----------------------------------

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
HEADERS = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"}


def _modern(
    method: str = "tools/call",
    params: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    rid: int | None = 1,
) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if rid is not None:
        message["id"] = rid
    message["params"] = (
        {"name": "echo", "arguments": {}, "_meta": META} if params is None else params
    )
    out = modern.parse(json.dumps(message).encode(), {**HEADERS, **(headers or {})})
    assert isinstance(out, Rejection), out
    return out.message


def _rejected(out: object) -> str:
    assert isinstance(out, Rejection), out
    return out.message


def _raised(make: Callable[[], object], error: type[Exception]) -> str:
    with pytest.raises(error) as caught:
        make()
    return str(caught.value)


def _in_flight_twice(rid: Any) -> str:
    async def nothing(message: dict[str, Any]) -> None:
        return None

    router = Router("the test server", initialized=lambda: True, respond=nothing)
    call = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {}}
    router.open(call, 1.0)
    return _raised(lambda: router.open(call, 1.0), UpstreamProtocolError)


def _meta(**changed: Any) -> dict[str, Any]:
    return {"name": "echo", "arguments": {}, "_meta": {**META, **changed}}


def _version(name: str) -> Version:
    version = get_version(name)
    assert version is not None
    return version


HOST = ".".join(["h" * 60] * 4)  # 243 characters: a well-formed, foreign host name

CASES: list[tuple[str, Callable[[], str], str]] = [
    (
        "modern: unknown method",
        lambda: _modern(BIG, headers={"mcp-method": BIG}),
        "Method not found",
    ),
    (
        "modern: unknown notification",
        lambda: _modern(BIG, headers={"mcp-method": BIG}, rid=None),
        "Method not found",
    ),
    (
        "modern: unsupported version",
        lambda: _modern(
            params=_meta(**{"io.modelcontextprotocol/protocolVersion": BIG}),
            headers={"mcp-protocol-version": BIG},
        ),
        "Unsupported protocol version",
    ),
    (
        "modern: version header mismatch",
        lambda: _modern(headers={"mcp-protocol-version": BIG}),
        "MCP-Protocol-Version header value",
    ),
    ("modern: Mcp-Method mismatch", lambda: _modern(headers={"mcp-method": BIG}), "Mcp-Method"),
    ("modern: Mcp-Name mismatch", lambda: _modern(headers={"mcp-name": BIG}), "Mcp-Name"),
    (
        "modern: log level",
        lambda: _modern(params=_meta(**{"io.modelcontextprotocol/logLevel": BIG})),
        "unknown log level",
    ),
    (
        "modern: a capability the client named",
        lambda: _modern(
            params=_meta(
                **{"io.modelcontextprotocol/clientCapabilities": {"experimental": {BIG: 1}}}
            )
        ),
        "must be an object",
    ),
    (
        "legacy: version header",
        lambda: _rejected(legacy.check_version_header(BIG, _version("2025-11-25"))),
        "MCP-Protocol-Version",
    ),
    (
        "legacy: two requests of a batch share an id",
        lambda: _rejected(
            legacy.batch_members(
                [{"jsonrpc": "2.0", "id": BIG, "method": "ping"}] * 2, get_version("2025-03-26"), 50
            )
        ),
        "share the id",
    ),
    (
        "header guard: a header name",
        lambda: _rejected(header_guard.check_header_values({"mcp-" + BIG: "\x01"})),
        "printable ASCII",
    ),
    (
        "Host not allowed",
        lambda: _rejected(security.check_host(HOST, ["localhost"])),
        "Forbidden: Host",
    ),
    (
        "Origin not allowed",
        lambda: _rejected(security.check_origin("http://" + BIG, ["localhost"])),
        "Forbidden: Origin",
    ),
    (
        "mrtr: inputResponses key not an object",
        lambda: _rejected(answers.check_params(1, {"inputResponses": {BIG: 1}})),
        "inputResponses[",
    ),
    (
        "mrtr: inputResponses key refused",
        lambda: results.answer_refused(1, BIG, "no").message,
        "inputResponses[",
    ),
    ("upstream: an id already in flight", lambda: _in_flight_twice(BIG), "already in flight"),
]


@pytest.mark.parametrize(("case", "make", "says"), CASES, ids=[c[0] for c in CASES])
def test_a_rejection_quotes_an_oversized_value_bounded(
    case: str, make: Callable[[], str], says: str
) -> None:
    message = make()
    assert says in message, message
    assert len(message) <= MESSAGE_BOUND, (case, len(message))
    assert "characters)" in message, message


def test_non_string_values_are_quoted_as_json() -> None:
    level = _modern(params=_meta(**{"io.modelcontextprotocol/logLevel": {"a": 1}}))
    assert 'unknown log level {"a":1}' in level
    assert "{'a': 1}" not in level
    assert _in_flight_twice(7) == "request id 7 is already in flight"


async def test_a_timeout_names_an_oversized_method_bounded() -> None:
    # A legacy client's method goes upstream as it came; the upstream's silence
    # about it is the client's error message.
    async def nothing(message: dict[str, Any]) -> None:
        return None

    router = Router("the test server", initialized=lambda: True, respond=nothing)
    exchange = router.open({"jsonrpc": "2.0", "id": 1, "method": BIG, "params": {}}, 0.05)
    with pytest.raises(UpstreamTimeout) as caught:
        async for _ in exchange:
            pass
    await exchange.aclose()
    message = str(caught.value)
    assert message.startswith("the test server sent nothing for 'xxx") and CUT in message
    assert len(message) <= MESSAGE_BOUND
