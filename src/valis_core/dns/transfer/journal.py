"""A zone's change journal as IXFR needs it (RFC 1995): the entries that lead from a
secondary's serial to the served one, condensed into one difference. Values in, values
out; no IO.

Each committed change of a zone is an ``Entry`` (migration 0006 writes them): the serial
before and after, the records removed and added (the SOA among them). ``chain`` finds
the entries leading from one serial to another, walking back from the newest entry that
ends at the target (the most recent history wins should a serial ever recur), or says
there is none: then the secondary gets the whole zone. ``condense`` nets the entries into
one ``Difference``: a record removed and later put back is no change, one added and later
removed is none either; the SOA is not among its records (IXFR frames each version with
SOAs of its own). ``apply`` is the secondary's side, for the properties.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import attrs

from valis_core.dns.wire.records import RecordRow

RecordKey = tuple[str, str, int, str]
"""A record as the journal compares records: owner (lowercased), type, TTL, rdata."""


@attrs.frozen
class Entry:
    """One committed change of a zone: from ``old_serial`` to ``new_serial``."""

    old_serial: int
    new_serial: int
    removed: tuple[RecordRow, ...]
    added: tuple[RecordRow, ...]


@attrs.frozen
class Difference:
    """What takes a zone from ``old_soa`` to its next version, SOA aside."""

    old_soa: RecordRow
    removed: tuple[RecordRow, ...]
    added: tuple[RecordRow, ...]
    versions: int
    """How many journal entries it condenses."""


def record_key(row: RecordRow) -> RecordKey:
    return (row.owner.lower(), row.rtype.upper(), row.ttl, row.rdata)


def chain(
    entries: Sequence[tuple[int, int]], old: int, new: int, *, limit: int = 100_000
) -> tuple[int, ...] | None:
    """The positions in ``entries`` (``(old_serial, new_serial)`` in commit order) of the
    changes leading from serial ``old`` to ``new``, oldest first; ``None`` when the
    journal does not reach back to ``old`` (or ``old`` is ``new``)."""
    if old == new:
        return None
    found: list[int] = []
    target = new
    position = len(entries)
    for _ in range(min(limit, len(entries))):
        step = next(
            (i for i in range(position - 1, -1, -1) if entries[i][1] == target), None
        )
        if step is None:
            return None
        found.append(step)
        position, target = step, entries[step][0]
        if target == old:
            return tuple(reversed(found))
    return None


def condense(entries: Sequence[Entry]) -> Difference | None:
    """One difference for ``entries`` (a chain, oldest first); ``None`` when the first
    entry does not hold the SOA it replaced (the secondary then gets the whole zone)."""
    if not entries:
        return None
    old_soa = next((r for r in entries[0].removed if r.rtype.upper() == "SOA"), None)
    if old_soa is None:
        return None
    removed: dict[RecordKey, RecordRow] = {}
    added: dict[RecordKey, RecordRow] = {}
    for entry in entries:
        for row in _data(entry.removed):
            key = record_key(row)
            if added.pop(key, None) is None:
                removed[key] = row
        for row in _data(entry.added):
            key = record_key(row)
            if removed.pop(key, None) is None:
                added[key] = row
    return Difference(old_soa, tuple(removed.values()), tuple(added.values()), len(entries))


def apply(rows: Iterable[RecordRow], difference: Difference, new_soa: RecordRow) -> set[RecordKey]:
    """The records (as keys) a secondary holding ``rows`` has after ``difference``."""
    held = {record_key(row) for row in rows if row.rtype.upper() != "SOA"}
    held -= {record_key(row) for row in difference.removed}
    held |= {record_key(row) for row in difference.added}
    return held | {record_key(new_soa)}


def _data(rows: Iterable[RecordRow]) -> Iterator[RecordRow]:
    return (row for row in rows if row.rtype.upper() != "SOA")
