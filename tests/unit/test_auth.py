"""OAuth pass-through, the pure parts (app/fronts/shared/auth.py): the challenge the client
sees, the metadata URL of an endpoint, the gateway's own URL and document."""

from __future__ import annotations

import pytest

from app.fronts.shared import auth
from app.upstream.errors import UpstreamAuthChallenge, UpstreamUnavailable

UPSTREAM_CHALLENGE = (
    'Bearer error="invalid_token", error_description="Authentication required", '
    'resource_metadata="http://10.0.0.9:3001/.well-known/oauth-protected-resource/mcp"'
)


def test_metadata_url_puts_the_well_known_suffix_between_host_and_path() -> None:
    # RFC 9728 section 3.1, as 2025-11-25 basic/authorization shows it:
    # https://example.com/public/mcp -> /.well-known/oauth-protected-resource/public/mcp
    assert (
        auth.metadata_url("https://example.com/public/mcp")
        == "https://example.com/.well-known/oauth-protected-resource/public/mcp"
    )
    assert (
        auth.metadata_url("https://example.com/")
        == "https://example.com/.well-known/oauth-protected-resource"
    )


def test_well_known_candidates_in_the_order_clients_try_them() -> None:
    # 2025-11-25 basic/authorization: the path form first, then the root.
    assert auth.well_known_candidates("http://up:3001/mcp") == [
        "http://up:3001/.well-known/oauth-protected-resource/mcp",
        "http://up:3001/.well-known/oauth-protected-resource",
    ]


def test_challenge_points_at_the_gateway_and_keeps_the_rest() -> None:
    ours = "https://gw.example/.well-known/oauth-protected-resource/mcp"
    rewritten = auth.rewrite_challenge(UPSTREAM_CHALLENGE, ours)
    assert rewritten == (
        'Bearer error="invalid_token", error_description="Authentication required", '
        f'resource_metadata="{ours}"'
    )
    assert "10.0.0.9" not in rewritten


def test_challenge_without_a_gateway_url_loses_the_upstream_address() -> None:
    rewritten = auth.rewrite_challenge(UPSTREAM_CHALLENGE, None)
    assert "10.0.0.9" not in rewritten and "resource_metadata" not in rewritten
    assert rewritten == (
        'Bearer error="invalid_token", error_description="Authentication required"'
    )
    first = auth.rewrite_challenge(
        'Bearer resource_metadata="http://x/.well-known/oauth-protected-resource", scope="a b"',
        None,
    )
    assert first == 'Bearer scope="a b"'


def test_unquoted_and_oddly_cased_parameter_is_rewritten() -> None:
    rewritten = auth.rewrite_challenge(
        "Bearer Resource_Metadata=http://up/.well-known/oauth-protected-resource", "http://gw/m"
    )
    assert rewritten == 'Bearer Resource_Metadata="http://gw/m"'


def test_extended_parameter_is_rewritten_and_never_relayed_as_it_came() -> None:
    """RFC 8187's `resource_metadata*=UTF-8''<pct-encoded>`: decoded, rewritten
    the same way, encoded again; dropped without a URL of ours."""
    upstream = "http://10.0.0.9:3001/.well-known/oauth-protected-resource/mcp"
    encoded = "UTF-8''http%3A%2F%2F10.0.0.9%3A3001%2F.well-known%2Foauth-protected-resource%2Fmcp"
    challenge = f'Bearer error="invalid_token", resource_metadata*={encoded}, scope="a"'
    assert auth.challenge_metadata_url(challenge) == upstream
    ours = "https://gw.example/.well-known/oauth-protected-resource/mcp"
    rewritten = auth.rewrite_challenge(challenge, ours)
    assert "10.0.0.9" not in rewritten
    assert rewritten == (
        "Bearer error=\"invalid_token\", resource_metadata*=UTF-8''"
        "https%3A%2F%2Fgw.example%2F.well-known%2Foauth-protected-resource%2Fmcp, "
        'scope="a"'
    )
    assert auth.challenge_metadata_url(rewritten) == ours
    dropped = auth.rewrite_challenge(challenge, None)
    assert dropped == 'Bearer error="invalid_token", scope="a"'
    # Both forms at once, odd spacing and case, an undecodable value: all ours.
    both = f"Bearer resource_metadata=\"{upstream}\", Resource_Metadata *= ISO-8859-1'en'%FF%ZZ"
    rewritten = auth.rewrite_challenge(both, "http://gw/m")
    assert "10.0.0.9" not in rewritten and "%ZZ" not in rewritten
    assert rewritten == (
        "Bearer resource_metadata=\"http://gw/m\", Resource_Metadata *= UTF-8''http%3A%2F%2Fgw%2Fm"
    )
    assert auth.rewrite_challenge(both, None) == "Bearer"


def test_challenge_parts_are_read() -> None:
    assert auth.challenge_metadata_url(UPSTREAM_CHALLENGE) == (
        "http://10.0.0.9:3001/.well-known/oauth-protected-resource/mcp"
    )
    assert auth.challenge_error(UPSTREAM_CHALLENGE) == "invalid_token"
    assert auth.challenge_error('Bearer realm="x"') is None
    assert auth.challenge_metadata_url(None) is None


