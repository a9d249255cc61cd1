"""The bound on legacy clients' sessions (app/fronts/legacy/bound.py): pure decisions."""

from __future__ import annotations

from app.config import Settings
from app.fronts.legacy.bound import ADMIT, Held, Limits, Reclaim, Refuse, decide

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


def test_a_credential_at_its_share_with_nothing_idle_long_enough_is_refused() -> None:
    sessions = held(("a", 50.0), ("a", None), ("a", 10.0), ("b", 500.0))
    # 429, and room is possible in 10 s (the one idle 50 s of a 60 s period).
    assert decide(sessions, "a", LIMITS) == Refuse(True, 10)
    # With all busy, a whole period: one going idle now is taken that much later.
    busy = held(("a", None), ("a", None), ("a", None))
    assert decide(busy, "a", LIMITS) == Refuse(True, 60)


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
    sessions = held(("a", None), ("a", None), ("b", 500.0), ("c", 500.0))
    assert decide(sessions, "a", limits) == Refuse(True, 60)


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
