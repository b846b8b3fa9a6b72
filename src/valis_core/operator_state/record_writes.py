"""A node's writes to a zone's records, inside the fenced transaction its caller holds.

The owner terminus changes a zone in one transaction: ``lock_zone`` takes the zone's row
``FOR UPDATE`` (the same lock ``zones.replace_zone`` takes, so node updates and operator
imports of one zone run one after the other), ``owner_rows`` reads the touched owners'
records ``FOR UPDATE``, and ``write_row_changes`` deletes and inserts rows in two
statements, so the records triggers name the changed owners in their change notes and
the zone source re-reads only those (migration 0003). The zones row itself is not
updated: a change there would make every follower re-read the whole zone.

``write_update`` is the whole of that for a change shaped as a DNS UPDATE, the one path
of every node-side writer of records (the owner terminus, the edge's DNS-01 challenge):
the zone's serial policy raises the serial, the changed owners' resulting rows are checked
against the index being served, and the rows are written (the journal's triggers and the
change notes follow; the zone source swaps the change in and sends NOTIFY).

Owners are matched as the change notes name them: lowercased in ASCII only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex
from valis_core.operator_state.connection import OperatorStateError
from valis_core.owner.update import UpdateOutcome, UpdateRequest, apply_update, owners_to_read


def lock_zone(cur: psycopg.Cursor[Any], zone: str) -> bool:
    """Lock ``zone``'s row until the transaction ends; whether the zone exists."""
    cur.execute("SELECT name FROM zones WHERE name = %s FOR UPDATE", (zone,))
    return cur.fetchone() is not None


def serial_policy(cur: psycopg.Cursor[Any], zone: str) -> str | None:
    """The zone's serial policy (``valis zone policy``), by which a write raises its serial."""
    cur.execute("SELECT serial_policy FROM zones WHERE name = %s", (zone,))
    found = cur.fetchone()
    return None if found is None or found[0] is None else str(found[0])


def owner_rows(
    cur: psycopg.Cursor[Any], zone: str, owners: Iterable[str]
) -> tuple[RecordRow, ...]:
    """Every record of ``owners`` (ASCII-lowercased names) in ``zone``, locked."""
    cur.execute(
        "SELECT zone, owner, rtype, ttl, rdata FROM records"
        " WHERE zone = %s AND lower(owner COLLATE \"C\") = ANY(%s) FOR UPDATE",
        (zone, sorted(set(owners))),
    )
    return tuple(RecordRow(*row) for row in cur.fetchall())


def write_row_changes(
    cur: psycopg.Cursor[Any],
    zone: str,
    deletes: Sequence[RecordRow],
    adds: Sequence[RecordRow],
) -> None:
    """Delete exactly ``deletes`` (as stored) and insert ``adds``, all of ``zone``.

    Raises ``OperatorStateError`` when a row to delete is not there (the caller's
    transaction then rolls back) and lets the database's own refusals propagate.
    """
    if deletes:
        cur.execute(
            "DELETE FROM records r"
            " USING unnest(%s::text[], %s::text[], %s::text[]) AS d (owner, rtype, rdata)"
            " WHERE r.zone = %s AND r.owner = d.owner AND r.rtype = d.rtype"
            " AND r.rdata = d.rdata"
            # Implied by the owners' equality; it lets records_by_zone_owner find each row,
            # so the statement's cost follows the rows deleted, not the zone's size.
            ' AND lower(r.owner COLLATE "C") = lower(d.owner COLLATE "C")',
            (
                [row.owner for row in deletes],
                [row.rtype for row in deletes],
                [row.rdata for row in deletes],
                zone,
            ),
        )
        if cur.rowcount != len(deletes):
            raise OperatorStateError(
                f"zone {zone}: {len(deletes)} record(s) to delete but {cur.rowcount} found; "
                "the zone changed under a lock that should have held it (nothing written)"
            )
    if adds:
        cur.execute(
            "INSERT INTO records (zone, owner, rtype, ttl, rdata)"
            " SELECT %s, a.owner, a.rtype, a.ttl, a.rdata"
            " FROM unnest(%s::text[], %s::text[], %s::integer[], %s::text[])"
            " AS a (owner, rtype, ttl, rdata)",
            (
                zone,
                [row.owner for row in adds],
                [row.rtype for row in adds],
                [row.ttl for row in adds],
                [row.rdata for row in adds],
            ),
        )


def write_update(
    cur: psycopg.Cursor[Any],
    request: UpdateRequest,
    zone: str,
    *,
    served: Iterable[str],
    index: ZoneIndex,
    now: float,
) -> UpdateOutcome | None:
    """Decide and write ``request`` to ``zone`` inside the caller's fenced transaction:
    the zone's row locked, the touched owners' rows read and locked, ``apply_update``
    under the zone's serial policy at UNIX time ``now``, the changed owners' rows checked
    against ``index`` (the index being served; a refusal is REFUSED, nothing written),
    the changes written. ``None`` when the zone is not in operator state."""
    if not lock_zone(cur, zone):
        return None
    rows = owner_rows(cur, zone, owners_to_read(request, zone))

    def check(owners: tuple[str, ...], kept: tuple[RecordRow, ...]) -> None:
        index.with_owners_replaced(zone, owners, kept)

    outcome = apply_update(
        request, zone, rows, served=served, check=check,
        policy=serial_policy(cur, zone), now=now,
    )
    if outcome.changed:
        write_row_changes(cur, zone, outcome.deletes, outcome.adds)
    return outcome