def test_refusal_keeps_status_and_carries_a_json_rpc_error() -> None:
    exc = UpstreamAuthChallenge("upstream answered initialize with 403", 403, UPSTREAM_CHALLENGE)
    rejection, headers = auth.refusal(7, exc, "http://127.0.0.1:8080/mcp")
    assert rejection.http_status == 403
    message = rejection.to_message()
    assert message["id"] == 7 and message["error"]["data"] == {
        "status": 403,
        "error": "invalid_token",
    }
    assert headers == (
        (
            "www-authenticate",
            'Bearer error="invalid_token", error_description="Authentication required", '
            'resource_metadata="http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"',
        ),
    )
    bare, none = auth.refusal(1, UpstreamAuthChallenge("x", 401, None), None)
    assert bare.http_status == 401 and none == ()


@pytest.mark.parametrize(
    ("host", "allowed", "expected"),
    [
        ("127.0.0.1:8080", [], "http://127.0.0.1:8080/mcp"),
        ("LOCALHOST:9", [], "http://localhost:9/mcp"),
        ("mcp.example.com", ["mcp.example.com"], "http://mcp.example.com/mcp"),
        # Not checked: never echoed.
        ("evil.example", [], None),
        ("evil.example", ["*"], None),
        (None, [], None),
        # Passes the host check by its name, but is no URL authority.
        ("localhost:80/x?y", [], None),
        ('localhost"', [], None),
    ],
)
def test_gateway_url_from_a_checked_host_only(
    host: str | None, allowed: list[str], expected: str | None
) -> None:
    assert auth.gateway_mcp_url(None, "http", host, allowed) == expected


def test_configured_public_url_wins() -> None:
    assert (
        auth.gateway_mcp_url("https://mcp.example.com/mcp", "http", "evil", [])
        == "https://mcp.example.com/mcp"
    )


def test_gateway_document_is_the_upstreams_for_our_resource() -> None:
    upstream = {
        "resource": "http://10.0.0.9:3001/mcp",
        "authorization_servers": ["https://as.example/"],
        "scopes_supported": ["mcp:tools"],
        "signed_metadata": "eyJ...",
    }
    document = auth.gateway_metadata(upstream, "https://gw.example/mcp")
    assert document == {
        "resource": "https://gw.example/mcp",
        "authorization_servers": ["https://as.example/"],
        "scopes_supported": ["mcp:tools"],
    }
    assert upstream["resource"] == "http://10.0.0.9:3001/mcp"  # not mutated


class Upstream:
    """What AuthRelay fetches: documents by URL, every fetch counted."""

    def __init__(self, documents: dict[str, object], fail: bool = False) -> None:
        self.documents = documents
        self.fail = fail
        self.fetched: list[str] = []

    async def __call__(self, url: str) -> object:
        self.fetched.append(url)
        if self.fail:
            raise UpstreamUnavailable("upstream unreachable during metadata GET: OSError")
        return self.documents.get(url)


UP = "http://up:3001/mcp"
UP_DOC = {"resource": UP, "authorization_servers": ["https://as.example/"]}


async def test_metadata_from_the_well_known_urls_then_cached() -> None:
    upstream = Upstream({"http://up:3001/.well-known/oauth-protected-resource": UP_DOC})
    relay = auth.AuthRelay(upstream, UP)
    status, body = await relay.answer("http://gw/mcp")
    assert status == 200 and body["resource"] == "http://gw/mcp"
    assert upstream.fetched == [
        "http://up:3001/.well-known/oauth-protected-resource/mcp",
        "http://up:3001/.well-known/oauth-protected-resource",
    ]
    await relay.answer("http://gw/mcp")
    assert len(upstream.fetched) == 2  # cached


async def test_metadata_url_named_by_a_same_origin_challenge_comes_first() -> None:
    named = "http://up:3001/custom/prm"
    upstream = Upstream({named: UP_DOC})
    relay = auth.AuthRelay(upstream, UP)
    # A challenge naming another origin (e.g. the gateway's own public URL) is
    # not fetched: the gateway would be asking itself.
    relay.note('Bearer resource_metadata="https://gw.example/.well-known/oauth-protected-resource"')
    relay.note(f'Bearer resource_metadata="{named}"')
    status, _ = await relay.answer("http://gw/mcp")
    assert status == 200 and upstream.fetched == [named]


async def test_metadata_missing_or_unreachable() -> None:
    assert (await auth.AuthRelay(Upstream({}), UP).answer("http://gw/mcp"))[0] == 404
    failing = Upstream({}, fail=True)
    relay = auth.AuthRelay(failing, UP)
    assert (await relay.answer("http://gw/mcp"))[0] == 502
    assert (await relay.answer("http://gw/mcp"))[0] == 502
    assert len(failing.fetched) == 1  # the failure is cached too, briefly
    status, body = await relay.answer(None)
    assert status == 404 and "MCP_SHIM_PUBLIC_URL" in body["error_description"]
