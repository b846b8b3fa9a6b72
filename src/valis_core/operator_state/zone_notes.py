"""What the zone source hears: one notification read (``parse_note``, ``parse_rows``),
the notifications a socket holds folded, in the order they came, into one batch of
changes (``fold``, ``drain``), and what the batch asks to read and replace (``plan``).

Why what the source applies converges on what a full reload gives: a note is delivered
only after its transaction commits, and a named owner's rows are read after the note
arrives, so every changed owner is read again after its last change; every other owner
is unchanged since the read it was last indexed from. Most changes need no read at all
(migration 0022): the seal of a committed change sends a rows note with every row its
changed owners hold, read under the zone's lock, which no other change of the zone
passes before this commit. Notes come in commit order, so an owner a rows note carries
is taken from the latest one, and read only when a later note names it again (a change
whose rows did not fit a note): it is as a read after its last change would find it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import attrs
import psycopg

from valis_core.dns import wire
from valis_core.dns.wire.records import RecordRow
from valis_core.operator_state.zone_load import plain_owner

CHANNEL = "valis_zone_owners_changed"
"""Where a change's owners are named (payloads: ``parse_note``): by the seal of its
journal entry (migration 0023), by a records statement the journal does not cover, and by
the zones trigger. Migration 0003 made it; ``valis_zone_changed`` still carries bare zone
names for sources of older valis versions."""

ROWS_CHANNEL = "valis_zone_rows"
"""Where the seal sends the rows a committed change's owners hold (migration 0022;
payloads: ``parse_rows``)."""

FENCE_CHANNEL = "valis_fence_changed"
"""Where a change of the instance fence is noted (migration 0022), in commit order with
the rows notes."""

CHANNELS = (CHANNEL, ROWS_CHANNEL, FENCE_CHANNEL)
"""What a zone source listens to."""


@attrs.frozen
class Note:
    """One notification: reload everything, one zone whole, some owners of one zone (to
    be read, or with ``rows``, every row they hold as committed), or the fence changed."""

    everything: bool = False
    zone: str = ""
    owners: tuple[str, ...] = ()
    rows: tuple[RecordRow, ...] | None = None
    """With a rows note: every row ``owners`` hold (none: they hold none now)."""
    fence: bool = False


def parse_note(payload: str) -> Note:
    """Read a payload: ``""`` (everything), ``"zone"`` (that zone whole) or
    ``"zone\\nowner\\n..."`` (those owners of it). An owner that is not plain ASCII, or
    not inside the zone, makes the note ask for the zone whole: when in doubt, re-read."""
    if payload == "":
        return Note(everything=True)
    zone, *owners = payload.split("\n")
    if not owners:
        return Note(zone=zone)
    try:
        apex = wire.from_text(zone).lower()
        for owner in owners:
            if not plain_owner(owner):
                return Note(zone=zone)
            if not wire.is_at_or_below(wire.from_text(owner).lower(), apex):
                return Note(zone=zone)
    except wire.BadName:
        return Note(zone=zone)
    return Note(zone=zone, owners=tuple(owner.lower() for owner in owners))


def parse_rows(payload: str) -> Note:
    """Read a rows note: JSON ``{"zone": z, "owners": [o, ...], "rows": [[owner, rtype,
    ttl, rdata], ...]}``. One that is not exactly that (owners plain and inside the zone,
    each row's owner among them) asks for what it names to be read, or for everything
    when it names no zone: when in doubt, re-read."""
    try:
        held = json.loads(payload)
        zone = held["zone"]
    except (ValueError, TypeError, KeyError):
        return Note(everything=True)
    if not isinstance(zone, str):
        return Note(everything=True)
    try:
        owners, rows = held["owners"], held["rows"]
        if not (isinstance(owners, list) and isinstance(rows, list)):
            return Note(zone=zone)
        named = parse_note("\n".join([zone, *owners]))
        if not named.owners or len(set(named.owners)) != len(owners):
            return named
        wanted = set(named.owners)
        found = []
        for owner, rtype, ttl, rdata in rows:
            if not (isinstance(owner, str) and isinstance(rtype, str) and type(ttl) is int
                    and isinstance(rdata, str) and owner.lower() in wanted):
                return named
            found.append(RecordRow(zone, owner, rtype, ttl, rdata))
    except (ValueError, TypeError, KeyError):
        return Note(zone=zone)
    return Note(zone=zone, owners=named.owners, rows=tuple(found))


@attrs.frozen
class Changes:
    """What one batch of notifications asks for."""

    everything: bool
    zones: frozenset[str]
    owners: Mapping[str, set[str]]
    """Owners to read, by zone: those named after the last rows note that covered them."""
    carried: Mapping[str, Mapping[str, tuple[RecordRow, ...]]] = attrs.field(factory=dict)
    """Owners whose rows came with a rows note, by zone, each with the rows the latest
    note gave it (an owner also in ``owners`` is read: a later change named it)."""
    fence: bool = False
    """The fence changed: read it before applying anything."""


def fold(notes: Iterable[Note], served: set[str] | None) -> Changes:
    """Fold notes, in the order they came, into one batch of changes to ``served``
    zones (None: every zone). Notes come in commit order, so a rows note holds an owner's
    rows as of a commit no earlier than any note before it: it stands for their reads."""
    everything = fence = False
    zones: set[str] = set()
    owners: dict[str, set[str]] = {}
    carried: dict[str, dict[str, tuple[RecordRow, ...]]] = {}
    for note in notes:
        if note.fence:
            fence = True
        elif note.everything:
            everything = True
        elif served is not None and note.zone not in served:
            continue
        elif note.rows is not None:
            rows: dict[str, list[RecordRow]] = {owner: [] for owner in note.owners}
            for row in note.rows:
                rows[row.owner.lower()].append(row)
            held = carried.setdefault(note.zone, {})
            for owner, found in rows.items():
                held[owner] = tuple(found)
            owners.get(note.zone, set()).difference_update(note.owners)
        elif note.owners:
            owners.setdefault(note.zone, set()).update(note.owners)
        else:
            zones.add(note.zone)
    return Changes(everything, frozenset(zones),
                   {zone: held for zone, held in owners.items() if held}, carried, fence)


def drain(listen: psycopg.Connection[Any], served: set[str] | None) -> Changes:
    """Read what the socket holds and fold it into one batch of changes to ``served``
    zones (None: every zone)."""
    pgconn = listen.pgconn
    pgconn.consume_input()  # raises OperationalError when the connection is gone
    if pgconn.status != psycopg.pq.ConnStatus.OK:
        raise psycopg.OperationalError("zone source: listen connection is broken")
    held: list[tuple[str, str]] = []
    while (raw := pgconn.notifies()) is not None:
        held.append((raw.relname.decode("utf-8", "replace"),
                     raw.extra.decode("utf-8", "replace")))
    return fold(read_notes(held), served)


def read_notes(held: Iterable[tuple[str, str]]) -> list[Note]:
    """Parse (channel, payload) notifications in the order they came. A seal's names
    note is followed by its rows note naming the same owners (migration 0023), which
    stands for it in ``fold``: such a names note is left out unparsed."""
    notes: list[Note] = []
    named: str | None = None  # a names note, held until the note after it is read
    for channel, payload in held:
        rows = parse_rows(payload) if channel == ROWS_CHANNEL else None
        if named is not None and not (
            rows is not None and rows.rows is not None
            and named == "\n".join([rows.zone, *rows.owners])
        ):
            notes.append(parse_note(named))
        named = None
        if channel == FENCE_CHANNEL:
            notes.append(Note(fence=True))
        elif rows is not None:
            notes.append(rows)
        else:
            named = payload
    if named is not None:
        notes.append(parse_note(named))
    return notes


@attrs.frozen
class Batch:
    """What one batch of changes reads and replaces."""

    whole: tuple[str, ...]
    """Zones re-read and indexed whole."""
    patches: Mapping[str, set[str]]
    """Zones patched, each with every owner it replaces."""
    reads: Mapping[str, set[str]]
    """Of those, the owners read back: those named after the last rows note carrying
    them (``Changes.owners``)."""
    carried: Mapping[str, Mapping[str, tuple[RecordRow, ...]]]

    def rows(self, read: Mapping[str, tuple[RecordRow, ...]]) -> dict[str, tuple[RecordRow, ...]]:
        """Each patched zone's rows: ``read`` (the owners read, by zone; a zone read and
        not found is left out) with the rows carried for the owners not read."""
        found: dict[str, tuple[RecordRow, ...]] = {}
        for zone in self.patches:
            wanted = self.reads.get(zone, set())
            if wanted and zone not in read:
                continue
            found[zone] = read.get(zone, ()) + tuple(
                row for owner, rows in self.carried.get(zone, {}).items()
                if owner not in wanted for row in rows
            )
        return found


def plan(changes: Changes, patchable: Collection[str], max_owners: int) -> Batch:
    """The zones ``changes`` re-reads whole (those noted whole, not ``patchable``, or
    with more than ``max_owners`` changed owners) and the owners it replaces in the
    others, read back or carried."""
    whole = set(changes.zones)
    patches: dict[str, set[str]] = {}
    for zone in {*changes.owners, *changes.carried}:
        owners = changes.owners.get(zone, set()) | set(changes.carried.get(zone, ()))
        if zone in whole or zone not in patchable or len(owners) > max_owners:
            whole.add(zone)
        else:
            patches[zone] = owners
    # An owner both carried and named to be read was named by a later change: read.
    reads = {zone: changes.owners[zone] for zone in patches if zone in changes.owners}
    return Batch(tuple(sorted(whole)), patches, reads,
                 {zone: changes.carried[zone] for zone in patches if zone in changes.carried})
