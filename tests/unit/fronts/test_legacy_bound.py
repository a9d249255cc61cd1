"""The bound on legacy clients' sessions (app/fronts/legacy/bound.py): pure decisions."""

from __future__ import annotations

from app.config import Settings
from app.fronts.legacy.bound import (
    ADMIT,
    ELSEWHERE,
    OPENING,
    REQUEST,
    STREAM,
    Held,
    Limits,
    Reclaim,
    Refuse,
    decide,
)

LIMITS = Limits(total=8, share=3, reclaim_idle_s=60.0)


def held(*sessions: tuple[str, float | None]) -> list[Held]:
    return [Held(c, idle) for c, idle in sessions]


def test_room_is_admitted() -> None:
    assert decide(held(("a", 5.0), ("b", None)), "a", LIMITS) == ADMIT
    assert decide([], "a", LIMITS) == ADMIT


def test_a_credential_at_its_share_makes_room_only_from_its_own_idle_sessions() -> None:
    sessions = held(("a", 61.0), ("a", 90.0), ("a", None), ("b", 500.0))
    # Its own session idle longest, never another credential's (b idles longer).
    assert decide(sessions, "a", LIMITS) == Reclaim(1)


def test_at_its_share_the_least_recently_used_idle_session_goes_however_short_its_idle() -> None:
    # Clients that drop the connection without DELETE leave sessions idle a few
    # seconds: one of them makes room, not the idle timeout.
    sessions = held(("a", 2.0), ("a", None), ("a", 0.5), ("b", 500.0))
    assert decide(sessions, "a", LIMITS) == Reclaim(0)
    assert decide(held(("a", 0.0), ("a", None), ("a", None)), "a", LIMITS) == Reclaim(0)


def test_a_share_all_busy_is_refused_saying_with_what() -> None:
    sessions = [
        Held("a", None, REQUEST),
        Held("a", None, STREAM),
        Held("a", None, REQUEST),
        Held("b", 500.0),
    ]
    # 429, retried in a second: any of them may be idle by then.
    refused = Refuse(True, 1, "2 with a request in flight, 1 with a GET stream open")
    assert decide(sessions, "a", LIMITS) == refused
    others = [Held("a", None, OPENING), Held("a", None, ELSEWHERE), Held("a", None, STREAM)]
    assert decide(others, "a", LIMITS) == Refuse(
        True, 1, "1 with a GET stream open, 1 being opened, 1 in use on another worker"
    )


def test_busy_and_opening_sessions_are_never_taken() -> None:
    # None: a request or a GET stream in flight, or an initialize under way.
    sessions = held(*[(c, None) for c in "aabbccdd"])
    assert decide(sessions, "e", LIMITS) == Refuse(False, 60)


def test_at_the_bound_the_most_holding_credential_gives_room_first() -> None:
    sessions = held(
        ("a", 3000.0),  # the longest idle, but a's only session
        ("b", 61.0),
        ("b", 70.0),
        ("b", 65.0),
        ("c", 80.0),
        ("c", 90.0),
        ("d", None),
        ("d", None),
    )
    # b holds the most (3) and has sessions idle enough: its longest idle one.
    assert decide(sessions, "e", LIMITS) == Reclaim(2)


def test_at_the_bound_a_lesser_holder_gives_room_when_the_greatest_cannot() -> None:
    sessions = held(
        ("a", 3000.0),
        ("b", None),
        ("b", None),
        ("b", 10.0),  # idle, not long enough
        ("c", 80.0),
        ("c", 90.0),
        ("d", 100.0),
        ("d", None),
    )
    # c and d hold 2 each: the longest idle among theirs (d's, 100 s).
    assert decide(sessions, "e", LIMITS) == Reclaim(6)


def test_at_the_bound_nothing_idle_long_enough_is_503_with_the_soonest_retry() -> None:
    sessions = held(*[(c, 30.0) for c in "aabbcc"], ("d", 59.2), ("d", None))
    assert decide(sessions, "e", LIMITS) == Refuse(False, 1)


def test_the_share_is_checked_before_the_bound() -> None:
    # At its share and at the bound: the caller's own load, 429 from its own
    # sessions, never one of another's taken for it.
    limits = Limits(total=4, share=2, reclaim_idle_s=60.0)
    sessions = [Held("a", None, REQUEST), Held("a", None, REQUEST), Held("b", 500.0)]
    sessions.append(Held("c", 500.0))
    assert decide(sessions, "a", limits) == Refuse(True, 1, "2 with a request in flight")


def test_the_settings_default_share_is_a_quarter_and_never_above_the_bound() -> None:
    url = "http://127.0.0.1:1/mcp"
    default = Settings(upstream_url=url)  # type: ignore[arg-type]
    assert (default.max_legacy_sessions, default.legacy_session_share()) == (1024, 256)
    assert default.legacy_session_reclaim_idle_s == 60.0
    small = Settings(upstream_url=url, max_legacy_sessions=3)  # type: ignore[arg-type]
    assert small.legacy_session_share() == 1
    wide = Settings(
        upstream_url=url,  # type: ignore[arg-type]
        max_legacy_sessions=8,
        max_legacy_sessions_per_credential=100,
    )
    assert wide.legacy_session_share() == 8
