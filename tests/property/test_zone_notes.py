"""The zone source's notes folded into a batch (``zone_notes.fold``): whatever the commits
and whichever of their rows fitted a note, the owners read plus the owners carried give
every changed owner exactly as the last commit left it; and a rows note that is not
exactly what the seal sends asks for a read, never for its rows to be trusted."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns.wire.records import RecordRow
from valis_core.operator_state.zone_notes import (
    CHANNEL,
    FENCE_CHANNEL,
    ROWS_CHANNEL,
    Note,
    fold,
    parse_note,
    parse_rows,
    plan,
    read_notes,
)

ZONE = "example.org."
OTHER = "example.net."
OWNERS = ("example.org.", "a.example.org.", "b.example.org.", "c.b.example.org.")


def rows_note(zone: str, owners: dict[str, list[list[object]]]) -> str:
    """A payload as migration 0022's seal builds it."""
    return json.dumps({
        "zone": zone, "owners": sorted(owners),
        "rows": [row for held in owners.values() for row in held],
    })


# A commit: the owners it changes, each to some rows (possibly none), and whether the
# seal's rows note fitted.
commits = st.lists(
    st.tuples(
        st.dictionaries(
            st.sampled_from(OWNERS),
            st.lists(st.tuples(st.sampled_from(("A", "TXT")), st.integers(0, 3)), max_size=3),
            min_size=1,
        ),
        st.booleans(),
    ),
    min_size=1, max_size=8,
)


@given(commits)
def test_read_and_carried_owners_give_every_changed_owner_as_last_committed(
    history: list[tuple[dict[str, list[tuple[str, int]]], bool]],
) -> None:
    state: dict[str, tuple[RecordRow, ...]] = {}
    notes: list[Note] = []
    for changed, fitted in history:
        for owner, held in changed.items():
            # Spelled in capitals in the database: rows are matched by lowercased owner.
            state[owner] = tuple(
                RecordRow(ZONE, owner.upper(), rtype, 300, f"192.0.2.{n}") for rtype, n in held
            )
        notes.append(parse_note("\n".join([ZONE, *changed])))
        if fitted:
            notes.append(parse_rows(rows_note(ZONE, {
                owner: [[r.owner, r.rtype, r.ttl, r.rdata] for r in state[owner]]
                for owner in changed
            })))
    changes = fold(notes, None)
    read = changes.owners.get(ZONE, set())
    carried = changes.carried.get(ZONE, {})
    assert read | carried.keys() == state.keys()
    for owner in state.keys() - read:  # what the source takes from notes, unread
        assert carried[owner] == state[owner]
    # An owner is read only when the last commit naming it sent no rows note.
    for owner in state:
        last = max(i for i, (changed, _) in enumerate(history) if owner in changed)
        assert (owner in read) == (not history[last][1])
    # Planned and put together with what a read finds now: every owner as committed.
    batch = plan(changes, {ZONE}, len(OWNERS))
    assert batch.whole == ()
    assert batch.reads == ({ZONE: read} if read else {})
    found = batch.rows({ZONE: tuple(row for owner in read for row in state[owner])}
                       if read else {})
    assert sorted(found[ZONE], key=repr) == sorted(
        (row for rows in state.values() for row in rows), key=repr)
    # A zone not patchable, or with more owners than patched, is re-read whole.
    assert plan(changes, set(), len(OWNERS)).whole == (ZONE,)
    assert plan(changes, {ZONE}, len(state) - 1).whole == (ZONE,)


def test_a_fence_note_and_zones_not_served_fold_as_they_say() -> None:
    notes = [
        parse_rows(rows_note(OTHER, {"a.example.net.": [["a.example.net.", "A", 300, "x"]]})),
        Note(fence=True),
        parse_note(f"{ZONE}\na.{ZONE}"),
    ]
    changes = fold(notes, {ZONE})
    assert changes.fence
    assert changes.carried == {}
    assert changes.owners == {ZONE: {f"a.{ZONE}"}}
    assert not fold(notes[2:], None).fence
    # A zone read back and not found has no rows to patch with.
    missing = plan(fold(notes[2:], None), {ZONE}, 10)
    assert missing.rows({}) == {}


