"""A signed zone's serial raised when what signs it changes, so that secondaries holding
it signed transfer it again (``valis zone sign --denial nsec3``).

A secondary asks for a zone only when its serial moves, but an NSEC3 zone's signed form
changes without any change of its records: its signatures are made again each refresh
window (those a secondary holds expire ``VALIDITY`` after the window they were made in),
and its signing itself changes when the zone is switched to NSEC3 (a secondary may hold
it unsigned from before) or a rollover moves a step (the DNSKEY RRset, the signing key).
So the node holding the fence raises, by the zone's serial policy, the serial of each
NSEC3 zone it serves that no change has reached since the later of the refresh window's
start and the last change of its ``zone_signing`` or ``zone_rollover`` row: the raise is
a change like any other (journaled, NOTIFY sent), and the secondary's IXFR is answered
with the whole zone signed as it is now. A zone changed since then is left alone.

Each zone is its own fenced transaction, its row locked first as every writer of a zone
does; a node fenced out raises nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from valis_core.dns.zone.diff import soa_serial, with_serial
from valis_core.dns.zone.serial import raised_serial
from valis_core.fence import FenceState
from valis_core.operator_state.fence import fenced_transaction
from valis_core.operator_state.record_writes import (
    lock_zone,
    owner_rows,
    serial_policy,
    write_row_changes,
)
from valis_core.operator_state.zone_denial import NSEC3


def raise_unchanged_serials(
    conn: psycopg.Connection[Any],
    standing: FenceState,
    zones: Sequence[str],
    *,
    since: float,
    now: float,
) -> list[tuple[str, int]]:
    """Raise the serial of each NSEC3-signed zone of ``zones`` whose last change committed
    before ``since`` (UNIX time: the refresh window's start) or before its signing last
    changed; the zones raised and their new serials. Raises ``FencedOut`` when
    ``standing`` is no longer the fence's."""
    raised = []
    for zone in zones:
        with fenced_transaction(conn, standing) as cur:
            if not lock_zone(cur, zone):
                continue
            cur.execute(
                "SELECT greatest(to_timestamp(%s), s.set_at, r.set_at) FROM zone_signing s"
                " LEFT JOIN zone_rollover r ON r.zone = s.zone"
                " WHERE s.zone = %s AND s.denial = %s",
                (since, zone, NSEC3),
            )
            signing = cur.fetchone()
            if signing is None:
                continue
            cur.execute(
                "SELECT 1 FROM zone_journal WHERE zone = %s AND new_serial IS NOT NULL"
                " AND committed_at >= %s LIMIT 1",
                (zone, signing[0]),
            )
            if cur.fetchone() is not None:
                continue
            soa = [row for row in owner_rows(cur, zone, [zone.lower()]) if row.rtype == "SOA"]
            serial = soa_serial(soa)
            if len(soa) != 1 or serial is None:
                continue  # not servable as it stands; the zone source says why
            new = raised_serial(serial_policy(cur, zone), serial, now=now)
            write_row_changes(cur, zone, soa, [with_serial(soa[0], new)])
            raised.append((zone, new))
    return raised
