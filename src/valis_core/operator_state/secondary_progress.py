"""Each serving secondary's progress in operator state (migrations 0017, 0018): the
serial it last took and when, kept across the resident's restarts, for a zone's own
secondaries and for those a catalog member has from its catalogs alike.

The resident writes what it saw since its last write (``save_progress``) and reads it
all back when it starts (``read_progress``); a sighting of a secondary removed in the
meantime is dropped, and an older sighting never replaces a newer one (two instances
across an evacuation, a write retried late).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from valis_core.dns.transfer.secondary_progress import Seen


def read_progress(conn: psycopg.Connection[Any]) -> tuple[Seen, ...]:
    """Every listed secondary's last sighting, oldest first."""
    rows = conn.execute(
        "SELECT zone, host(address), serial, extract(epoch FROM seen_at)::float8"
        " FROM zone_secondary_progress ORDER BY seen_at, zone, address"
    ).fetchall()
    return tuple(Seen(zone, address, int(serial), float(at)) for zone, address, serial, at in rows)


def save_progress(conn: psycopg.Connection[Any], seen: Sequence[Seen]) -> int:
    """Record ``seen`` (newer sightings replace older ones); how many rows were written.
    One statement: a secondary that no longer serves the zone (its own or by a catalog)
    is skipped, not an error."""
    if not seen:
        return 0
    cur = conn.execute(
        "INSERT INTO zone_secondary_progress (zone, address, serial, seen_at)"
        " SELECT s.zone, s.address, p.serial, to_timestamp(p.seen_at)"
        " FROM unnest(%s::text[], %s::inet[], %s::bigint[], %s::float8[])"
        "  AS p(zone, address, serial, seen_at)"
        " JOIN zone_serving_secondaries s ON s.zone = p.zone AND s.address = p.address"
        " ON CONFLICT (zone, address) DO UPDATE"
        "  SET serial = EXCLUDED.serial, seen_at = EXCLUDED.seen_at"
        "  WHERE zone_secondary_progress.seen_at <= EXCLUDED.seen_at",
        (
            [s.zone for s in seen],
            [s.address for s in seen],
            [s.serial for s in seen],
            [s.at for s in seen],
        ),
    )
    return cur.rowcount