def test_a_rows_note_that_is_not_the_seal_s_asks_for_a_read() -> None:
    good = rows_note(ZONE, {f"a.{ZONE}": [[f"A.{ZONE}", "A", 300, "192.0.2.1"]],
                            f"b.{ZONE}": []})
    assert parse_rows(good) == Note(
        zone=ZONE, owners=(f"a.{ZONE}", f"b.{ZONE}"),
        rows=(RecordRow(ZONE, f"A.{ZONE}", "A", 300, "192.0.2.1"),),
    )
    named = Note(zone=ZONE, owners=(f"a.{ZONE}",))
    cases = {
        # A row of an owner the note does not name.
        rows_note(ZONE, {f"a.{ZONE}": [[f"b.{ZONE}", "A", 300, "192.0.2.1"]]}): named,
        # A TTL that is not an integer; a row that is not four fields.
        rows_note(ZONE, {f"a.{ZONE}": [[f"a.{ZONE}", "A", "300", "192.0.2.1"]]}): named,
        rows_note(ZONE, {f"a.{ZONE}": [[f"a.{ZONE}", "A", 300]]}): Note(zone=ZONE),
        # An owner outside the zone, or not plain: the zone whole.
        rows_note(ZONE, {"a.example.net.": []}): Note(zone=ZONE),
        rows_note(ZONE, {"a\\.b.example.org.": []}): Note(zone=ZONE),
        json.dumps({"zone": ZONE, "owners": "a.example.org.", "rows": []}): Note(zone=ZONE),
        json.dumps({"zone": ZONE, "rows": []}): Note(zone=ZONE),
        # No zone to name: everything.
        json.dumps({"owners": [], "rows": []}): Note(everything=True),
        json.dumps({"zone": 7}): Note(everything=True),
        "{not json": Note(everything=True),
    }
    for payload, expected in cases.items():
        assert parse_rows(payload) == expected, payload


def _naive(channel: str, payload: str) -> Note:
    if channel == FENCE_CHANNEL:
        return Note(fence=True)
    return parse_rows(payload) if channel == ROWS_CHANNEL else parse_note(payload)


owner_sets = st.lists(st.sampled_from(OWNERS), min_size=1, max_size=3, unique=True)
# A seal's pair (its names note, then its rows note for the same owners, or for others:
# a rows note that does not cover it), a names note alone, a zone note, a rows note of
# another zone, the fence.
raw_notes = st.one_of(
    st.builds(lambda owners, same, others: [
        (CHANNEL, "\n".join([ZONE, *sorted(owners)])),
        (ROWS_CHANNEL, rows_note(ZONE, {
            owner: [[owner.upper(), "A", 300, "192.0.2.1"]]
            for owner in (owners if same else others)
        })),
    ], owner_sets, st.booleans(), owner_sets),
    st.builds(lambda owners: [(CHANNEL, "\n".join([ZONE, *owners]))], owner_sets),
    st.just([(CHANNEL, ZONE)]),
    st.just([(ROWS_CHANNEL, rows_note(OTHER, {"a.example.net.": []}))]),
    st.just([(FENCE_CHANNEL, "")]),
    st.just([(ROWS_CHANNEL, "{not json")]),
)


@given(st.lists(raw_notes, max_size=6), st.sampled_from((None, {ZONE})))
def test_a_names_note_left_unparsed_folds_as_if_it_had_been_read(
    groups: list[list[tuple[str, str]]], served: set[str] | None,
) -> None:
    held = [note for group in groups for note in group]
    notes = read_notes(held)
    assert fold(notes, served) == fold([_naive(*note) for note in held], served)
    # Only a names note the next rows note covers is left out.
    covered = sum(
        1 for (channel, payload), (after, rows) in itertools.pairwise(held)
        if channel == CHANNEL and after == ROWS_CHANNEL
        and (note := parse_rows(rows)).rows is not None
        and payload == "\n".join([note.zone, *note.owners])
    )
    assert len(notes) == len(held) - covered
