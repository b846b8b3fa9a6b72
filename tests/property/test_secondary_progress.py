"""Properties of the secondaries' progress kept in memory (``Progress``): what is handed
to operator state (``unsaved``) is each secondary's latest sighting once, a failed write
hands it back (``keep``), and what operator state held merges in without undoing a newer
sighting (``restore``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns.transfer import Listed
from valis_core.dns.transfer.secondary_progress import Progress, Seen

ZONES = ("a.test.", "b.test.")
HOSTS = ("192.0.2.1", "192.0.2.2", "2001:db8::1")

sightings = st.lists(
    st.builds(Seen, st.sampled_from(ZONES), st.sampled_from(HOSTS),
              st.integers(0, 2**32 - 1), st.floats(0, 1e9, allow_nan=False)),
    max_size=30,
)


def latest(seen: list[Seen]) -> dict[tuple[str, str], Seen]:
    """Each secondary's last sighting, in the order they were made."""
    last: dict[tuple[str, str], Seen] = {}
    for s in seen:
        last[(s.zone, s.address)] = s
    return last


def listed() -> list[Listed]:
    return [Listed(zone, host, "k.", "hmac-sha256", bytes(32)) for zone in ZONES
            for host in HOSTS]


@given(sightings, sightings)
def test_unsaved_gives_each_secondarys_latest_sighting_once(
    first: list[Seen], second: list[Seen]
) -> None:
    progress = Progress()
    for s in first:
        progress.saw(s.zone, s.address, s.serial, s.at)
    taken = progress.unsaved()
    assert sorted(taken, key=repr) == sorted(latest(first).values(), key=repr)
    assert progress.unsaved() == ()
    for s in second:
        progress.saw(s.zone, s.address, s.serial, s.at)
    assert sorted(progress.unsaved(), key=repr) == sorted(latest(second).values(), key=repr)


@given(sightings, sightings)
def test_a_failed_write_is_handed_back_with_what_was_seen_since(
    first: list[Seen], since: list[Seen]
) -> None:
    progress = Progress()
    for s in first:
        progress.saw(s.zone, s.address, s.serial, s.at)
    unwritten = progress.unsaved()
    for s in since:
        progress.saw(s.zone, s.address, s.serial, s.at)
    progress.keep(unwritten)
    expected = latest([*first, *since])
    assert sorted(progress.unsaved(), key=repr) == sorted(expected.values(), key=repr)


@given(sightings, sightings)
def test_what_operator_state_held_merges_in_without_undoing_a_newer_sighting(
    here: list[Seen], stored: list[Seen]
) -> None:
    progress = Progress()
    for s in here:
        progress.saw(s.zone, s.address, s.serial, s.at)
    progress.unsaved()
    stored_latest = latest(stored)
    progress.restore(list(stored_latest.values()))
    assert progress.unsaved() == ()  # what operator state holds is not written back
    mine = latest(here)
    report = {(r.zone, r.address): r for r in progress.report(listed(), {}, now=0.0)}
    for key in {*mine, *stored_latest}:
        # the newer of the two; at a tie the sighting made here stands
        ours, theirs = mine.get(key), stored_latest.get(key)
        newest = theirs if ours is None or (theirs is not None and theirs.at > ours.at) else ours
        assert newest is not None
        shown = report[key]
        assert (shown.serial, shown.seen_at) == (newest.serial, newest.at)
