"""Room for one more stdio process (app/upstream/stdio/room.py): pure choices."""

from __future__ import annotations

from dataclasses import dataclass

from app.upstream.stdio.room import candidates, holding


@dataclass
class Proc:
    credentials: str
    last_active: float
    owned: bool = False
    in_flight: int = 0
    listening: bool = False
    initialized: bool = True
    closing: bool = False
    stopped: bool = False
    unused: bool = False


def test_a_share_of_idle_legacy_sessions_gives_its_least_recently_used() -> None:
    # Six sessions their clients left without DELETE: all owned, all idle.
    procs = [Proc("anon", float(t), owned=True) for t in (5, 1, 3, 2, 6, 4)]
    assert candidates(procs, "anon")[0] is procs[1]
    assert [p.last_active for p in candidates(procs, "anon")] == [1, 2, 3, 4, 5, 6]


def test_busy_starting_and_streaming_legacy_sessions_are_never_taken() -> None:
    procs = [
        Proc("a", 1, owned=True, in_flight=1),
        Proc("a", 2, owned=True, listening=True),  # its GET stream
        Proc("a", 3, owned=True, initialized=False),
        Proc("a", 4, in_flight=2),
    ]
    assert candidates(procs, "a") == []
    # A pooled process's listen stream (the hub's) may go, after the others.
    hub, idle = Proc("a", 0, listening=True), Proc("a", 9, owned=True)
    assert candidates([*procs, hub, idle], "a") == [idle, hub]


def test_pooled_processes_go_before_legacy_clients_own() -> None:
    own, pooled = Proc("a", 1, owned=True), Proc("a", 5)
    assert candidates([own, pooled], "a") == [pooled, own]


def test_a_share_takes_only_its_own() -> None:
    procs = [Proc("b", 1, owned=True), Proc("b", 2), Proc("a", 9, owned=True)]
    assert candidates(procs, "a") == [procs[2]]


def test_nothing_is_taken_while_one_is_on_its_way_out() -> None:
    procs = [Proc("a", 1, owned=True), Proc("a", 2, closing=True)]
    assert candidates(procs, "a") == []
    assert candidates([Proc("a", 1), Proc("b", 2, stopped=True)], None) == []
    # Another credential's exit does not hold up this share.
    assert candidates([Proc("a", 1), Proc("b", 2, stopped=True)], "a") != []


def test_at_the_whole_bound_legacy_sessions_come_from_the_credential_holding_most() -> None:
    owner = Proc("owner", 0, owned=True)  # idle longest, but its only one
    anon = [Proc("anon", float(t), owned=True) for t in (3, 1, 2)]
    assert candidates([owner, *anon], None) == [anon[1], anon[2], anon[0]]
    # Pooled processes of anyone may still go.
    pooled = Proc("owner", 7)
    assert candidates([owner, pooled, *anon], None)[0] is pooled


def test_holding_counts_what_keeps_each_busy() -> None:
    procs = [
        Proc("a", 1, in_flight=1),
        Proc("a", 2, in_flight=3, listening=True),
        Proc("a", 3, listening=True),
        Proc("a", 4, initialized=False),
        Proc("a", 5, closing=True),
    ]
    assert holding(procs, starting=1) == (
        "2 with a call in flight, 1 with a stream open, 2 starting, 1 stopping"
    )
    assert holding([Proc("b", 1, owned=True)], 0) == ("1 idle, a legacy session of another caller")


def test_a_pooled_process_is_not_taken_before_its_openers_first_request() -> None:
    # Just opened, nothing in flight yet: it only looks idle.
    fresh, used = Proc("a", 1, unused=True), Proc("a", 5)
    assert candidates([fresh, used], "a") == [used]
    # A legacy client's own is its client's from its initialize on: one that
    # initialised and left is taken like any idle session of its share.
    left = Proc("a", 0, owned=True, unused=True)
    assert candidates([fresh, left], "a") == [left]
