"""Each zone's change journal in operator state (migration 0006): reading the changes an
IXFR needs, and pruning by age and size.

The triggers of migration 0006 write the journal, whoever changes a zone's records; this
module only reads it and cuts it back. ``read_difference`` reads the sealed entries of a
zone and condenses those leading from a secondary's serial to the served one
(``valis_core.dns.transfer.journal``). ``prune`` keeps each zone's journal within an age and a
number of records, deleting at most ``batch`` entries per call, oldest first, so one
call is short however far behind pruning has fallen. The age yields to a listed
secondary that still needs an entry (its last serial, in ``zone_secondary_progress``, is
where the entry's chain starts or before), up to ``hold_max_age``: a slow secondary then
takes an IXFR, not the whole zone. The number of records never yields. ``commit_times``
says when the changes that made given versions were sealed (the commit → wire latency's
start).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from valis_core.dns.transfer.journal import Difference, Entry, chain, condense
from valis_core.dns.wire.records import RecordRow

DEFAULT_MAX_AGE = 7 * 86400
"""Seconds an entry is kept (``VALIS_JOURNAL_MAX_AGE``)."""
DEFAULT_MAX_RECORDS = 100_000
"""Removed and added records kept per zone (``VALIS_JOURNAL_MAX_RECORDS``)."""
DEFAULT_HOLD_MAX_AGE = 28 * 86400
"""Seconds an entry a listed secondary still needs is kept (``VALIS_JOURNAL_HOLD_MAX_AGE``;
never less than the max age)."""
PRUNE_BATCH = 1000


def read_difference(
    conn: psycopg.Connection[Any], zone: str, old: int, new: int
) -> Difference | None:
    """The condensed change of ``zone`` from serial ``old`` to ``new``, or ``None`` when
    the journal does not reach back to ``old``."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        sealed = conn.execute(
            "SELECT id, old_serial, new_serial FROM zone_journal"
            " WHERE zone = %s AND old_serial IS NOT NULL AND new_serial IS NOT NULL"
            " ORDER BY id",
            (zone,),
        ).fetchall()
        steps = chain([(int(o), int(n)) for _, o, n in sealed], old, new)
        if steps is None:
            return None
        ids = [int(sealed[i][0]) for i in steps]
        rows: dict[int, tuple[list[RecordRow], list[RecordRow]]] = {i: ([], []) for i in ids}
        found = conn.execute(
            "SELECT entry, added, owner, rtype, ttl, rdata FROM zone_journal_records"
            " WHERE entry = ANY(%s)",
            (ids,),
        )
        for entry, added, owner, rtype, ttl, rdata in found:
            rows[entry][1 if added else 0].append(RecordRow(zone, owner, rtype, ttl, rdata))
    entries = [
        Entry(int(sealed[i][1]), int(sealed[i][2]), tuple(rows[j][0]), tuple(rows[j][1]))
        for i, j in zip(steps, ids, strict=True)
    ]
    return condense(entries)


def prune(
    conn: psycopg.Connection[Any],
    *,
    max_age: int = DEFAULT_MAX_AGE,
    max_records: int = DEFAULT_MAX_RECORDS,
    hold_max_age: int = DEFAULT_HOLD_MAX_AGE,
    batch: int = PRUNE_BATCH,
) -> int:
    """Delete up to ``batch`` of the oldest entries that are beyond each zone's newest
    ``max_records`` records, or older than ``max_age`` seconds and not held for a listed
    secondary (or older than ``hold_max_age``); how many went."""
    with conn.transaction():
        cur = conn.execute(
            "WITH sized AS ("
            "  SELECT j.id, j.zone, j.committed_at,"
            "   sum(count(r.entry)) OVER (PARTITION BY j.zone ORDER BY j.id DESC) AS kept"
            "  FROM zone_journal j LEFT JOIN zone_journal_records r ON r.entry = j.id"
            "  WHERE j.new_serial IS NOT NULL GROUP BY j.id"
            "), held AS ("  # the first entry of the slowest listed secondary's chain
            "  SELECT j.zone, min(j.id) AS from_id"
            "  FROM zone_secondary_progress p"
            "  JOIN zone_journal j ON j.zone = p.zone AND j.old_serial = p.serial"
            "  WHERE j.new_serial IS NOT NULL GROUP BY j.zone"
            "), doomed AS ("
            "  SELECT s.id FROM sized s LEFT JOIN held h ON h.zone = s.zone"
            "  WHERE s.kept > %(records)s"
            "   OR (s.committed_at < now() - make_interval(secs => %(age)s)"
            "       AND (h.from_id IS NULL OR s.id < h.from_id"
            "            OR s.committed_at < now() - make_interval(secs => %(hold)s)))"
            "  ORDER BY s.id LIMIT %(batch)s"
            ") DELETE FROM zone_journal WHERE id IN (SELECT id FROM doomed)",
            {"records": max_records, "age": max_age, "hold": max(hold_max_age, max_age),
             "batch": batch},
        )
        return cur.rowcount


def commit_times(
    conn: psycopg.Connection[Any], versions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], float]:
    """When the journal entry that made each of ``versions`` (a zone and the serial its
    change ended at) was sealed (UNIX time; the entry's ``committed_at``); a version the
    journal has no entry for (a zone's first version, an entry pruned) is left out. Each
    is found from the zone's newest entries back (the index by zone and id), so a
    version just served costs a step or two whatever the journal holds."""
    if not versions:
        return {}
    rows = conn.execute(
        "SELECT v.zone, v.serial, extract(epoch FROM j.committed_at)::float8"
        " FROM unnest(%s::text[], %s::bigint[]) AS v (zone, serial),"
        " LATERAL (SELECT committed_at FROM zone_journal"
        "  WHERE zone = v.zone AND new_serial = v.serial ORDER BY id DESC LIMIT 1) AS j",
        ([zone for zone, _ in versions], [serial for _, serial in versions]),
    ).fetchall()
    return {(str(zone), int(serial)): float(at) for zone, serial, at in rows}
