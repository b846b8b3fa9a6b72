"""A signed zone's serial raised when its signatures are made again, so that secondaries
holding it signed transfer the new ones (``valis zone sign --denial nsec3``).

A secondary asks for a zone only when its serial moves; the signatures it holds from the
last transfer expire ``VALIDITY`` after the refresh window they were made in. So once per
refresh window the node holding the fence raises, by the zone's serial policy, the serial
of each NSEC3 zone it serves that no change has reached since the window began: the
raise is a change like any other (journaled, NOTIFY sent), and the secondary's IXFR is
answered with the whole zone signed in the new window. A zone changed within the window
already carries the window's signatures to its secondaries and is left alone.

Each zone is its own fenced transaction, its row locked first as every writer of a zone
does; a node fenced out raises nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from valis_core.dns.serial import raised_serial
from valis_core.dns.zone_diff import soa_serial, with_serial
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
    before ``since`` (UNIX time: the refresh window's start); the zones raised and their
    new serials. Raises ``FencedOut`` when ``standing`` is no longer the fence's."""
    raised = []
    for zone in zones:
        with fenced_transaction(conn, standing) as cur:
            if not lock_zone(cur, zone):
                continue
            cur.execute(
                "SELECT 1 FROM zone_signing WHERE zone = %s AND denial = %s", (zone, NSEC3)
            )
            if cur.fetchone() is None:
                continue
            cur.execute(
                "SELECT 1 FROM zone_journal WHERE zone = %s AND new_serial IS NOT NULL"
                " AND committed_at >= to_timestamp(%s) LIMIT 1",
                (zone, since),
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
